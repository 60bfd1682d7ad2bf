"""What an MCP session has in flight, each in one record: a `tools/call` (Call:
its stage, its flow, a stateless round's state) and a request the server sent
the client (Question). The session (mcp_core) changes them; nothing else does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.faces.mcp_revisions import Revision
from corral.faces.mcp_state import RequestState
from corral.host.flow import CallFlow


@dataclass
class Call:
    """One `tools/call` in flight; its state lives here and nowhere else."""

    request_id: str | int
    revision: Revision
    capabilities: dict[str, Any]
    name: str
    arguments: dict[str, Any]
    can_ask: bool  # the face can carry a question to this call's client
    state: RequestState | None = None  # stateless revisions: this round's state
    responses: dict[str, Any] = field(default_factory=dict)  # stateless: inputResponses
    flow: CallFlow | None = None  # None until the client's roots are known
    stage: str = "queued"  # queued, running (a Run out), asking (a question out)
    cancelled: bool = False
    text: bool = False  # its structuredContent repeats the text (TEXT_CLIENTS)


@dataclass
class Question:
    """A request the server sent: roots/list (shared by the calls waiting for it)
    or one call's approval."""

    method: str
    calls: list[str | int]
