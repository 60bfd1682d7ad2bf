"""A stateless (2026-07-28) call's `requestState`: what it carries between
rounds (the client's roots, the approvals given), sealed with HMAC-SHA256 under
the process's key or the server's `--state-key-file` key (faces/state_key.py),
bound to its call (a digest of the tool name and arguments) and good for
STATE_TTL_S. The client holds it, so it is input: a forged, stale or
replayed-onto-another-call state is refused (-32602)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from corral.faces.mcp_jsonrpc import INVALID_PARAMS, ProtocolError

# As long as a handshake client's approval question waits (mcp_core.ELICITATION_TIMEOUT_S):
# the user answering a stateless call's question has the same time between two rounds.
STATE_TTL_S = 600.0

# One key per process: a requestState is good for any session of this server process.
PROCESS_KEY = secrets.token_bytes(32)


@dataclass
class RequestState:
    """What a stateless call carries between rounds (sealed into `requestState`)."""

    call: str  # digest of the tool name and arguments it belongs to
    roots: list[str] | None = None  # the client's roots, once read
    read_roots: bool = False  # roots were asked and answered (None: no narrowing)
    approved: list[str] = field(default_factory=list)  # approval keys the user accepted
    asked: list[str] = field(default_factory=list)  # keys of the last round's questions

    def seal(self, key: bytes = PROCESS_KEY) -> str:
        body = json.dumps(
            {**vars(self), "expires": time.time() + STATE_TTL_S}, separators=(",", ":")
        ).encode()
        mac = hmac.new(key, body, hashlib.sha256).digest()
        return f"{_b64(body)}.{_b64(mac)}"

    @classmethod
    def unseal(cls, token: object, call: str, key: bytes = PROCESS_KEY) -> RequestState:
        refused = ProtocolError(
            INVALID_PARAMS, "requestState was not issued for this call by this server, or expired"
        )
        if not isinstance(token, str) or token.count(".") != 1:
            raise refused
        try:
            body, mac = (base64.urlsafe_b64decode(part + "==") for part in token.split("."))
        except ValueError as exc:
            raise refused from exc
        if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
            raise refused
        data = json.loads(body)
        if data.pop("expires") < time.time() or data["call"] != call:
            raise refused
        return cls(**data)


def open_round(
    params: dict[str, Any], name: str, arguments: dict[str, Any], key: bytes,
) -> tuple[RequestState, dict[str, Any]]:
    """A stateless `tools/call` round: the state its `requestState` brings (a new
    one if none), and its `inputResponses`, the client's answers to that state's
    questions."""
    token = params.get("requestState")
    # The digest (of a write's whole content) only when a state is read or made.
    state = RequestState("") if token is None else RequestState.unseal(
        token, call_digest(name, arguments), key)
    responses = params.get("inputResponses")
    return state, responses if isinstance(responses, dict) else {}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def call_digest(name: str, arguments: dict[str, Any]) -> str:
    canonical = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
