"""MCP over stdio: newline-delimited JSON-RPC 2.0, served by a small loop of our own.

Why not the official `mcp` SDK: on this machine its servers spend about 590 µs
on a bare `ping` and 440 ms to start, more than the whole file operation costs,
and they pull a web stack (starlette, uvicorn, an HTTP client, pydantic) into a
security tool.
The protocol surface a file-tool server needs is small: `initialize` with
version negotiation, `ping`, `tools/list`, `tools/call`, the `initialized` and
`cancelled` notifications, and `elicitation/create` sent to the client. The
SDK's own stdio client is the conformance test (tests/test_mcp.py).

Concurrency (stdio.LineServer): one thread at a time reads messages; each
`tools/call` runs on a thread of a pool, so calls overlap across the sandbox's
workers and a call waiting for the user's answer to an elicitation blocks
nobody else. A call that arrives with no other call running is run by the
reading thread itself (no thread hand-off); once it is slow (pool.SLOW_CALL_S)
or asks the user, a pool thread takes over reading. Writes to stdout are
serialised by one lock.

Decisions the spec leaves to us:
- Revisions 2024-11-05 to 2025-11-25 (the `initialize` handshake). The
  stateless 2026-07-28 era is not spoken: its `server/discover` probe gets
  -32601, on which SDK clients fall back to `initialize`.
- The sandbox is opened on `initialize`, when the client's capabilities say
  whether anyone can approve a supervised call.
- An unknown tool name is a JSON-RPC error (-32602), as the spec's example
  shows; every other failure, including a tool the policy denies, is a tool
  result with `isError: true` and the contract's error in `structuredContent`.
- Image reads return an image block after the text block; the base64 data is
  not repeated in `structuredContent`.
- A supervised call asks the user with a form elicitation that has no fields:
  "accept" approves, "decline" or "cancel" denies. A client that did not
  declare form elicitation gets `approval_required`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, BinaryIO

from corral.api import Sandbox
from corral.sandbox.pool import slow_call
from corral.stdio import (
    MAX_LINE_BYTES,
    Inline,
    Job,
    LineServer,
    LineWriter,
    guarded_call,
    parse_line,
    read_lines,
)

# Handshake-era revisions we speak, newest first; a client asking for another
# one is answered with the newest and decides whether to continue.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
# structuredContent and elicitation arrived in 2025-06-18.
STRUCTURED_VERSIONS = frozenset({"2025-11-25", "2025-06-18"})
# Calls served at once: more than the pool's workers, so calls waiting for a
# user's approval do not starve the rest; beyond this they queue.
MAX_CONCURRENT_CALLS = 32
# How long a supervised call waits for the user before it counts as denied.
ELICITATION_TIMEOUT_S = 600.0

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

INSTRUCTIONS = (
    "File tools confined to the workspace by the kernel. Paths are relative to the "
    "workspace root. Pass a file's `version` back as `expected_version` to avoid "
    "overwriting someone else's change."
)

Approve = Callable[[dict[str, Any]], bool]


def server_version() -> str:
    try:
        return importlib.metadata.version("corral")
    except importlib.metadata.PackageNotFoundError:
        return "0+checkout"  # running from a source tree that was never installed


def mcp_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """A tool spec from `Sandbox.tools()` in the shape `tools/list` returns."""
    return {
        "name": spec["name"],
        "description": spec["description"],
        "inputSchema": spec["input_schema"],
        "annotations": spec["annotations"],
    }


def tool_result(outcome: dict[str, Any], *, structured: bool) -> dict[str, Any]:
    """The `tools/call` result for a contract result."""
    if not outcome["ok"]:
        error = outcome["error"]
        text = f"{error['code']}: {error['message']}"
        if error.get("rule"):
            text += f" (rule {error['rule']})"
        reply: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
        if structured:
            reply["structuredContent"] = {"error": error}
        return reply
    result = outcome["result"]
    content: list[dict[str, Any]] = [{"type": "text", "text": outcome["text"]}]
    image = result.get("image")
    if image:
        content.append({"type": "image", "data": image["data"], "mimeType": image["media_type"]})
        result = {key: value for key, value in result.items() if key != "image"}
    reply = {"content": content, "isError": False}
    if structured:
        reply["structuredContent"] = result
    return reply


def negotiate(requested: object) -> str:
    return requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]


def elicits_forms(capabilities: object) -> bool:
    """Whether a client's capabilities allow form elicitation (an empty object means forms)."""
    if not isinstance(capabilities, dict):
        return False
    elicitation = capabilities.get("elicitation")
    return isinstance(elicitation, dict) and (not elicitation or "form" in elicitation)


class ProtocolError(Exception):
    """A message answered with a JSON-RPC error (id None where it had no usable id)."""

    def __init__(self, code: int, message: str, request_id: str | int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


def decode(line: bytes | None) -> dict[str, Any]:
    """One incoming message, checked: a response (no method: result or error) or a
    request/notification with a string method and object params (null or omitted: {})."""
    if line is None:
        raise ProtocolError(INVALID_REQUEST, f"message over {MAX_LINE_BYTES} bytes")
    try:
        message = parse_line(line)
    except ValueError as exc:
        raise ProtocolError(PARSE_ERROR, f"parse error: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError(INVALID_REQUEST, "a message must be a JSON object (no batches)")
    if "method" not in message and ("result" in message or "error" in message):
        return message  # a response is never answered, however malformed
    if "id" in message and not _valid_id(message["id"]):
        raise ProtocolError(INVALID_REQUEST, "id must be a string or an integer")
    request_id = message.get("id")
    if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        raise ProtocolError(INVALID_REQUEST, 'need "jsonrpc": "2.0" and a method', request_id)
    params = message.get("params")
    if params is None or ("id" not in message and not isinstance(params, dict)):
        # null is what some clients send for "no params"; a notification is never
        # answered, so one with bad params is taken as having none
        message["params"] = {}
    elif not isinstance(params, dict):
        raise ProtocolError(INVALID_PARAMS, "params must be an object", request_id)
    return message
    if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        raise ProtocolError(INVALID_REQUEST, 'need "jsonrpc": "2.0" and a method', request_id)
    params = message.setdefault("params", {})
    if params is None:
        message["params"] = {}  # some clients send null for "no params"
    elif not isinstance(params, dict):
        raise ProtocolError(INVALID_PARAMS, "params must be an object", request_id)
    return message


@dataclass
class Call:
    """One `tools/call` in flight."""

    request_id: str | int
    cancelled: bool = False
    elicitation: Future[dict[str, Any] | None] | None = None


class McpServer:
    """Serves one client on a pair of byte streams until the input ends."""

    def __init__(
        self, open_sandbox: Callable[[Approve | None], Sandbox], reader: BinaryIO, writer: BinaryIO
    ) -> None:
        self._open_sandbox = open_sandbox
        self._out = LineWriter(writer)
        self._sandbox: Sandbox | None = None  # opened by initialize, once the client's
        self._tools: list[dict[str, Any]] = []  # capabilities say who can approve
        self._version = PROTOCOL_VERSIONS[0]
        self._elicits = False
        self._failed = False
        self._calls: dict[str | int, Call] = {}
        self._replies: dict[str, Future[dict[str, Any] | None]] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._elicitation_ids = itertools.count(1)
        self._ended = False  # input is over: no elicitation can be answered any more
        self._lines = LineServer(read_lines(reader), self._receive, MAX_CONCURRENT_CALLS)

    def serve(self) -> bool:
        """Read and answer messages until EOF, then finish the calls in flight and close.
        False if the sandbox could not be started."""
        try:
            self._lines.run(at_end=self._end)
        finally:
            self._end()
            if self._sandbox is not None:
                self._sandbox.close()
        return not self._failed

    # -- input ------------------------------------------------------------------

    def _receive(self, line: bytes | None) -> Job | Inline | None:
        """Answer one message; a tools/call comes back as the job that runs it."""
        try:
            message = decode(line)
        except ProtocolError as exc:
            self._error(exc.request_id, exc.code, exc.message)
            return None
        if "method" not in message:
            self._reply_received(message)
            return None
        method, params = message["method"], message["params"]
        if "id" not in message:
            self._notification(method, params)
            return None
        request_id = message["id"]
        try:
            if method == "tools/call":
                return self._start_call(request_id, params)
            self._result(request_id, self._request(method, params))
        except ProtocolError as exc:
            self._error(request_id, exc.code, exc.message)
        return None

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "ping":
            return {}
        if method == "initialize":
            return self._initialize(params)
        if self._sandbox is None:
            raise ProtocolError(INVALID_REQUEST, f"{method} before initialize")
        if method == "tools/list":
            return {"tools": self._tools}
        raise ProtocolError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self._sandbox is not None:
            raise ProtocolError(INVALID_REQUEST, "already initialized")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise ProtocolError(INVALID_PARAMS, "initialize needs a protocolVersion string")
        self._version = negotiate(requested)
        self._elicits = self._version in STRUCTURED_VERSIONS and elicits_forms(
            params.get("capabilities")
        )
        try:
            self._sandbox = self._open_sandbox(self._approve if self._elicits else None)
        except Exception as exc:
            self._failed = True
            self._lines.stop()
            print(f"corral: error: cannot start the sandbox: {exc}", file=sys.stderr)
            raise ProtocolError(INTERNAL_ERROR, f"cannot start the sandbox: {exc}") from exc
        self._tools = [mcp_tool(spec) for spec in self._sandbox.tools()]
        return {
            "protocolVersion": self._version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "corral", "version": server_version()},
            "instructions": INSTRUCTIONS,
        }

    def _notification(self, method: str, params: object) -> None:
        # Unknown notifications are ignored, as JSON-RPC requires (nobody to answer).
        if method == "notifications/cancelled" and isinstance(params, dict):
            self._cancel(params.get("requestId"))

    def _reply_received(self, message: dict[str, Any]) -> None:
        """A response to an elicitation we sent; an unknown id is ignored."""
        request_id = message.get("id")
        with self._lock:
            future = self._replies.pop(request_id, None) if isinstance(request_id, str) else None
        if future is not None and not future.done():
            result = message.get("result")
            future.set_result(result if isinstance(result, dict) else None)

    # -- tool calls -------------------------------------------------------------

    def _start_call(self, request_id: str | int, params: dict[str, Any]) -> Job | Inline:
        if self._sandbox is None:
            raise ProtocolError(INVALID_REQUEST, "tools/call before initialize")
        name = params.get("name")
        arguments = params.get("arguments", {})
        if not isinstance(name, str):
            raise ProtocolError(INVALID_PARAMS, "tools/call needs a tool name string")
        if not isinstance(arguments, dict):
            raise ProtocolError(INVALID_PARAMS, "tools/call arguments must be an object")
        call = Call(request_id)
        with self._lock:
            if request_id in self._calls:
                raise ProtocolError(INVALID_REQUEST, f"request id {request_id!r} is already in use")
            alone = not self._calls
            self._calls[request_id] = call
        job = functools.partial(self._run_call, self._sandbox, call, name, arguments)
        # With no other call running, the reading thread runs it: until it turns slow
        # or asks the user, nothing else is there to be read on time.
        return Inline(job) if alone else job

    def _run_call(self, sandbox: Sandbox, call: Call, name: str, arguments: dict[str, Any]) -> None:
        self._local.call = call
        slow = slow_call.set(self._lines.hand_off)
        try:
            # A call cancelled while it waited for a thread is not run at all.
            outcome = None if call.cancelled else guarded_call(sandbox.call, name, arguments)
        finally:
            slow_call.reset(slow)
            self._local.call = None
            with self._lock:
                del self._calls[call.request_id]
        if outcome is None or call.cancelled:
            return  # the client withdrew the request: no response, as the spec asks
        if not outcome["ok"] and outcome["error"]["code"] == "unknown_tool":
            self._error(call.request_id, INVALID_PARAMS, outcome["error"]["message"])
            return
        structured = self._version in STRUCTURED_VERSIONS
        self._result(call.request_id, tool_result(outcome, structured=structured))

    def _cancel(self, request_id: object) -> None:
        with self._lock:
            call = self._calls.get(request_id) if _valid_id(request_id) else None
            if call is None:
                return
            call.cancelled = True
            waiting = call.elicitation
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    # -- approval by elicitation ------------------------------------------------

    def _approve(self, request: dict[str, Any]) -> bool:
        """The sandbox's approve callback (only for a client that can elicit):
        ask the user through the client."""
        call: Call | None = getattr(self._local, "call", None)
        elicitation_id = f"corral-elicit-{next(self._elicitation_ids)}"
        future: Future[dict[str, Any] | None] = Future()
        with self._lock:
            if call is None or call.cancelled or self._ended:
                return False
            self._replies[elicitation_id] = future
            call.elicitation = future
        self._lines.hand_off()  # the answer must be read while this call waits for it
        params: dict[str, Any] = {
            "message": approval_message(request),
            "requestedSchema": {"type": "object", "properties": {}},
        }
        if self._version != "2025-06-18":
            params["mode"] = "form"
        self._out.write(
            {
                "jsonrpc": "2.0",
                "id": elicitation_id,
                "method": "elicitation/create",
                "params": params,
            }
        )
        try:
            reply = future.result(timeout=ELICITATION_TIMEOUT_S)
        except TimeoutError:
            reply = None
            self._out.write(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": elicitation_id, "reason": "no answer in time"},
                }
            )
        finally:
            with self._lock:
                self._replies.pop(elicitation_id, None)
                call.elicitation = None
        return reply is not None and reply.get("action") == "accept"

    def _end(self) -> None:
        """The input is over: every pending elicitation counts as denied, and so
        does any later one."""
        with self._lock:
            self._ended = True
            waiting = list(self._replies.values())
            self._replies.clear()
        for future in waiting:
            if not future.done():
                future.set_result(None)

    # -- output -----------------------------------------------------------------

    def _result(self, request_id: str | int, result: dict[str, Any]) -> None:
        self._out.write({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _error(self, request_id: object, code: int, message: str) -> None:
        self._out.write(
            {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
        )


def approval_message(request: dict[str, Any]) -> str:
    """What the user is asked: the tool, the paths as the agent gave them, and the
    rules that asked for approval (a path rule's round names them)."""
    paths = request.get("paths") or []
    where = f" on {', '.join(str(path) for path in paths)}" if paths else ""
    rules = sorted({str(rule) for rule in request.get("rules") or () if rule})
    why = f" (rule {', '.join(rules)})" if rules else ""
    return f"Allow the agent to run {request['tool']}{where}?{why}"


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def serve(
    open_sandbox: Callable[[Approve | None], Sandbox], reader: BinaryIO, writer: BinaryIO
) -> bool:
    """Run an MCP server on the given streams until the client closes its end.
    `open_sandbox(approve)` is called on `initialize`; False if it failed."""
    return McpServer(open_sandbox, reader, writer).serve()
