"""Tool specs in the shapes providers take: MCP, OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages; each plain or strict.

Strict (OpenAI's strict mode, Anthropic's strict tools) wants every property
required, closed objects, and only the keywords every provider's strict grammar
knows. The specs are already close: an optional argument takes null, meaning its
default. `strict_schema` makes every property required and moves what a strict
grammar refuses (default, length and range bounds) into the description, where
the model still reads it; corral enforces them at call time all the same.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from corral.tools.base import ERROR
from corral.tools.responses_patch import NATIVE_TOOL

# structuredContent is a success's result, or a failure's {"error": ...}: some
# clients (the TypeScript SDK, so the MCP Inspector) check error results against
# outputSchema too, and would turn a tool error into a protocol error.
FAILURE = {"type": "object", "properties": {"error": ERROR}, "required": ["error"]}

# Keywords every strict grammar takes (OpenAI strict mode, Anthropic strict tools);
# the others are said in the description.
STRICT_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "anyOf", "enum",
    "const", "description", "title",
})


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of `schema` a strict grammar accepts (see the module docstring)."""
    return _strict(copy.deepcopy(schema))


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    said = {key: node.pop(key) for key in list(node) if key not in STRICT_KEYWORDS}
    if said:
        words = "; ".join(f"{key}: {json.dumps(value)}" for key, value in said.items())
        node["description"] = f"{node['description']} ({words})" if "description" in node \
            else f"({words})"
    if node.get("type") == "object":
        properties = node.get("properties", {})
        node["properties"] = {key: _strict(prop) for key, prop in properties.items()}
        node["required"] = list(properties)
        node["additionalProperties"] = False
    if isinstance(node.get("items"), dict):
        node["items"] = _strict(node["items"])
    if isinstance(node.get("anyOf"), list):
        node["anyOf"] = [_strict(branch) for branch in node["anyOf"]]
    return node


def mcp_tool(spec: dict[str, Any], strict: bool) -> dict[str, Any]:
    """A `tools/list` entry, as MCP 2025-06-18 and later list it."""
    return {
        "name": spec["name"],
        "title": spec["title"],
        "description": spec["description"],
        "inputSchema": _parameters(spec, strict),
        "outputSchema": {"type": "object", "anyOf": [_with_text(spec["output_schema"]), FAILURE]},
        "annotations": spec["annotations"],
    }


# A success's structuredContent also carries the text the model should see (see
# corral/faces/mcp_render.py's tool_result).
TEXT = {"type": "string", "description": "What the model should see: the same text as the "
        "first content block (numbered lines, paging hints)."}


def _with_text(output: dict[str, Any]) -> dict[str, Any]:
    return {**output, "properties": {**output["properties"], "text": TEXT}}


def openai_tool(spec: dict[str, Any], strict: bool) -> dict[str, Any]:
    """A function tool of OpenAI's Chat Completions `tools` list."""
    function = {
        "name": spec["name"],
        "description": spec["description"],
        "parameters": _parameters(spec, strict),
    }
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def openai_responses_tool(spec: dict[str, Any], strict: bool) -> dict[str, Any]:
    """A function tool of OpenAI's Responses API; `strict` is always spelled out
    there, because that API takes a missing one as true. apply_patch is offered as
    the API's native tool, whose calls responses_patch.py maps onto ours."""
    if spec["name"] == "apply_patch":
        return dict(NATIVE_TOOL)
    return {
        "type": "function",
        "name": spec["name"],
        "description": spec["description"],
        "parameters": _parameters(spec, strict),
        "strict": strict,
    }


def anthropic_tool(spec: dict[str, Any], strict: bool) -> dict[str, Any]:
    """A client tool of Anthropic's Messages API `tools` list."""
    tool = {
        "name": spec["name"],
        "description": spec["description"],
        "input_schema": _parameters(spec, strict),
    }
    if strict:
        tool["strict"] = True
    return tool


def _parameters(spec: dict[str, Any], strict: bool) -> dict[str, Any]:
    return strict_schema(spec["input_schema"]) if strict else spec["input_schema"]


FORMATS: dict[str, Callable[[dict[str, Any], bool], dict[str, Any]]] = {
    "mcp": mcp_tool,
    "openai": openai_tool,
    "openai-responses": openai_responses_tool,
    "anthropic": anthropic_tool,
}
