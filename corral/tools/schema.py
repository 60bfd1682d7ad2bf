"""A small JSON-Schema subset, enough for the tools' own schemas.

Supported keywords: type (one name or a list), anyOf, properties, required,
additionalProperties (false only), enum, minimum, maximum, minLength,
maxLength, items, minItems, maxItems, default.
Pure: the same schema is published to models (MCP) and enforced here, so the
two never drift. Every failure is invalid_arguments naming the field.

An optional property given as null means "the default", at any depth: strict
tool calling (OpenAI, openai-agents, langchain) marks every property required,
so a strict model sends null for each argument it does not mean.

An integer may also come as its canonical decimal text ("3", "-5": no sign on
zero, no leading zeros, no spaces, at most 19 digits) and a boolean as "true" or
"false": the MCP Inspector's CLI (0.15) sends every optional argument as a
string, since it converts by a top-level `type`, which an optional's anyOf has
not. The text is read exactly, then checked as the number would be (bounds).
"""

from __future__ import annotations

import re
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


_INTEGER_TEXT = re.compile(r"0|-?[1-9][0-9]{0,18}")
_BOOLEAN_TEXT = {"true": True, "false": False}


def _from_text(value: Any, name: str) -> Any:
    """An integer or boolean given as its exact text (see the module docstring), as
    that value; anything else unchanged."""
    if isinstance(value, str):
        if name == "integer" and _INTEGER_TEXT.fullmatch(value):
            return int(value)
        if name == "boolean" and value in _BOOLEAN_TEXT:
            return _BOOLEAN_TEXT[value]
    return value


def _fail(field: str, problem: str) -> CorralError:
    return CorralError("invalid_arguments", f"argument '{field}' {problem}.")


def check(value: Any, schema: dict[str, Any], field: str) -> Any:
    """`value` (found at `field`) with its objects' defaults filled in; raise
    invalid_arguments if it breaks `schema`."""
    if "anyOf" in schema:
        return _check_any(value, schema["anyOf"], field)
    types = schema.get("type")
    if isinstance(types, str):  # the usual case: no list and no generator to build
        if not _is_type(value, types):
            value = _from_text(value, types)
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
            return [check(item, item_schema, f"{field}[{i}]") for i, item in enumerate(value)]
    elif isinstance(value, dict):
        if "properties" in schema or "required" in schema:
            return _check_object(value, schema, field + ".")
    elif _is_type(value, "number"):
        _check_bounds(value, schema, field)
    return value


def _check_any(value: Any, branches: list[dict[str, Any]], field: str) -> Any:
    """anyOf: null where a branch allows it; else the first other branch that fits
    (with one such branch, its own message says what is wrong)."""
    if value is None and any(branch.get("type") == "null" for branch in branches):
        return None
    others = [branch for branch in branches if branch.get("type") != "null"]
    for branch in others[:-1]:
        try:
            return check(value, branch, field)
        except CorralError:
            continue
    if not others:
        raise _fail(field, "must be null")
    return check(value, others[-1], field)


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


def _check_object(value: dict[str, Any], schema: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The object checked, an optional property given as null dropped, defaults filled in."""
    properties = schema.get("properties", {})
    required = schema.get("required", ())
    for key in value:
        if not isinstance(key, str):
            raise CorralError("invalid_arguments", "argument names must be strings.")
        if key not in properties and schema.get("additionalProperties", True) is False:
            raise CorralError(
                "invalid_arguments",
                f"unknown argument '{prefix}{key}'" + did_you_mean(key, properties, "."),
            )
    for key in required:
        if key not in value:
            raise CorralError("invalid_arguments", f"missing required argument '{prefix}{key}'.")
    filled: dict[str, Any] = {}
    for key, item in value.items():
        if key not in properties:
            filled[key] = item
        elif item is not None or key in required:
            filled[key] = check(item, properties[key], prefix + key)
    for key, prop in properties.items():
        if key not in filled and "default" in prop:
            filled[key] = prop["default"]
    return filled


def validate(schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """The arguments checked against an object schema, with defaults filled in."""
    if not isinstance(arguments, dict):
        raise CorralError("invalid_arguments", "arguments must be a JSON object.")
    return _check_object(arguments, schema, "")
