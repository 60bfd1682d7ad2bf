"""What the MCP session (mcp_core.McpSession) asks its face to do: the typed
values it returns for every input, as h11's events are.

- `Reply(message)`: the response to a client's request (exactly once per
  request, unless the client cancelled it; never for a notification or a
  response).
- `Send(message, call, timeout)`: what the server itself starts, on the
  handshake revisions only, on behalf of the call `call`: `elicitation/create`
  and `roots/list` requests, and `notifications/cancelled` for a question that
  went unanswered. Their answers come back as messages to `handle`; a
  question's `timeout` is kept by the face, which says `timed_out` when it
  passes.
- `Run(call, sandbox, request)`: run one Submit step of the call's CallFlow in
  a confined worker (`sandbox.submit`, waiting as the face's WaitPolicy says),
  then report the answer, or the exception, with `submitted`. A call waiting
  for the client holds no Run: it goes on when the answer arrives.
- `Drop(call)`: the call ended unanswered (the client withdrew it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.api import Sandbox
from corral.calls.messages import CallRequest


@dataclass(frozen=True)
class Reply:
    """Send `message`, the response to the client's request `message["id"]`."""

    message: dict[str, Any]


@dataclass(frozen=True)
class Send:
    """Send `message`, which the server starts (handshake revisions only), on the
    way back of the call `call`. A question (it has an id) waits at most `timeout`
    seconds: then the face says `timed_out(id)`."""

    message: dict[str, Any]
    call: str | int
    timeout: float | None = None


@dataclass(frozen=True)
class Run:
    """Run `request` (a Submit step of call `call`) in a confined worker with
    `sandbox.submit`, then tell the session `submitted(call, answer)`."""

    call: str | int
    sandbox: Sandbox
    request: CallRequest


@dataclass(frozen=True)
class Drop:
    """The call `call` ended unanswered (its client withdrew it): no response comes."""

    call: str | int


Action = Reply | Send | Run | Drop
