"""corral as a LangChain toolkit: `CorralToolkit(sb).get_tools()` is one
StructuredTool per tool `sb.tools()` lists, with corral's JSON schemas as they are.

A tool returns corral's text to the model (numbered lines, paging hints) and the
result dict as the ToolMessage's artifact; a refused or failed call is a
ToolException, which LangChain turns into a ToolMessage with status "error" and
corral's one-line message. LangChain has no per-call approval a tool can ask
for (its human-in-the-loop middleware asks by tool name before a call, and cannot
see the file a path resolves to), so supervised calls go to the sandbox's
approve callback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool, BaseToolkit, StructuredTool, ToolException
from pydantic import ConfigDict

from corral.api import AsyncSandbox, Sandbox
from corral.integrations._common import AnySandbox, acall, image, model_text, specs


class CorralToolkit(BaseToolkit):
    """The sandbox's tools as LangChain tools: `CorralToolkit(sb).get_tools()`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    sandbox: Any  # a Sandbox or AsyncSandbox (pydantic cannot check either: no schema)

    def __init__(self, sandbox: AnySandbox, **kwargs: Any) -> None:
        # positional, as the other adapters take it; BaseToolkit's own __init__
        # (pydantic's) knows no field `sandbox`, so it goes by the dict
        super().__init__(**{"sandbox": sandbox}, **kwargs)

    def get_tools(self) -> list[BaseTool]:
        return [structured_tool(self.sandbox, spec) for spec in specs(self.sandbox)]


def structured_tool(sb: AnySandbox, spec: dict[str, Any]) -> StructuredTool:
    """One corral tool as a StructuredTool: corral's schema, corral's text."""
    name = spec["name"]

    async def arun(**arguments: Any) -> tuple[Any, dict[str, Any]]:
        return _answer(await acall(sb, name, arguments))

    return StructuredTool(
        name=name, description=spec["description"], args_schema=spec["input_schema"],
        func=None if isinstance(sb, AsyncSandbox) else _blocking(sb, name), coroutine=arun,
        response_format="content_and_artifact", handle_tool_error=True,
    )


def _blocking(sb: Sandbox, name: str) -> Callable[..., tuple[Any, dict[str, Any]]]:
    def run(**arguments: Any) -> tuple[Any, dict[str, Any]]:
        return _answer(sb.call(name, arguments))
    return run


def _answer(result: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    if not result.get("ok"):
        raise ToolException(model_text(result))
    picture = image(result)
    if picture is None:
        return model_text(result), result
    blocks = [{"type": "text", "text": model_text(result)},
              {"type": "image", "base64": picture["data"], "mime_type": picture["media_type"]}]
    return blocks, result
