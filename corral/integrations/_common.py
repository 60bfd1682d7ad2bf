"""What every framework adapter shares: the specs, the text a model sees, and
one call driven with or without the framework's own approval.

Sync and async sandboxes both come in: a framework that awaits its tools gets
`AsyncSandbox.run` awaited, or a blocking `Sandbox.run` on a worker thread (so
the event loop keeps running while a confined worker does the call)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from corral.api import AsyncSandbox, Sandbox
from corral.host.flow import Approval, NoApprover

AnySandbox = Sandbox | AsyncSandbox
# What a framework answers when corral asks about a supervised call: True/False or
# an Approval, NoApprover when nobody can be asked; it may raise the framework's own
# "ask a person" exception, which leaves the call having acted on nothing.
Decide = Callable[[dict[str, Any]], bool | Approval | NoApprover]


def specs(sb: AnySandbox, *, strict: bool = False) -> list[dict[str, Any]]:
    """The tools the policy lets a model see, as `sb.tools()` lists them."""
    return sb.tools(strict=strict)


def model_text(result: dict[str, Any]) -> str:
    """What the model reads: a success's text (numbered lines, paging hints), or a
    failure's one-line message."""
    if result.get("ok"):
        return str(result.get("text", ""))
    return str(result["error"]["message"])


def image(result: dict[str, Any]) -> dict[str, str] | None:
    """A read image's {"media_type", "data" (base64)}, else None."""
    found = result.get("result", {}).get("image") if result.get("ok") else None
    return found if isinstance(found, dict) else None


def call(sb: Sandbox, tool: str, arguments: dict[str, Any], decide: Decide | None = None,
         ) -> dict[str, Any]:
    """One blocking call; a supervised step goes to `decide`, else to the sandbox's
    own approve callback."""
    if decide is None:
        return sb.call(tool, arguments)
    return sb.run(sb.flow(tool, arguments, can_ask=True), approve=decide)


async def acall(sb: AnySandbox, tool: str, arguments: dict[str, Any],
                decide: Decide | None = None) -> dict[str, Any]:
    """`call` for a framework that awaits: AsyncSandbox awaited, Sandbox on a thread."""
    if isinstance(sb, AsyncSandbox):
        if decide is None:
            return await sb.call(tool, arguments)
        return await sb.run(sb.flow(tool, arguments, can_ask=True), approve=decide)
    return await asyncio.to_thread(call, sb, tool, arguments, decide)


def blocking(sb: AnySandbox) -> Sandbox:
    """The sandbox, for a framework that calls its tools without awaiting."""
    if isinstance(sb, AsyncSandbox):
        raise TypeError("this framework calls its tools without awaiting: give it a Sandbox, "
                        "not an AsyncSandbox")
    return sb

