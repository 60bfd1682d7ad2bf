"""Every tool by name, argument validation, and `execute`: one CallRequest in, one
Answer out, never an exception (it runs inside the worker's serve loop)."""

from __future__ import annotations

import os
from typing import Any

from corral.calls.messages import Answer, CallRequest, Meta, error_answer
from corral.errors import CorralError, did_you_mean
from corral.history.keeper import Keeper
from corral.tools import schema
from corral.tools.access import as_given
from corral.tools.base import Context, Tool
from corral.tools.directories import DIRECTORY_TOOLS
from corral.tools.edit import EDIT_TOOLS
from corral.tools.files import FILE_TOOLS
from corral.tools.listing import LISTING_TOOLS
from corral.tools.made import CountingKeep
from corral.tools.patch import PATCH_TOOLS
from corral.tools.preview import previewed
from corral.tools.read import READ_TOOLS
from corral.tools.roots import ROOT_TOOLS
from corral.tools.search import SEARCH_TOOLS
from corral.tools.write import WRITE_TOOLS

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in [
        *READ_TOOLS, *WRITE_TOOLS, *EDIT_TOOLS, *PATCH_TOOLS, *LISTING_TOOLS, *FILE_TOOLS,
        *DIRECTORY_TOOLS,
        *SEARCH_TOOLS, *ROOT_TOOLS,
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


def _unexpected(tool: str, error: Exception) -> str:
    # Never str(error): an OSError's text may hold a host path.
    if isinstance(error, OSError) and error.errno is not None:
        return f"{tool or 'the call'} failed: {os.strerror(error.errno)}."
    return f"{tool or 'the call'} failed unexpectedly ({type(error).__name__})."


def execute(ctx: Context, request: CallRequest) -> Answer:
    """Run one call: the contract's result, or its error, with the Meta the host
    reads (touched paths, bytes, needs_approval, history)."""
    name = request.tool
    call = ctx.for_call(
        approved=frozenset(request.approved), grants=request.grants,
        within=None if request.within is None else ctx.roots.narrow(list(request.within)),
        tool=shown_name(name) if isinstance(name, str) else "",
    )
    size = 0
    keeper: Keeper | None = None
    tool: Tool | None = None
    args: dict[str, Any] = {}
    try:
        tool = lookup(name)
        if ctx.history is not None and tool.writes:
            call.keep = keeper = Keeper(ctx.history, ctx.roots.workspace.path, tool.name)
        if tool.writes:  # the directories it makes count for the files quota too
            call.keep = CountingKeep(call.keep)
        call.seen = dict(request.seen or {})
        # Checked here too, not only in the host: the worker trusts no request.
        mode = ctx.policy.tool_mode(tool.name, writes=tool.writes)
        if mode == "deny":
            why = ctx.policy.disabled_reason(tool.name, writes=tool.writes)
            raise CorralError("tool_disabled", why)
        call.supervised = mode == "supervised"
        args = validate(tool, request.arguments)
        outcome = tool.run(call, args)
        size = outcome.bytes
        return Answer(True, tool.name, outcome.result, outcome.text,
                      meta=_meta(call, size, keeper), id=request.id)
    except CorralError as error:
        failure = as_given(call, error)
    except Exception as error:  # the worker must answer every request
        failure = CorralError("io_error", _unexpected(call.tool, error))
    diff = None
    if failure.code == "approval_required" and call.needs_approval and tool is not None:
        try:  # what the person asked sees: sizes and the change's diff
            call.needs_approval, diff = previewed(call, tool, args, call.needs_approval)
        except Exception:  # a preview that fails leaves the question plain, still asked
            diff = None
    return error_answer(call.tool, failure, meta=_meta(call, size, keeper, diff), id=request.id)


def _meta(call: Context, size: int, keeper: Keeper | None, diff: str | None = None) -> Meta:
    """What the call did, for the host (never shown to a caller)."""
    return Meta(
        tuple(call.touched), size, tuple(call.needs_approval),
        keeper.stored if keeper is not None else 0, call.wrote,
        tuple(keeper.ids) if keeper is not None else (), tuple(call.grants_used), diff,
        call.keep.made if isinstance(call.keep, CountingKeep) else 0,
        tuple(keeper.done) if keeper is not None else (),
    )
