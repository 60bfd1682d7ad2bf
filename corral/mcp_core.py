"""The MCP protocol core: one client's session, whatever carries the messages.

Every revision (mcp_revisions) and every transport goes through this one
object; a transport face only moves JSON values in and out (stdio in
mcp_server; Streamable HTTP mounts the same core).

Interface for a transport face:

    session = McpSession(open_sandbox, send=..., can_ask=True)
    job = session.handle(message, reply)  # one decoded JSON-RPC value
    if job is not None:
        job(wait)                          # on any thread; it calls reply() when done
    ...
    session.close()                        # input over: open questions count as "no"

- `handle` answers every request but `tools/call` at once through `reply`, and
  returns None. A `tools/call` comes back as a job (a callable) that runs the
  call and then calls `reply` with the response; run it on any thread, so calls
  overlap and a call waiting for the user blocks nobody else.
- `reply(response)` gets the response to that message: exactly once for a
  request (unless the client cancelled it), never for a notification or a
  response.
- `send(message)` carries what the server itself starts, on the handshake
  revisions only: `elicitation/create` and `roots/list` requests, and
  `notifications/cancelled` for a question that went unanswered. Their answers
  come back as messages to `handle`. A transport with no way back to the client
  passes `can_ask=False`: its handshake clients are never asked (a supervised
  call fails `approval_required`, client roots are not read). The stateless
  revision needs no way back: it asks inside results (`input_required`).
- `job(wait)`: the face says how the call waits (sandbox/waiting.py's
  WaitPolicy): `wait.on_slow()` is called on the job's thread before the job
  blocks on the client, or once its tool call turns slow (the stdio face hands
  reading to another thread there, so the answer can be read); `wait.cancel`
  lets the HTTP face give up on the call when its client goes away.
- `in_flight` is the number of calls running; `failed` turns true when the
  sandbox could not start (the face stops reading).
- `open_sandbox(approve)` is called once, on the first message that needs the
  tools. The session drives each call's CallFlow itself and answers its Approve
  steps per call (elicitation, or `input_required` on the stateless revision);
  `approve` only says an approver exists (outside a call it can ask nobody).

Decisions the spec leaves to us:
- Revisions are per request: a request whose `params._meta` names a protocol
  version is served at that (stateless) revision, with the capabilities it
  declares there; any other request is served at the revision `initialize`
  chose. So one session may serve both, interleaved, with the same answers.
- An unknown tool name is a JSON-RPC error (-32602), as the spec's example
  shows; every other failure, including a tool the policy denies, is a tool
  result with `isError: true` and the contract's error in `structuredContent`.
- Image reads return an image block after the text block; the base64 data is
  not repeated in `structuredContent`.
- A supervised call asks the user with a form that has no fields: "accept"
  approves, "decline" or "cancel" denies. Handshake revisions send
  `elicitation/create`; 2026-07-28 answers `input_required` with the question
  and a sealed `requestState`, and the retry carries the answer. A client that
  did not declare form elicitation gets `approval_required`.
- `requestState` is sealed (HMAC-SHA256 under a key made when the process
  starts), bound to the call (tool name and arguments), and expires after
  STATE_TTL_S: a forged, replayed-onto-another-call or stale state is refused
  with -32602. It carries the client roots and approvals given in earlier rounds.
- Client roots narrow, never widen: see `client_roots`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import hmac
import importlib.metadata
import itertools
import json
import os
import secrets
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from urllib.parse import unquote, urlsplit

from corral.api import Sandbox
from corral.calls.messages import error_answer, host_bug_answer
from corral.calls.waiting import PLAIN, WaitPolicy
from corral.config import ConfigError, Remedy, any_face
from corral.flow import NoApprover
from corral.mcp_revisions import (
    CLIENT_CAPABILITIES_KEY,
    PROTOCOL_VERSION_KEY,
    REVISIONS,
    STATELESS_VERSIONS,
    Revision,
    elicits_forms,
    lists_roots,
    negotiate,
)

# How long a supervised call waits for the user before it counts as denied; also how
# long a stateless call's requestState stays good between rounds.
ELICITATION_TIMEOUT_S = 600.0
STATE_TTL_S = ELICITATION_TIMEOUT_S
# How long a call waits for a handshake client's roots/list answer; none in time
# fails the call (the client said it has roots: running unnarrowed would widen).
ROOTS_TIMEOUT_S = 30.0
ROOTS_KEY = "corral-roots"  # the inputRequests key of the stateless roots question
# Why an approval cannot be asked for (NoApprover's hint), and what would let it be.
NO_ELICITATION = ("this client does not support form elicitation, which is how corral asks; "
                  "use an MCP client that does")
NO_REQUESTS = ("this server cannot send requests on this connection (HTTP with a handshake "
               "protocol revision); use a client that speaks protocol 2026-07-28, which "
               "asks inside the result")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022

INSTRUCTIONS = (
    "File tools confined to the workspace by the kernel. Paths are relative to the "
    "workspace root; list_allowed_directories names every directory you may use. Pass a "
    "file's `version` back as `expected_version` to avoid overwriting someone else's change."
)

Approve = Callable[[dict[str, Any]], bool]
Reply = Callable[[dict[str, Any]], None]
Job = Callable[[WaitPolicy], None]

# One key per process: a requestState is good for any session of this server process.
_STATE_KEY = secrets.token_bytes(32)


def server_version() -> str:
    try:
        return importlib.metadata.version("corral")
    except importlib.metadata.PackageNotFoundError:
        return "0+checkout"  # running from a source tree that was never installed


SERVER_INFO = {"name": "corral", "version": server_version()}


class ProtocolError(Exception):
    """A message answered with a JSON-RPC error (id None where it had no usable id)."""

    def __init__(
        self, code: int, message: str, request_id: str | int | None = None, data: Any = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id
        self.data = data


def response(request_id: object, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: object, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def check_message(message: object) -> dict[str, Any]:
    """One incoming message, checked: a response (no method: result or error) or a
    request/notification with a string method and object params (null or omitted: {})."""
    if not isinstance(message, dict):
        raise ProtocolError(INVALID_REQUEST, "a message must be a JSON object (no batches)")
    if "method" not in message and ("result" in message or "error" in message):
        return message  # a response is never answered, however malformed
    if "id" in message and not valid_id(message["id"]):
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


def valid_id(value: object) -> TypeGuard[str | int]:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def tool_result(outcome: dict[str, Any], *, structured: bool) -> dict[str, Any]:
    """The `tools/call` result for a contract result."""
    if not outcome["ok"]:
        error = outcome["error"]
        text = f"{error['code']}: {error['message']}"
        # most refusals already say "... by policy rule 'x'": name the rule once
        if error.get("rule") and f"'{error['rule']}'" not in error["message"]:
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


def approval_message(request: dict[str, Any]) -> str:
    """What the user is asked: the tool, the paths as resolved (and as the agent
    spelled them, where that differs), and the rules that asked for approval."""
    paths = [target["shown"] for target in request.get("targets") or ()]  # escaped
    where = f" on {', '.join(str(path) for path in paths)}" if paths else ""
    rules = sorted({str(rule) for rule in request.get("rules") or () if rule})
    why = f" (rule {', '.join(rules)})" if rules else ""
    return f"Allow the agent to run {request['tool']}{where}?{why}"


def client_roots(answer: object) -> list[str] | None:
    """The directories a `roots/list` answer names, as absolute paths: they narrow
    the configured roots (a call outside all of them fails path_denied), never
    widen them. Only file:// URIs on this host count; an answer that names none
    does not narrow (clients send an empty list when no folder is open). Anything
    malformed is a ValueError: the call fails rather than run unnarrowed."""
    roots = answer.get("roots") if isinstance(answer, dict) else None
    if not isinstance(roots, list):
        raise ValueError("the client's roots/list answer has no roots list")
    paths = []
    for root in roots:
        uri = root.get("uri") if isinstance(root, dict) else None
        if not isinstance(uri, str):
            raise ValueError("a root in the client's roots/list answer has no uri")
        parts = urlsplit(uri)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            continue
        path = unquote(parts.path)
        if path.startswith("/") and "\0" not in path:
            paths.append(os.path.normpath(path))
    return paths or None


@dataclass
class RequestState:
    """What a stateless call carries between rounds (sealed into `requestState`)."""

    call: str  # digest of the tool name and arguments it belongs to
    roots: list[str] | None = None  # the client's roots, once read
    read_roots: bool = False  # roots were asked and answered (None: no narrowing)
    approved: list[str] = field(default_factory=list)  # approval keys the user accepted
    asked: list[str] = field(default_factory=list)  # keys of the last round's questions

    def seal(self, key: bytes = _STATE_KEY) -> str:
        body = json.dumps(
            {**vars(self), "expires": time.time() + STATE_TTL_S}, separators=(",", ":")
        ).encode()
        mac = hmac.new(key, body, hashlib.sha256).digest()
        return f"{_b64(body)}.{_b64(mac)}"

    @classmethod
    def unseal(cls, token: object, call: str, key: bytes = _STATE_KEY) -> RequestState:
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


def _settle(future: Future[dict[str, Any] | None], value: dict[str, Any] | None = None) -> None:
    """Answer a question unless it has its answer already (a reply, a cancel and a
    timeout may race)."""
    with contextlib.suppress(InvalidStateError):
        future.set_result(value)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def call_digest(name: str, arguments: dict[str, Any]) -> str:
    canonical = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _outside_a_call(request: dict[str, Any]) -> bool:
    """The sandbox's own approve callback: every call's Approve steps are answered
    per call (McpSession._approve), so this one is never asked by the session."""
    raise NoApprover(NO_ELICITATION)


class InputRequired(Exception):
    """A stateless call needs the client's answers first: end this round with them."""

    def __init__(self, requests: dict[str, Any]) -> None:
        super().__init__("input required")
        self.requests = requests


@dataclass
class Call:
    """One `tools/call` in flight."""

    request_id: str | int
    revision: Revision
    capabilities: dict[str, Any]
    name: str
    arguments: dict[str, Any]
    reply: Reply
    state: RequestState | None = None  # stateless revisions: this round's state
    responses: dict[str, Any] = field(default_factory=dict)  # stateless: inputResponses
    cancelled: bool = False
    waiting: Future[dict[str, Any] | None] | None = None  # a question out to the client
    wait: WaitPolicy = PLAIN  # how the face that runs it waits


class McpSession:
    """One MCP client's session (see the module docstring for the interface)."""

    def __init__(
        self,
        open_sandbox: Callable[[Approve], Sandbox],
        *,
        send: Callable[[dict[str, Any]], None],
        can_ask: bool = True,
        say_remedy: Callable[[Remedy], str] = any_face,
    ) -> None:
        self._open_sandbox = open_sandbox
        self._say_remedy = say_remedy  # how the face serving this session says a config's fix
        self._send = send
        self._can_ask = can_ask
        self._sandbox: Sandbox | None = None
        self._tools: list[dict[str, Any]] = []  # specs, as Sandbox.tools() gives them
        self._handshake: Revision | None = None  # set by initialize
        self._capabilities: dict[str, Any] = {}  # the handshake client's
        self._roots: Future[dict[str, Any] | None] | None = None  # handshake roots/list
        self.failed = False
        self._calls: dict[str | int, Call] = {}
        self._replies: dict[str, Future[dict[str, Any] | None]] = {}
        self._lock = threading.Lock()
        self._request_ids = itertools.count(1)
        self._ended = False  # input is over: no question can be answered any more

    @property
    def in_flight(self) -> int:
        return len(self._calls)

    # -- input ------------------------------------------------------------------

    def handle(self, message: object, reply: Reply) -> Job | None:
        """Answer one message; a tools/call comes back as the job that runs it."""
        try:
            message = check_message(message)
        except ProtocolError as exc:
            reply(error_response(exc.request_id, exc.code, exc.message))
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
            if method == "initialize":
                reply(response(request_id, self._initialize(params)))
                return None
            revision, capabilities = self._revision(method, params)
            if method == "tools/call":
                return self._start_call(request_id, revision, capabilities, params, reply)
            reply(response(request_id, self._request(method, revision)))
        except ProtocolError as exc:
            reply(error_response(request_id, exc.code, exc.message, exc.data))
        return None

    def _revision(
        self, method: str, params: dict[str, Any]
    ) -> tuple[Revision | None, dict[str, Any]]:
        """The revision a request is served at, and the client capabilities it has."""
        meta = params.get("_meta")
        if isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta:
            version = meta[PROTOCOL_VERSION_KEY]
            capabilities = meta.get(CLIENT_CAPABILITIES_KEY)
            if not isinstance(version, str) or not isinstance(capabilities, dict):
                raise ProtocolError(
                    INVALID_PARAMS,
                    f"params._meta needs {PROTOCOL_VERSION_KEY!r} (a string) and "
                    f"{CLIENT_CAPABILITIES_KEY!r} (an object)",
                )
            if version not in STATELESS_VERSIONS:
                raise ProtocolError(
                    UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                    data={"supported": list(STATELESS_VERSIONS), "requested": version},
                )
            return REVISIONS[version], capabilities
        if method == "ping":
            return self._handshake, self._capabilities
        if self._handshake is None:
            raise ProtocolError(INVALID_REQUEST, f"{method} before initialize")
        return self._handshake, self._capabilities

    def _request(self, method: str, revision: Revision | None) -> dict[str, Any]:
        if method == "ping":
            return self._complete(revision, {})
        if method == "server/discover" and revision is not None and revision.stateless:
            self._start()
            return self._complete(revision, {
                "supportedVersions": list(STATELESS_VERSIONS),
                "capabilities": {"tools": {"listChanged": False}},
                "instructions": INSTRUCTIONS,
            }, cacheable=True)
        if method == "tools/list" and revision is not None:
            self._start()
            tools = [revision.tool(spec) for spec in self._tools]
            return self._complete(revision, {"tools": tools}, cacheable=True)
        raise ProtocolError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _complete(
        self, revision: Revision | None, result: dict[str, Any], *, cacheable: bool = False
    ) -> dict[str, Any]:
        if revision is None:
            return result
        return revision.result(result, server_info=SERVER_INFO, cacheable=cacheable)

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self._handshake is not None:
            raise ProtocolError(INVALID_REQUEST, "already initialized")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise ProtocolError(INVALID_PARAMS, "initialize needs a protocolVersion string")
        capabilities = params.get("capabilities")
        self._start()
        self._handshake = negotiate(requested)
        self._capabilities = capabilities if isinstance(capabilities, dict) else {}
        return {
            "protocolVersion": self._handshake.version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": SERVER_INFO,
            "instructions": INSTRUCTIONS,
        }

    def _start(self) -> None:
        """Open the sandbox (once): on the first message that needs the tools."""
        with self._lock:
            if self._sandbox is not None:
                return
            if self.failed:
                raise ProtocolError(INTERNAL_ERROR, "the sandbox could not start")
            try:
                self._sandbox = self._open_sandbox(_outside_a_call)
            except Exception as exc:
                self.failed = True
                why = exc.spelled(self._say_remedy) if isinstance(exc, ConfigError) else exc
                print(f"corral: error: cannot start the sandbox: {why}", file=sys.stderr)
                raise ProtocolError(INTERNAL_ERROR, f"cannot start the sandbox: {why}") from exc
            self._tools = self._sandbox.tools()

    def _notification(self, method: str, params: object) -> None:
        # Unknown notifications are ignored, as JSON-RPC requires (nobody to answer).
        if method == "notifications/cancelled" and isinstance(params, dict):
            self._cancel(params.get("requestId"))
        elif method == "notifications/roots/list_changed":
            with self._lock:
                self._roots = None  # the next call asks again

    def _reply_received(self, message: dict[str, Any]) -> None:
        """A response to a request we sent; an unknown id is ignored."""
        request_id = message.get("id")
        with self._lock:
            future = self._replies.pop(request_id, None) if isinstance(request_id, str) else None
        if future is not None:
            result = message.get("result")
            _settle(future, result if isinstance(result, dict) else None)

    # -- tool calls -------------------------------------------------------------

    def _start_call(
        self, request_id: str | int, revision: Revision | None, capabilities: dict[str, Any],
        params: dict[str, Any], reply: Reply,
    ) -> Job:
        assert revision is not None  # only ping is served without one
        self._start()
        name = params.get("name")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(name, str):
            raise ProtocolError(INVALID_PARAMS, "tools/call needs a tool name string")
        if not isinstance(arguments, dict):
            raise ProtocolError(INVALID_PARAMS, "tools/call arguments must be an object")
        call = Call(request_id, revision, capabilities, name, arguments, reply)
        if revision.stateless:
            token = params.get("requestState")
            # The digest (of a write's whole content) only when a state is read or made.
            call.state = RequestState("") if token is None else RequestState.unseal(
                token, call_digest(name, arguments)
            )
            responses = params.get("inputResponses")
            call.responses = responses if isinstance(responses, dict) else {}
        with self._lock:
            if request_id in self._calls:
                raise ProtocolError(INVALID_REQUEST, f"request id {request_id!r} is already in use")
            self._calls[request_id] = call
        assert self._sandbox is not None
        return functools.partial(self._run_call, self._sandbox, call)

    def _run_call(self, sandbox: Sandbox, call: Call, wait: WaitPolicy) -> None:
        call.wait = wait
        try:
            # A call cancelled while it waited for a thread is not run at all.
            answer = None if call.cancelled else self._answer(sandbox, call)
        finally:
            with self._lock:
                del self._calls[call.request_id]
        if answer is not None and not call.cancelled:
            call.reply(answer)
        # else the client withdrew the request: no response, as the spec asks

    def _answer(self, sandbox: Sandbox, call: Call) -> dict[str, Any]:
        """The response to one tools/call round."""
        revision = call.revision
        try:
            within = self._within(call)
            outcome = sandbox.run(
                sandbox.flow(call.name, call.arguments, within=within, raw=True),
                approve=functools.partial(self._approve, call), wait=call.wait,
            )
        except InputRequired as needed:
            assert call.state is not None
            call.state.asked = list(needed.requests)
            call.state.call = call.state.call or call_digest(call.name, call.arguments)
            return response(call.request_id, revision.input_required(
                needed.requests, call.state.seal(), server_info=SERVER_INFO
            ))
        except ValueError as exc:  # the client's roots could not be read
            outcome = error_answer(call.name, "path_denied", f"{exc}.").public()
        except Exception as exc:
            traceback.print_exc()
            outcome = host_bug_answer(call.name, exc).public()
        if not outcome["ok"] and outcome["error"]["code"] == "unknown_tool":
            return error_response(call.request_id, INVALID_PARAMS, outcome["error"]["message"])
        result = tool_result(outcome, structured=revision.structured)
        return response(call.request_id, self._complete(revision, result))

    def _cancel(self, request_id: object) -> None:
        with self._lock:
            call = self._calls.get(request_id) if valid_id(request_id) else None
            if call is None:
                return
            call.cancelled = True
            waiting = call.waiting
        if waiting is not None:
            _settle(waiting)

    # -- questions to the client ------------------------------------------------

    def _within(self, call: Call) -> list[str] | None:
        """The client's roots for this call (None: no narrowing)."""
        if call.state is not None:  # stateless: asked inside the result, once per call
            if not lists_roots(call.capabilities) or call.state.read_roots:
                return call.state.roots
            if ROOTS_KEY in call.state.asked and ROOTS_KEY in call.responses:
                call.state.roots = client_roots(call.responses[ROOTS_KEY])
                call.state.read_roots = True
                return call.state.roots
            raise InputRequired({ROOTS_KEY: {"method": "roots/list"}})
        if not (self._can_ask and lists_roots(call.capabilities)):
            return None
        with self._lock:
            if self._roots is None or (self._roots.done() and self._roots.result() is None):
                self._roots = self._ask_client("roots/list", {})
            future = self._roots
        answer = self._wait(call, future, ROOTS_TIMEOUT_S, cancellable=False)
        if answer is None:
            raise ValueError("the client did not list its roots")
        return client_roots(answer)

    def _approve(self, call: Call, request: dict[str, Any]) -> bool:
        """An Approve step of `call`'s flow: ask the user through the client."""
        if not (call.revision.elicitation and elicits_forms(call.capabilities)):
            raise NoApprover(NO_ELICITATION)
        message = approval_message(request)
        if call.state is not None:
            return self._approve_stateless(call, request, message)
        if not self._can_ask:
            raise NoApprover(NO_REQUESTS)
        with self._lock:
            future = None if call.cancelled else self._ask_client(
                "elicitation/create", call.revision.elicitation_params(message)
            )
        if future is None:
            return False
        reply = self._wait(call, future, ELICITATION_TIMEOUT_S)
        return reply is not None and reply.get("action") == "accept"

    def _approve_stateless(self, call: Call, request: dict[str, Any], message: str) -> bool:
        """An answer from this round's inputResponses, else end the round asking."""
        assert call.state is not None
        key = "corral-approve-" + call_digest(request["tool"], request)[:32]
        if key in call.state.approved:
            return True
        if key in call.state.asked and key in call.responses:
            answer = call.responses[key]
            accepted = isinstance(answer, dict) and answer.get("action") == "accept"
            if accepted:
                call.state.approved.append(key)
            return accepted
        params = call.revision.elicitation_params(message)
        raise InputRequired({key: {"method": "elicitation/create", "params": params}})

    def _ask_client(self, method: str, params: dict[str, Any]) -> Future[dict[str, Any] | None]:
        """Send a request to the client (the caller holds the lock); its answer (None
        for an error or no answer) arrives in the future."""
        request_id = f"corral-{next(self._request_ids)}"
        future: Future[dict[str, Any] | None] = Future()
        if self._ended:
            future.set_result(None)
            return future
        self._replies[request_id] = future
        future.add_done_callback(lambda _: self._forget(request_id))
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return future

    def _forget(self, request_id: str) -> None:
        with self._lock:
            self._replies.pop(request_id, None)

    def _wait(
        self, call: Call, future: Future[dict[str, Any] | None], timeout: float, *,
        cancellable: bool = True,
    ) -> dict[str, Any] | None:
        """The client's answer, or None (error, no answer in time, call cancelled).
        A question shared by several calls (roots) is not ended by one's cancel."""
        if cancellable:
            with self._lock:
                call.waiting = future
        call.wait.on_slow()  # the answer must be read while this call waits for it
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            with self._lock:
                request_id = next((i for i, f in self._replies.items() if f is future), None)
            if request_id is not None:
                self._send({
                    "jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": request_id, "reason": "no answer in time"},
                })
            _settle(future)
            return None
        finally:
            with self._lock:
                call.waiting = None

    def close(self) -> None:
        """The input is over: every open question counts as unanswered, and so does
        any later one; then the sandbox closes (after the calls in flight)."""
        with self._lock:
            self._ended = True
            waiting = list(self._replies.values())
        for future in waiting:
            _settle(future)

    def shut(self) -> None:
        """Close the sandbox (once every job has finished)."""
        if self._sandbox is not None:
            self._sandbox.close()
