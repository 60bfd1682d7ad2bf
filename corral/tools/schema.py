"""A small JSON-Schema subset, enough for the tools' own schemas.

Supported keywords: type (one name or a list), properties, required,
additionalProperties (false only), enum, minimum, maximum, minLength,
maxLength, items, minItems, maxItems, default (top-level properties only).
Pure: the same schema is published to models (MCP) and enforced here, so the
two never drift. Every failure is invalid_arguments naming the field.
"""

from __future__ import annotations

from typing import Any

from corral.errors import CorralError, did_you_mean

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _is_type(value: Any, name: str) -> bool:
    # bool is an int subclass in Python; JSON keeps them apart.
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    if name == "null":
        return value is None
    raise ValueError(f"unsupported schema type {name!r}")


def _fail(field: str, problem: str) -> CorralError:
    return CorralError("invalid_arguments", f"argument '{field}' {problem}.")


def check(value: Any, schema: dict[str, Any], field: str) -> None:
    """Raise invalid_arguments if `value` (found at `field`) breaks `schema`."""
    types = schema.get("type")
    if isinstance(types, str):  # the usual case: no list and no generator to build
        if not _is_type(value, types):
            raise _fail(field, f"must be {_TYPE_NAMES[types]}")
    elif types is not None and not any(_is_type(value, name) for name in types):
        wanted = " or ".join(_TYPE_NAMES[name] for name in types)
        raise _fail(field, f"must be {wanted}")
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(choice) for choice in schema["enum"])
        raise _fail(field, f"must be one of {choices}")
    # a value is one of these kinds at most, so the first that matches is the only one
    if isinstance(value, str):
        _check_length(len(value), schema, "minLength", "maxLength", field, "characters")
    elif isinstance(value, list):
        _check_length(len(value), schema, "minItems", "maxItems", field, "items")
        item_schema = schema.get("items")
        if item_schema is not None:
            for index, item in enumerate(value):
                check(item, item_schema, f"{field}[{index}]")
    elif isinstance(value, dict):
        if "properties" in schema or "required" in schema:
            _check_object(value, schema, field + ".")
    elif _is_type(value, "number"):
        _check_bounds(value, schema, field)


def _check_bounds(value: float, schema: dict[str, Any], field: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise _fail(field, f"must be at least {schema['minimum']}, got {value}")
    if "maximum" in schema and value > schema["maximum"]:
        raise _fail(field, f"must be at most {schema['maximum']}, got {value}")


def _check_length(
    size: int, schema: dict[str, Any], low: str, high: str, field: str, unit: str
) -> None:
    if low in schema and size < schema[low]:
        raise _fail(field, f"must have at least {schema[low]} {unit}, got {size}")
    if high in schema and size > schema[high]:
        raise _fail(field, f"must have at most {schema[high]} {unit}, got {size}")


def _check_object(value: dict[str, Any], schema: dict[str, Any], prefix: str) -> None:
    properties = schema.get("properties", {})
    for key in value:
        if not isinstance(key, str):
            raise CorralError("invalid_arguments", "argument names must be strings.")
        if key not in properties and schema.get("additionalProperties", True) is False:
            raise CorralError(
                "invalid_arguments",
                f"unknown argument '{prefix}{key}'" + did_you_mean(key, properties, "."),
            )
    for key in schema.get("required", ()):
        if key not in value:
            raise CorralError("invalid_arguments", f"missing required argument '{prefix}{key}'.")
    for key, item in value.items():
        if key in properties:
            check(item, properties[key], prefix + key)


def validate(schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """The arguments checked against an object schema, with defaults filled in."""
    if not isinstance(arguments, dict):
        raise CorralError("invalid_arguments", "arguments must be a JSON object.")
    _check_object(arguments, schema, "")
    filled = dict(arguments)
    for key, prop in schema.get("properties", {}).items():
        if key not in filled and "default" in prop:
            filled[key] = prop["default"]
    return filled
