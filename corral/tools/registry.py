"""Every tool by name, argument validation, and `execute`: one request in, one
result dict out, never an exception (it runs inside the worker's serve loop)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from corral.errors import CorralError, did_you_mean
from corral.history.keeper import Keeper
from corral.tools import schema
from corral.tools.access import as_given
from corral.tools.base import Context, Tool
from corral.tools.edit import EDIT_TOOLS
from corral.tools.files import FILE_TOOLS
from corral.tools.listing import LISTING_TOOLS
from corral.tools.read import READ_TOOLS
from corral.tools.roots import ROOT_TOOLS
from corral.tools.search import SEARCH_TOOLS
from corral.tools.write import WRITE_TOOLS

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in [
        *READ_TOOLS, *WRITE_TOOLS, *EDIT_TOOLS, *LISTING_TOOLS, *FILE_TOOLS, *SEARCH_TOOLS,
        *ROOT_TOOLS,
    ]
}


SHOWN_NAME_CHARS = 100  # a caller's tool name is cut to this in results and the audit log


def shown_name(name: Any) -> str:
    """A caller's tool name fit to echo: any size, any JSON value (repr of a deeply
    nested list would raise RecursionError, a huge string would flood the audit log)."""
    if not isinstance(name, str):
        return f"<{type(name).__name__}>"
    return name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "..."


def lookup(name: Any) -> Tool:
    tool = TOOLS.get(name) if isinstance(name, str) else None
    if tool is None:
        raise CorralError(
            "unknown_tool",
            f"there is no tool named {shown_name(name)!r}" + did_you_mean(name, TOOLS, "."),
        )
    return tool


def validate(tool: Tool, arguments: Any) -> dict[str, Any]:
    """The arguments checked against the tool's schema, defaults filled in."""
    return schema.validate(tool.input_schema, arguments)


def error_result(tool: str, error: CorralError) -> dict[str, Any]:
    """A tool's failure as the worker sends it (the host reads it as messages.Answer;
    meta is added by execute)."""
    return {"ok": False, "tool": tool, "error": error.to_dict()}


def _unexpected(tool: str, error: Exception) -> str:
    # Never str(error): an OSError's text may hold a host path.
    if isinstance(error, OSError) and error.errno is not None:
        return f"{tool or 'the call'} failed: {os.strerror(error.errno)}."
    return f"{tool or 'the call'} failed unexpectedly ({type(error).__name__})."


def execute(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    """Run one request {"tool", "arguments", "approved"} and return the contract's
    result dict plus "meta" (touched paths, bytes, needs_approval) for the host."""
    name = request.get("tool")
    within = request.get("within")
    call = dataclasses.replace(
        ctx, approved=frozenset(request.get("approved") or ()), touched=[],
        within=ctx.roots.narrow(within) if isinstance(within, list) else None,
        tool=shown_name(name) if isinstance(name, str) else "", needs_approval=[], given={},
        wrote={},
    )
    size = 0
    try:
        tool = lookup(name)
        if ctx.history is not None and tool.writes:
            call.keep = Keeper(ctx.history, ctx.roots.workspace.path, tool.name)
        call.seen = request.get("seen") or {}
        # Checked here too, not only in the host: the worker trusts no request.
        mode = ctx.policy.tool_mode(tool.name, writes=tool.writes)
        if mode == "deny":
            why = ctx.policy.disabled_reason(tool.name, writes=tool.writes)
            raise CorralError("tool_disabled", why)
        call.supervised = mode == "supervised"
        outcome = tool.run(call, validate(tool, request.get("arguments", {})))
        size = outcome.bytes
        response: dict[str, Any] = {
            "ok": True, "tool": tool.name, "result": outcome.result, "text": outcome.text
        }
    except CorralError as error:
        response = error_result(call.tool, as_given(call, error))
    except Exception as error:  # the worker must answer every request
        response = error_result(call.tool, CorralError("io_error", _unexpected(call.tool, error)))
    response["meta"] = {  # sandbox/messages.py's Meta, on the wire
        "touched": [t.to_wire() for t in call.touched],
        "bytes": size,
        "needs_approval": [n.to_wire() for n in call.needs_approval],
    }
    if call.keep is not None and call.keep.stored:
        response["meta"]["history_bytes"] = call.keep.stored
    if call.keep is not None and call.keep.ids:
        response["meta"]["history_ids"] = call.keep.ids
    if call.wrote:
        response["meta"]["seen"] = call.wrote
    return response
