"""corral as a pydantic-ai toolset: `Agent(model, toolsets=[CorralToolset(sb)])`.

One tool per tool `sb.tools()` lists, with corral's JSON schemas; corral checks
the arguments itself, so the toolset's validator passes them through. The model
sees corral's text (numbered lines, paging hints; a read image as an image); the
result dict is the ToolReturn's metadata. A refused or failed call raises
ToolFailed: the model sees corral's one-line message as a failed tool result,
and no retry budget is spent on it.

Approvals are pydantic-ai's deferred tools. When corral asks about a supervised
call (in the worker, once the call's paths are resolved, before it acts), the
toolset raises ApprovalRequired with corral's request as the call's metadata
(`targets`, `diff`, ...), so the run ends with DeferredToolRequests. Answer with
DeferredToolResults(approvals={call_id: True}) and the call runs again, its
approval steps answered yes; `metadata={call_id: {"remember": "path"}}`
(or "rule") makes that a remembered grant, as `corral.Approval` does."""

from __future__ import annotations

import base64
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired, ToolFailed
from pydantic_ai.messages import BinaryContent, ToolReturn
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from corral.host.flow import Approval
from corral.integrations._common import AnySandbox, Decide, acall, image, model_text, specs

_PASS_THROUGH = SchemaValidator(schema=core_schema.any_schema())  # corral checks arguments
# pydantic-ai's retry budget per tool: only argument errors pydantic-ai itself finds
# spend it (corral's own failures raise ToolFailed, which does not).
MAX_RETRIES = 1


class CorralToolset(AbstractToolset[Any]):
    """The sandbox's tools, in process."""

    def __init__(self, sandbox: AnySandbox, *, id: str | None = None) -> None:
        self.sandbox = sandbox
        self._id = id

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            spec["name"]: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(name=spec["name"], description=spec["description"],
                                        parameters_json_schema=spec["input_schema"]),
                max_retries=MAX_RETRIES, args_validator=_PASS_THROUGH)
            for spec in specs(self.sandbox)
        }

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        result = await acall(self.sandbox, name, tool_args, _decider(ctx))
        if not result.get("ok"):
            raise ToolFailed(model_text(result))
        picture = image(result)
        if picture is None:
            return ToolReturn(model_text(result), metadata=result)
        content = BinaryContent(base64.b64decode(picture["data"]), media_type=picture["media_type"])
        return ToolReturn([model_text(result), content], metadata=result)


def _decider(ctx: RunContext[Any]) -> Decide:
    """Answers corral's approval steps for this call: yes once a person approved it
    through DeferredToolResults, else ask pydantic-ai to defer the call."""
    def decide(request: dict[str, Any]) -> Approval:
        if not ctx.tool_call_approved:
            raise ApprovalRequired(metadata=request)
        metadata = ctx.tool_call_metadata if isinstance(ctx.tool_call_metadata, dict) else {}
        return Approval(True, remember=metadata.get("remember", "once"))
    return decide
