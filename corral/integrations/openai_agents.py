"""corral in the OpenAI Agents SDK: `tools(sb)`, one FunctionTool per tool
`sb.tools()` lists, with corral's strict schemas; and `CorralFilesystem(sb)`, a
Sandbox Agents capability that puts corral's confined `view_image` and
`apply_patch` where the SDK's own Filesystem capability puts its.

A tool's output is corral's text (numbered lines, paging hints; a read image as
an image); a refused or failed call's output is corral's one-line message, the
only failure a function call's output can carry.

Approvals: a tool whose mode is `supervised` asks every call, so it is offered
with `needs_approval=True`, and the run stops with an interruption for the host
to approve or reject (`result.interruptions`, `state.approve(...)`); an approved
call's approval steps are answered yes. A path a `supervised` rule covers is only
known once the worker has resolved it, after the SDK's approval has been
decided: those calls go to the sandbox's approve callback (without one, they
fail approval_required)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeAlias

from agents import FunctionTool, ToolOutputImage
from agents.sandbox.capabilities.filesystem import Filesystem, FilesystemToolSet
from agents.tool import CustomTool
from agents.tool_context import ToolContext

from corral.errors import CorralError
from corral.integrations._common import AnySandbox, Decide, acall, image, model_text, specs
from corral.tool_table import APPLY_PATCH, PATCH_ARGUMENT
from corral.tools.responses_patch import patch_arguments

ViewImageOutput: TypeAlias = ToolOutputImage | str


def tools(sb: AnySandbox) -> list[FunctionTool]:
    """The sandbox's tools as FunctionTools, strict schemas (optional arguments are
    null, meaning their default)."""
    return [_function_tool(sb, spec) for spec in specs(sb, strict=True)]


def _function_tool(sb: AnySandbox, spec: dict[str, Any]) -> FunctionTool:
    name = spec["name"]
    asks = _asks_every_call(sb, name)

    async def invoke(ctx: ToolContext[Any], raw: str) -> Any:
        try:
            arguments = json.loads(raw) if raw else {}
        except json.JSONDecodeError as error:
            return f"the arguments are not JSON: {error.msg}."
        if not isinstance(arguments, dict):
            return "the arguments must be a JSON object."
        return _output(await acall(sb, name, arguments, _approved if asks else None))

    return FunctionTool(name=name, description=spec["description"],
                        params_json_schema=spec["input_schema"], on_invoke_tool=invoke,
                        strict_json_schema=True, needs_approval=asks)


def _asks_every_call(sb: AnySandbox, tool: str) -> bool:
    return sb.policy.tool_modes.get(tool) == "supervised"


def _approved(request: dict[str, Any]) -> bool:
    """A call the SDK ran has been approved through it (needs_approval): yes."""
    return True


def _output(result: dict[str, Any]) -> Any:
    picture = image(result)
    if picture is None:
        return model_text(result)
    return [model_text(result), _image_output(picture)]


def _image_output(picture: dict[str, str]) -> ToolOutputImage:
    return ToolOutputImage(image_url=f"data:{picture['media_type']};base64,{picture['data']}")


class CorralFilesystem(Filesystem):
    """The SDK's Filesystem capability with corral's tools in place of its own:
    `SandboxAgent(..., capabilities=[CorralFilesystem(sb), Shell()])`. Paths are the
    corral sandbox's (relative to its workspace), whatever the SDK's session is."""

    def __init__(self, sandbox: AnySandbox, **kwargs: Any) -> None:
        # The sandbox lives in the closure, not in a field: the SDK clones a
        # capability's fields for every run, and a sandbox must not be copied.
        super().__init__(configure_tools=_configurator(sandbox), **kwargs)


def _configurator(sb: AnySandbox) -> Callable[[FilesystemToolSet], None]:
    def configure(toolset: FilesystemToolSet) -> None:
        toolset.view_image = view_image_tool(sb)  # type: ignore[assignment]  # any FunctionTool
        toolset.apply_patch = apply_patch_tool(  # type: ignore[assignment]  # any CustomTool
            sb, toolset.apply_patch.description, toolset.apply_patch.format)
    return configure


def view_image_tool(sb: AnySandbox) -> FunctionTool:
    """`view_image` as corral's read_file of an image, confined."""
    asks = _asks_every_call(sb, "read_file")

    async def invoke(ctx: ToolContext[Any], raw: str) -> ViewImageOutput:
        try:
            path = json.loads(raw).get("path")
        except (json.JSONDecodeError, AttributeError):
            path = None
        if not isinstance(path, str) or not path:
            return "view_image needs a path."
        result = await acall(sb, "read_file", {"path": path}, _approved if asks else None)
        picture = image(result)
        if picture is None:
            return model_text(result) if not result.get("ok") else f"{path} is not an image."
        return _image_output(picture)

    schema = {"type": "object", "additionalProperties": False, "required": ["path"],
              "properties": {"path": {"type": "string", "description":
                                      "Image to view: relative to the workspace."}}}
    return FunctionTool(name="view_image", description="Show an image (png, jpeg, gif, webp, "
                        "bmp) from the workspace.", params_json_schema=schema,
                        on_invoke_tool=invoke, strict_json_schema=True, needs_approval=asks)


def apply_patch_tool(sb: AnySandbox, description: str, format: object) -> CustomTool:
    """The SDK's freeform `apply_patch` (its description and grammar) run by
    corral's apply_patch: one patch, all of it or nothing. A JSON input (the SDK's
    operations form) is mapped as corral maps Responses apply_patch_calls."""
    asks = _asks_every_call(sb, APPLY_PATCH)
    decide: Decide | None = _approved if asks else None

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        try:
            patch = _patch_text(raw)
        except CorralError as error:
            return error.message
        return model_text(await acall(sb, APPLY_PATCH, {PATCH_ARGUMENT: patch}, decide))

    return CustomTool(name=APPLY_PATCH, description=description, format=format,
                      on_invoke_tool=invoke, needs_approval=asks)


def _patch_text(raw: str) -> str:
    """The patch a custom call's input holds: the text itself, or its JSON
    operations ({"type", "path", "diff"}, one, a list, or {"operations": [...]})
    joined into one patch."""
    if not raw.lstrip().startswith(("{", "[")):
        return raw
    try:
        payload = json.loads(raw)
    except json.JSONDecodeError as error:
        raise CorralError("invalid_arguments", f"the patch is not JSON: {error.msg}.") from None
    if isinstance(payload, dict):
        payload = payload.get("operations", [payload.get("operation", payload)])
    if not isinstance(payload, list) or not all(isinstance(op, dict) for op in payload):
        raise CorralError("invalid_arguments", "apply_patch JSON input holds operations: "
                          "objects with a type, a path and a diff.")
    body = [line for op in payload for line in patch_arguments(op)["patch"].split("\n")[1:-2]]
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"]) + "\n"

