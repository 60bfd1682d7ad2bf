"""The MCP protocol core: one client's session, whatever carries the messages.

Every revision (mcp_revisions) and every transport goes through this one
object; a transport face only moves JSON values in and out (stdio in
mcp_server; Streamable HTTP mounts the same core).

It is sans-I/O, as h11's Connection is: no threads, no waiting, no streams.
Each input returns the actions it calls for, and a face carries them out
(mcp_threads.SessionDriver does, for the stdio and HTTP faces):

    session = McpSession(open_sandbox, can_ask=True)
    actions = session.handle(message)       # one decoded JSON-RPC value
    actions = session.submitted(call, answer)   # a Run is over
    actions = session.timed_out(question)   # a question went unanswered too long
    actions = session.close()               # input over: open questions count as "no"
    session.shut()                          # after the last call: close the sandbox

- `Reply(message)`: the response to a client's request (exactly once per
  request, unless the client cancelled it; never for a notification or a
  response).
- `Send(message, call, timeout)`: what the server itself starts, on the
  handshake revisions only, on behalf of the call `call`: `elicitation/create`
  and `roots/list` requests, and `notifications/cancelled` for a question that
  went unanswered. Their answers come back as messages to `handle`; a
  question's `timeout` is kept by the face, which says `timed_out` when it
  passes. A face with no way back to the client passes `can_ask=False` (to the
  session, or to `handle` for one request): its handshake clients are never
  asked (a supervised call fails `approval_required`, client roots are not
  read). The stateless revision needs no way back: it asks inside results
  (`input_required`).
- `Run(call, sandbox, request)`: run one Submit step of the call's CallFlow in
  a confined worker (`sandbox.submit`, waiting as the face's WaitPolicy says),
  then report the answer, or the exception, with `submitted`. A call waiting
  for the client holds no Run: it goes on when the answer arrives.
- `Drop(call)`: the call ended unanswered (the client withdrew it).
- A call's state (queued, running, asking, done, cancelled) lives in its
  `Call`; `cancelled(call)` lets a face skip a Run it had queued.
- `failed` turns true when the sandbox could not start (the face stops reading).
- `open_sandbox(approve)` is called once, on the first message that needs the
  tools. The session steps each call's CallFlow itself and answers its Approve
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
- A success's `structuredContent` is the contract's `result`; for a client that
  shows a model structuredContent instead of content (pydantic-ai, fastmcp:
  those whose clientInfo names them as TEXT_CLIENTS), plus `text`, the same
  text as the first content block, so their models still see the numbered lines
  and paging hints. outputSchema declares it (optional). Others get the text
  once, in content: a large read goes out twice (its content and its numbered
  text), not three times. `structured_text=True`/`False` (`corral serve
  --structured-text`/`--no-structured-text`) adds it for every client, or none.
- A supervised call asks the user with a form: "accept" approves, "decline" or
  "cancel" denies. Its one field, `remember` (not required; default "once"),
  offers "once", "path" (this file, for the session) and "rule" (every path
  the same rule supervises, for the session): corral.Approval's choice. An
  answer without it (a client that only accepts) or with another value is
  "once". Grants live in the session's sandbox; a stateless request is served
  by the session the face gives it (over HTTP: one per tenant, for its life).
  Handshake revisions send `elicitation/create`; 2026-07-28 answers
  `input_required` with the question and a sealed `requestState`, and the retry
  carries the answer. A client that did not declare form elicitation gets
  `approval_required`.
- `requestState` is sealed (HMAC-SHA256 under a key made when the process
  starts, or the session's `state_key`: `--state-key-file`), bound to the call
  (tool name and arguments), and expires after STATE_TTL_S: a forged,
  replayed-onto-another-call or stale state is refused with -32602. It carries
  the client roots and approvals given in earlier rounds.
- Client roots narrow, never widen: see `client_roots`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.metadata
import itertools
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from urllib.parse import unquote, urlsplit

from corral.api import Approver, Sandbox
from corral.calls.messages import Answer, CallRequest, error_answer, host_bug_answer
from corral.config import ConfigError, Remedy, any_face
from corral.faces.mcp_revisions import (
    CLIENT_CAPABILITIES_KEY,
    PROTOCOL_VERSION_KEY,
    REMEMBER_FIELD,
    REVISIONS,
    STATELESS_VERSIONS,
    Revision,
    elicits_forms,
    lists_roots,
    negotiate,
)
from corral.host.flow import REPLAYED, Approval, CallFlow, NoApprover, Submit
from corral.host.grants import REMEMBER
from corral.tools.render import size_text

log = logging.getLogger("corral.serve")  # the server's own lines (faces/logs.py formats them)

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
NO_REQUESTS = ("this server cannot send requests on this connection (an HTTP request that "
               "does not accept text/event-stream, or one of a tenant with as many calls "
               "waiting for answers as it may have); use a client that accepts server-sent "
               "events, or one that speaks protocol 2026-07-28, which asks inside the result")

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


# One key per process: a requestState is good for any session of this server process.
_STATE_KEY = secrets.token_bytes(32)


# Clients that hand a model a result's structuredContent rather than its content, as
# their `initialize` names them: fastmcp's Client, and the Python SDK's default name,
# which pydantic-ai's toolset (and other frameworks built on that SDK) send. They get
# the text in structuredContent too; a client that names itself otherwise gets it
# once, unless the server is told (--structured-text).
TEXT_CLIENTS = frozenset({"fastmcp", "mcp"})
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"  # a stateless request's _meta


def _text_client(info: object) -> bool:
    return isinstance(info, dict) and info.get("name") in TEXT_CLIENTS


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


def tool_result(
    outcome: dict[str, Any], *, structured: bool, structured_text: bool = False
) -> dict[str, Any]:
    """The `tools/call` result for a contract result. structured_text: a success's
    structuredContent repeats the text (see the module docstring)."""
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
        # `text` too: pydantic-ai and fastmcp hand a model structuredContent instead of
        # content, and the text is what carries line numbers and paging hints
        reply["structuredContent"] = (
            {**result, "text": outcome["text"]} if structured_text else result)
    return reply


def approval_message(request: dict[str, Any]) -> str:
    """What the user is asked: the tool, the paths as resolved (and as the agent
    spelled them, where that differs) with their sizes, the rules that asked for
    approval, and a change's diff (bounded, escaped line by line)."""
    paths = [_sized(target) for target in request.get("targets") or ()]  # escaped
    where = f" on {', '.join(paths)}" if paths else ""
    rules = sorted({str(rule) for rule in request.get("rules") or () if rule})
    why = f" (rule {', '.join(rules)})" if rules else ""
    diff = request.get("diff")
    shown = f"\n\n{diff}" if diff else ""
    return f"Allow the agent to run {request['tool']}{where}?{why}{shown}"


def _sized(target: dict[str, Any]) -> str:
    size = target.get("size")
    return f"{target['shown']} ({size_text(size)})" if isinstance(size, int) else str(
        target["shown"])


def approval_choices(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The `remember` choices of the approval form, with titles; "once" first."""
    tool, targets = request["tool"], request.get("targets") or ()
    these = "this file" if len(targets) == 1 else "these files"
    rules = sorted({str(rule) for rule in request.get("rules") or () if rule})
    if rules:
        named = ", ".join(f"'{rule}'" for rule in rules)
        covered = f"everything rule {named} covers" if len(rules) == 1 else (
            f"everything rules {named} cover")
    else:  # the tool's mode (or the default action): paths a named rule covers still ask
        covered = "every path (those a supervised rule names still ask)"
    return [
        ("once", "Allow once"),
        ("path", f"Allow {tool} on {these} for this session"),
        ("rule", f"Allow {tool} on {covered} for this session"),
    ]


def approval_of(answer: dict[str, Any] | None) -> Approval:
    """An elicitation answer as an Approval (no answer: a denial)."""
    if answer is None or answer.get("action") != "accept":
        return Approval(False)
    content = answer.get("content")
    remember = content.get(REMEMBER_FIELD) if isinstance(content, dict) else None
    return Approval(True, remember if remember in REMEMBER else "once")


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


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def call_digest(name: str, arguments: dict[str, Any]) -> str:
    canonical = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()



def _states_a_version(params: dict[str, Any]) -> bool:
    """A request of the stateless revision: its _meta names a protocol version."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def _outside_a_call(request: dict[str, Any]) -> bool:
    """The sandbox's own approve callback: the session answers every call's Approve
    steps itself, so this one only says an approver exists and is never asked."""
    raise NoApprover(NO_ELICITATION)


# -- actions: what the session asks its face to do ------------------------------


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


class McpSession:
    """One MCP client's session (see the module docstring for the interface)."""

    def __init__(
        self,
        open_sandbox: Callable[[Approver], Sandbox],
        *,
        can_ask: bool = True,
        say_remedy: Callable[[Remedy], str] = any_face,
        structured_text: bool | None = None,
        state_key: bytes | None = None,
    ) -> None:
        """state_key: what seals requestState (None: the process's own key)."""
        self._open_sandbox = open_sandbox
        self._state_key = _STATE_KEY if state_key is None else state_key
        self._structured_text = structured_text  # None: as the client is (TEXT_CLIENTS)
        self._handshake_text = False  # the handshake client is one of TEXT_CLIENTS
        self._say_remedy = say_remedy  # how the face serving this session says a config's fix
        self._can_ask = can_ask
        self._sandbox: Sandbox | None = None
        self._tools: list[dict[str, Any]] = []  # specs, as Sandbox.tools() gives them
        self._handshake: Revision | None = None  # set by initialize
        self._capabilities: dict[str, Any] = {}  # the handshake client's
        self._roots: list[str] | None = None  # the handshake client's, once read
        self._read_roots = False  # _roots holds the client's answer
        self._roots_question: str | None = None  # a roots/list out to the client
        self.failed = False
        self._calls: dict[str | int, Call] = {}
        self._questions: dict[str, Question] = {}
        self._request_ids = itertools.count(1)
        self._ended = False  # input is over: no question can be answered any more

    # -- input ------------------------------------------------------------------

    def handle(self, message: object, *, can_ask: bool = True) -> list[Action]:
        """What to do about one decoded message. `can_ask=False`: the face cannot
        carry a question back for this request (the session's own flag also counts)."""
        try:
            message = check_message(message)
        except ProtocolError as exc:
            return [Reply(error_response(exc.request_id, exc.code, exc.message))]
        if "method" not in message:
            return self._reply_received(message)
        method, params = message["method"], message["params"]
        if "id" not in message:
            return self._notification(method, params)
        request_id = message["id"]
        try:
            if method == "initialize" and not _states_a_version(params):
                return [Reply(response(request_id, self._initialize(params)))]
            revision, capabilities = self._revision(method, params)
            if method == "tools/call":
                return self._start_call(request_id, revision, capabilities, params, can_ask)
            return [Reply(response(request_id, self._request(method, revision)))]
        except ProtocolError as exc:
            return [Reply(error_response(request_id, exc.code, exc.message, exc.data))]

    def submitted(self, call_id: str | int, answer: Answer | Exception | None) -> list[Action]:
        """A Run is over: its worker's `answer`, the exception `submit` raised, or
        None when the face did not run it (the call was cancelled meanwhile)."""
        call = self._calls.get(call_id)
        if call is None or call.flow is None or call.stage != "running":
            return []
        if call.cancelled or answer is None:
            return self._drop(call)
        if isinstance(answer, Exception):
            return self._failed(call, answer)
        return self._advance(call, answer)

    def cancelled(self, call_id: str | int) -> bool:
        """Whether the call is gone or withdrawn (a face skips its queued Run)."""
        call = self._calls.get(call_id)
        return call is None or call.cancelled

    def timed_out(self, question_id: str) -> list[Action]:
        """A question went unanswered for its timeout: tell the client, then go on
        as if it had said no."""
        question = self._questions.get(question_id)
        if question is None:
            return []
        notice = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": question_id, "reason": "no answer in time"}}
        # sent on the way back of a call still waiting for it (HTTP: an open stream)
        waiting = self._live(question.calls)  # none: every call withdrawn, nothing to say
        sent: list[Action] = [Send(notice, waiting[0].request_id)] if waiting else []
        return sent + self._answered(question_id, None)

    def close(self) -> list[Action]:
        """The input is over: every open question counts as unanswered, and so does
        any later one. The face then carries out what follows, and `shut`s."""
        self._ended = True
        actions: list[Action] = []
        for question_id in list(self._questions):
            actions += self._answered(question_id, None)
        return actions

    def wake(self) -> None:
        """The face is reading a message: Sandbox.wake, once the sandbox is open."""
        if self._sandbox is not None:
            self._sandbox.wake()

    def workspace_replaced(self) -> bool:
        """Whether the sandbox, once open, serves a workspace directory that another
        has replaced at its path (Sandbox._workspace_replaced)."""
        sandbox = self._sandbox
        return sandbox is not None and sandbox._workspace_replaced()

    def stop_calls(self) -> None:
        """End the calls in flight at once (Sandbox._stop_calls), before shut()."""
        if self._sandbox is not None:
            self._sandbox._stop_calls()

    def shut(self) -> None:
        """Close the sandbox (once every call has finished)."""
        if self._sandbox is not None:
            self._sandbox.close()

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
            # neither a stateless request (its _meta names the revision) nor after a
            # handshake: say both ways in, not only the older one
            stateless = ", ".join(STATELESS_VERSIONS)
            raise ProtocolError(
                INVALID_REQUEST,
                f"{method} before initialize (or, at revision {stateless}, without "
                f"params._meta {PROTOCOL_VERSION_KEY!r} and {CLIENT_CAPABILITIES_KEY!r})",
            )
        return self._handshake, self._capabilities

    def _request(self, method: str, revision: Revision | None) -> dict[str, Any]:
        if method == "ping" and not (revision is not None and revision.stateless):
            return self._complete(revision, {})  # 2026-07-28 has no ping (nor initialize)
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
        self._handshake_text = _text_client(params.get("clientInfo"))
        self._handshake = negotiate(requested)
        self._capabilities = capabilities if isinstance(capabilities, dict) else {}
        return {
            "protocolVersion": self._handshake.version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": SERVER_INFO,
            "instructions": INSTRUCTIONS,
        }

    def _start(self) -> Sandbox:
        """The sandbox, opened on the first message that needs the tools."""
        if self._sandbox is not None:
            return self._sandbox
        if self.failed:
            raise ProtocolError(INTERNAL_ERROR, "the sandbox could not start")
        try:
            self._sandbox = self._open_sandbox(_outside_a_call)
        except Exception as exc:
            self.failed = True
            why = exc.spelled(self._say_remedy) if isinstance(exc, ConfigError) else exc
            log.error("corral: error: cannot start the sandbox: %s", why)
            raise ProtocolError(INTERNAL_ERROR, f"cannot start the sandbox: {why}") from exc
        self._tools = self._sandbox.tools()
        return self._sandbox

    def _notification(self, method: str, params: object) -> list[Action]:
        # Unknown notifications are ignored, as JSON-RPC requires (nobody to answer).
        if method == "notifications/cancelled" and isinstance(params, dict):
            return self._cancel(params.get("requestId"))
        if method == "notifications/roots/list_changed":
            self._roots, self._read_roots = None, False  # the next call asks again
        return []

    def _reply_received(self, message: dict[str, Any]) -> list[Action]:
        """A response to a request we sent; an unknown id is ignored."""
        request_id = message.get("id")
        if not isinstance(request_id, str):
            return []
        result = message.get("result")
        return self._answered(request_id, result if isinstance(result, dict) else None)

    # -- tool calls -------------------------------------------------------------

    def _start_call(
        self, request_id: str | int, revision: Revision | None, capabilities: dict[str, Any],
        params: dict[str, Any], can_ask: bool,
    ) -> list[Action]:
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
        if request_id in self._calls:
            raise ProtocolError(INVALID_REQUEST, f"request id {request_id!r} is already in use")
        call = Call(request_id, revision, capabilities, name, arguments,
                    can_ask and self._can_ask)
        call.text = self._structured_text if self._structured_text is not None else (
            _text_client(params["_meta"].get(CLIENT_INFO_KEY)) if revision.stateless
            else self._handshake_text)
        if revision.stateless:
            token = params.get("requestState")
            # The digest (of a write's whole content) only when a state is read or made.
            call.state = RequestState("") if token is None else RequestState.unseal(
                token, call_digest(name, arguments), self._state_key
            )
            responses = params.get("inputResponses")
            call.responses = responses if isinstance(responses, dict) else {}
        self._calls[request_id] = call
        return self._with_roots(call)

    def _with_roots(self, call: Call) -> list[Action]:
        """Start the call's flow once the client's roots are known (None: no
        narrowing), asking for them first where the client has some."""
        if call.state is not None:  # stateless: asked inside the result, once per call
            if lists_roots(call.capabilities) and not call.state.read_roots:
                if not (ROOTS_KEY in call.state.asked and ROOTS_KEY in call.responses):
                    return self._end_round(call, {ROOTS_KEY: {"method": "roots/list"}})
                try:
                    call.state.roots = client_roots(call.responses[ROOTS_KEY])
                except ValueError as exc:
                    return self._unread_roots(call, exc)
                call.state.read_roots = True
            return self._begin(call, call.state.roots)
        if not (call.can_ask and lists_roots(call.capabilities)) or self._read_roots:
            return self._begin(call, self._roots if self._read_roots else None)
        call.stage = "asking"
        if self._roots_question is not None:
            self._questions[self._roots_question].calls.append(call.request_id)
            return []
        question_id, sent = self._ask(call, "roots/list", {}, ROOTS_TIMEOUT_S)
        if question_id in self._questions:  # still open (not answered at once by close)
            self._roots_question = question_id
        return sent

    def _roots_answered(
        self, calls: list[str | int], answer: dict[str, Any] | None
    ) -> list[Action]:
        self._roots_question = None
        try:
            if answer is None:
                raise ValueError("the client did not list its roots")
            roots = client_roots(answer)
        except ValueError as exc:  # every waiting call fails: none runs unnarrowed
            return [act for call in self._live(calls) for act in self._unread_roots(call, exc)]
        self._roots, self._read_roots = roots, True
        return [action for call in self._live(calls) for action in self._begin(call, roots)]

    def _live(self, call_ids: list[str | int]) -> list[Call]:
        return [self._calls[i] for i in call_ids if i in self._calls]

    def _unread_roots(self, call: Call, exc: ValueError) -> list[Action]:
        return self._finish(call, error_answer(call.name, "path_denied", f"{exc}.").public())

    def _begin(self, call: Call, within: list[str] | None) -> list[Action]:
        sandbox = self._start()
        call.flow = sandbox.flow(call.name, call.arguments, within=within, can_ask=True, raw=True)
        return self._advance(call, None)

    def _advance(self, call: Call, reply: Any) -> list[Action]:
        """Step the call's flow with `reply` and act on its next step."""
        assert call.flow is not None and self._sandbox is not None
        try:
            step = call.flow.step(reply)
        except Exception as exc:
            return self._failed(call, exc)
        if step is None:
            assert call.flow.result is not None
            return self._finish(call, call.flow.result)
        if isinstance(step, Submit):
            call.stage = "running"
            return [Run(call.request_id, self._sandbox, step.request)]
        return self._approve(call, step.request)

    def _failed(self, call: Call, exc: Exception) -> list[Action]:
        """A host-side bug: reported to the client as an io_error result, not left
        unanswered."""
        log.error("corral: internal error in a call of %s", call.name, exc_info=exc)
        return self._finish(call, host_bug_answer(call.name, exc).public())

    def _finish(self, call: Call, outcome: dict[str, Any]) -> list[Action]:
        self._close_call(call)
        if call.cancelled:
            return [Drop(call.request_id)]  # withdrawn: no response, as the spec asks
        if not outcome["ok"] and outcome["error"]["code"] == "unknown_tool":
            return [Reply(error_response(
                call.request_id, INVALID_PARAMS, outcome["error"]["message"]))]
        result = tool_result(outcome, structured=call.revision.structured,
                             structured_text=call.text)
        return [Reply(response(call.request_id, self._complete(call.revision, result)))]

    def _drop(self, call: Call) -> list[Action]:
        """End a withdrawn call: nothing more runs and nothing is answered."""
        call.cancelled = True
        self._close_call(call)
        return [Drop(call.request_id)]

    def _close_call(self, call: Call) -> None:
        if call.flow is not None:
            call.flow.close()
        self._calls.pop(call.request_id, None)

    def _end_round(self, call: Call, requests: dict[str, Any]) -> list[Action]:
        """A stateless call needs the client's answers first: end this round with them."""
        assert call.state is not None
        call.state.asked = list(requests)
        call.state.call = call.state.call or call_digest(call.name, call.arguments)
        self._close_call(call)
        return [Reply(response(call.request_id, call.revision.input_required(
            requests, call.state.seal(self._state_key), server_info=SERVER_INFO
        )))]

    def _cancel(self, request_id: object) -> list[Action]:
        call = self._calls.get(request_id) if valid_id(request_id) else None
        if call is None:
            return []
        if call.stage == "running":
            call.cancelled = True  # dropped when its Run is over (the face may kill it)
            return []
        return self._drop(call)  # queued or asking: its question's answer is ignored

    # -- questions to the client ------------------------------------------------

    def _approve(self, call: Call, request: dict[str, Any]) -> list[Action]:
        """An Approve step of `call`'s flow: ask the user through the client."""
        if not (call.revision.elicitation and elicits_forms(call.capabilities)):
            return self._advance(call, NoApprover(NO_ELICITATION))
        message = approval_message(request)
        params = call.revision.elicitation_params(message, approval_choices(request))
        if call.state is not None:
            return self._approve_stateless(call, request, params)
        if not call.can_ask:
            return self._advance(call, NoApprover(NO_REQUESTS))
        call.stage = "asking"
        _, sent = self._ask(call, "elicitation/create", params, ELICITATION_TIMEOUT_S)
        return sent

    def _approve_stateless(
        self, call: Call, request: dict[str, Any], params: dict[str, Any]
    ) -> list[Action]:
        """An answer from this round's inputResponses, else end the round asking."""
        assert call.state is not None
        key = "corral-approve-" + call_digest(request["tool"], request)[:32]
        if key in call.state.approved:
            return self._advance(call, REPLAYED)  # decided (and audited) in an earlier round
        if key in call.state.asked and key in call.responses:
            answer = call.responses[key]
            approval = approval_of(answer if isinstance(answer, dict) else None)
            if approval.allow:
                call.state.approved.append(key)
            return self._advance(call, approval)
        return self._end_round(call, {key: {"method": "elicitation/create", "params": params}})

    def _ask(
        self, call: Call, method: str, params: dict[str, Any], timeout: float
    ) -> tuple[str, list[Action]]:
        """Send a request to the client on `call`'s behalf (after `close`, it counts
        as unanswered at once)."""
        question_id = f"corral-{next(self._request_ids)}"
        self._questions[question_id] = Question(method, [call.request_id])
        if self._ended:
            return question_id, self._answered(question_id, None)
        request = {"jsonrpc": "2.0", "id": question_id, "method": method, "params": params}
        return question_id, [Send(request, call.request_id, timeout)]

    def _answered(self, question_id: str, answer: dict[str, Any] | None) -> list[Action]:
        """The client's answer to a question (None: an error, or no answer)."""
        question = self._questions.pop(question_id, None)
        if question is None:
            return []
        if question.method == "roots/list":
            return self._roots_answered(question.calls, answer)
        actions: list[Action] = []
        for call in self._live(question.calls):
            call.stage = "running"  # stepped on at once
            actions += self._advance(call, approval_of(answer))
        return actions
