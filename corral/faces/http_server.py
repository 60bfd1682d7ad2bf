"""MCP over Streamable HTTP for many tenants: `corral serve --http HOST:PORT --tenants FILE`.

One endpoint, `/mcp`, in front of one corral.Pool. This module is only the HTTP
face: what the messages mean, for every revision, is mcp_core.McpSession.

The HTTP server itself is uvicorn (an ASGI server: HTTP/1.1 parsing, keep-alive,
header size limits, graceful shutdown, maintained and widely deployed), with
http_guard's cap on connections and deadline for headers, which it lacks; what
is ours is the small ASGI application below, written against the ASGI interface
directly (no web framework) because everything it does is a check that must
come in a fixed order (after the probes, /healthz and /readyz, and the drain's
refusal of new requests: faces/health.py):

1. the path is /mcp (else 404) and, when bound to a loopback address, the Host
   header names a loopback host (DNS rebinding);
2. an Origin header, if sent, is one of the allowed origins (else 403);
3. the bearer token names a tenant (else 401, before the body is read: nothing
   runs); the token's SHA-256 is compared in constant time with every tenant's;
4. the tenant has fewer than max_tenant_requests requests in progress (reading
   their body, waiting for a call thread or running; else 429, before the body
   is read, so one tenant's flood holds a bounded amount of memory);
5. the body is JSON, one JSON-RPC message, at most max_body_bytes, arriving
   within client_timeout_s (else 415, 413, 408 or 400).
6. a request of the stateless revision has the SEP-2243 headers its body calls
   for, saying what it says (http_headers; else 400 with a JSON-RPC error).

Sessions: an `initialize` opens a session of the tenant's (its own Sandbox from
the pool, so a session's read-before-write and approvals are its own) and
returns its `Mcp-Session-Id`; later requests name it (an id another tenant
holds is unknown here: 404). Requests of the stateless revision (2026-07-28)
need no session: they share one per tenant, in which each request gets an id of
its own (a client's ids are its own: two clients may both count from 1), given
back to the client in the answer. A response is one JSON body, unless a
handshake session's call asks its client something first (an approval, the
client's roots): then the answer is an event stream that carries the
question, and the response once the client has POSTed its answer (a request
that does not accept text/event-stream cannot be asked: its supervised call
fails `approval_required`). The stateless revision asks inside results
(`input_required`). A client that disconnects while its call runs cancels it
(a queued call never runs; a running one has its worker killed).

Each session's core (mcp_core, sans-I/O) is run by a mcp_threads.SessionDriver
on the tenant's call threads; what it says goes to the request it belongs to
(HttpSession.channels), and the event loop writes it out (_Answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import secrets
import socket
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from corral import jsonfast
from corral.calls.waiting import Cancel, WaitPolicy
from corral.config import ConfigError, Remedy
from corral.faces.drain import Conductor
from corral.faces.health import Health, Readiness
from corral.faces.http_guard import RETRY_AFTER_S, guarded
from corral.faces.http_headers import refusal
from corral.faces.logs import log
from corral.faces.mcp_actions import Action, Drop, Reply, Run
from corral.faces.mcp_core import McpSession
from corral.faces.mcp_jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    error_response,
    valid_id,
)
from corral.faces.mcp_revisions import PROTOCOL_VERSION_KEY
from corral.faces.mcp_threads import SessionDriver
from corral.faces.roster import Roster
from corral.faces.stdio import parse_line
from corral.faces.tenants import Tenant, find_tenant, tenant_config
from corral.host.quota import CALLS, QuotaUsage
from corral.observe import Observer
from corral.pool import Pool

if TYPE_CHECKING:  # imported only with --metrics (faces/metrics.py: prometheus_client)
    from corral.faces.metrics import Metrics

ENDPOINT = "/mcp"
DEFAULT_PORT = 8931
METRICS_PORT = 9464  # --metrics HOST alone: the port Prometheus exporters commonly take
# A request body: a write_file of max_write_bytes (1 MiB), base64 and JSON-escaped, fits.
MAX_BODY_BYTES = 4 * 1024 * 1024
# Sessions a tenant may hold open; an initialize past this closes its least recently used.
MAX_SESSIONS_PER_TENANT = 32
# Calls of one tenant running or waiting for a worker at once; beyond, they queue here.
CALL_THREADS_PER_TENANT = 8
# A tenant's requests in progress at once (reading their body, queued or running):
# its call threads and as many again waiting; beyond, 429.
MAX_TENANT_REQUESTS = 2 * CALL_THREADS_PER_TENANT
# Connections open at once, with ACCEPT_BURST well under the usual 1,024 open files
# (the pool's workers need some too); beyond, the longest waiting for its headers
# is closed.
MAX_CONNECTIONS = 512
ACCEPT_BURST = 128  # connections accepted at a time
# The metrics listener's connections (a scraper keeps one or two open); beyond, as
# on /mcp, the longest waiting for its headers is closed.
METRICS_MAX_CONNECTIONS = 16
LISTEN_QUEUE = 2048  # connections the kernel holds until they are accepted
# A request's headers, and then its body, must each arrive within this long; a
# client that leaves its answer unread this long is cut off (http_guard).
CLIENT_TIMEOUT_S = 30.0
SESSION_HEADER = "mcp-session-id"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 rpc: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.rpc = rpc  # a JSON-RPC error to send as the body, instead of plain text


def said_to_a_tenant(remedy: Remedy) -> str:
    """A config error's fix, said to a tenant's client: its settings are changed in
    the tenant's config that the tenants file names, not on a command line."""
    if remedy.where == "name_file":
        return ("To trust the file, name it as the tenant's config (`config` in its "
                "entry of the tenants file)")
    return (f"Set {', '.join(remedy.keys)} in the tenant's own config (`config` in its entry "
            "of the tenants file)")


class HttpSession:
    """One MCP session of a tenant's: its core, the driver that runs it on the
    tenant's call threads, and the requests waiting for their answers."""

    def __init__(self, session: McpSession, threads: ThreadPoolExecutor) -> None:
        self.core = session
        # the calls_per_minute of its sandbox, once open, for TenantState.refuses (None:
        # none, not open yet, or the sandbox keeps an audit log)
        self.calls_per_minute: int | None = None
        self.driver = SessionDriver(session, deliver=self._deliver, spawn=self.spawn)
        self._threads = threads
        # A request's id in this session -> where its answer (and the questions of
        # its call) go, and the handle that gives up on its call. Each key is added
        # and removed by the one request that owns it (single dict operations).
        self.channels: dict[str | int, Callable[[Action], None]] = {}
        self.cancels: dict[str | int, Cancel] = {}

    def spawn(self, run: Run) -> None:
        wait = WaitPolicy(cancel=self.cancels.get(run.call))
        self._threads.submit(self.driver.execute, run, wait)

    def _deliver(self, action: Action, own: Callable[[Action], None]) -> None:
        key = action.message.get("id") if isinstance(action, Reply) else action.call
        if key is None:
            own(action)  # an error for a message with no usable id: its own request's
            return
        channel = self.channels.get(key) if valid_id(key) else None
        if channel is not None:
            channel(action)
        # else its client has gone: nobody to tell (a question then times out)

    def end(self) -> None:
        self.driver.close()
        threading.Thread(target=self.core.shut, daemon=True).start()  # waits for its calls


class TenantState:
    """A tenant's sessions and call threads; sandboxes come from the shared pool."""

    def __init__(self, tenant: Tenant, pool: Pool, *, protected: tuple[str, ...] = (),
                 max_requests: int = MAX_TENANT_REQUESTS, observer: Observer | None = None,
                 structured_text: bool | None = None, state_key: bytes | None = None) -> None:
        self.tenant = tenant
        self.state_key = state_key  # McpSession's
        self.structured_text = structured_text  # McpSession's
        self.pool = pool
        self.protected = protected
        self.max_requests = max_requests
        self.observer = observer  # hears of the calls of every sandbox of the tenant's
        self.sandboxes: weakref.WeakSet[Any] = weakref.WeakSet()  # open ones, for queued()
        self.in_progress = 0  # requests admitted and not yet done; on the event loop only
        # Requests whose call waits for its client's answer (an open event stream, no
        # thread): at most max_requests may ask at once, so a tenant's questions hold
        # a bounded share of the server's connections. On the event loop only.
        self.asking = 0
        self.sessions: OrderedDict[str, HttpSession] = OrderedDict()
        # The tenant's quotas count every session's calls: one usage for all of them.
        self.quota_usage = QuotaUsage()
        self.stateless: HttpSession | None = None
        self.lock = threading.Lock()
        self.threads = ThreadPoolExecutor(
            CALL_THREADS_PER_TENANT, thread_name_prefix=f"corral-{tenant.name}"
        )

    def new_session(self) -> HttpSession:
        def open_sandbox(approve: Callable[[dict[str, Any]], bool]) -> Any:
            # read each time: the workspace's own corral.toml may narrow it meanwhile
            config = tenant_config(self.tenant)
            # the server's own files (the tenants file, every tenant's config) are the
            # operator's wherever they lie: no tool of any tenant writes them
            sandbox = self.pool.sandbox_from_config(
                config, approve=approve, policy=config.policy.protecting(*self.protected),
                quota_usage=self.quota_usage, observer=self.observer)
            with self.lock:
                self.sandboxes.add(sandbox)
            # a refusal answered on the event loop (refuses) must do no I/O: an audited
            # one writes its record under a lock another process may hold
            session.calls_per_minute = (
                None if config.audit_path else sandbox.quota.calls_per_minute)
            return sandbox

        # `session` is the HttpSession: open_sandbox tells it its sandbox's calls quota
        session = HttpSession(McpSession(open_sandbox, say_remedy=said_to_a_tenant,
                                         structured_text=self.structured_text,
                                         state_key=self.state_key), self.threads)
        return session

    def refuses(self, session: HttpSession, message: dict[str, Any]) -> bool:
        """`message` is a tools/call that `session`'s sandbox will refuse for want of
        calls_per_minute: the tenant's calls (never given back) fill its window.
        Only room that appears meanwhile can change that (a slot expiring)."""
        limit = session.calls_per_minute
        return (limit is not None and message.get("method") == "tools/call"
                and self.quota_usage.used(CALLS) >= limit)

    def open(self) -> tuple[str, HttpSession]:
        session = self.new_session()
        session_id = secrets.token_urlsafe(24)
        with self.lock:
            self.sessions[session_id] = session
            evicted = []
            while len(self.sessions) > MAX_SESSIONS_PER_TENANT:
                evicted.append(self.sessions.popitem(last=False)[1])
        for old in evicted:
            old.end()
        return session_id, session

    def find(self, session_id: str) -> HttpSession | None:
        with self.lock:
            session = self.sessions.get(session_id)
            if session is not None:
                self.sessions.move_to_end(session_id)
            return session

    def end(self, session_id: str) -> bool:
        with self.lock:
            session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        session.end()
        return True

    def queued(self) -> int:
        """Calls of the tenant's sandboxes waiting for a worker of the pool now."""
        with self.lock:
            sandboxes = list(self.sandboxes)
        return sum(sandbox.stats()["queued_calls"] for sandbox in sandboxes)

    def shared(self) -> HttpSession:
        with self.lock:
            replaced = self.stateless
            if replaced is not None and not replaced.core.workspace_replaced():
                return replaced
            # none yet, or its workspace directory was replaced (removed and made
            # again): a new sandbox on the directory there now, as a restart would
            # give; the old one's calls in flight finish on the old directory
            self.stateless = session = self.new_session()
        if replaced is not None:
            replaced.end()
        return session

    def close(self) -> None:
        with self.lock:
            sessions = [*self.sessions.values(), *([self.stateless] if self.stateless else [])]
            self.sessions.clear()
            self.stateless = None
        for session in sessions:
            session.end()
        self.threads.shutdown(wait=True)


class HttpFace:
    """The ASGI application (see the module docstring for the order of checks)."""

    def __init__(
        self, pool: Pool, tenants: list[Tenant], *, allowed_origins: list[str],
        loopback_only: bool, max_body_bytes: int = MAX_BODY_BYTES,
        max_tenant_requests: int = MAX_TENANT_REQUESTS, client_timeout_s: float = CLIENT_TIMEOUT_S,
        protected: tuple[str, ...] = (), observers: Mapping[str, Observer] | None = None,
        structured_text: bool | None = None, state_key: bytes | None = None,
    ) -> None:
        """observers: a tenant's name -> the observer of its sandboxes. structured_text,
        state_key: McpSession's."""
        self.pool = pool
        self.tenants = tenants
        self._new_state = functools.partial(
            TenantState, pool=pool, max_requests=max_tenant_requests,
            structured_text=structured_text, state_key=state_key)
        self.states = {
            tenant.name: self._new_state(tenant, protected=protected,
                                         observer=(observers or {}).get(tenant.name))
            for tenant in tenants
        }
        self.allowed_origins = {origin.rstrip("/").lower() for origin in allowed_origins}
        self.loopback_only = loopback_only
        self.max_body_bytes = max_body_bytes
        self.client_timeout_s = client_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # uvicorn runs with ws="none": never a websocket
            return
        try:
            await self._serve(scope, receive, send)
        except HttpError as exc:
            await _respond_error(send, exc)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        if scope["path"] != ENDPOINT:
            raise HttpError(404, "not found; the MCP endpoint is /mcp")
        self._check_host(headers.get("host", ""))
        self._check_origin(headers.get("origin"))
        state = self._authenticate(headers.get("authorization"))
        method = scope["method"]
        if method == "POST":
            await self._post(state, headers, receive, send, scope["headers"])
        elif method == "DELETE":
            session_id = headers.get(SESSION_HEADER, "")
            if not state.end(session_id):
                raise HttpError(404, "unknown session")
            await _respond(send, 204, b"", {})
        else:
            raise HttpError(405, "use POST (DELETE ends a session)", {"allow": "POST, DELETE"})

    # -- the checks ----------------------------------------------------------------

    def _check_host(self, host: str) -> None:
        if not self.loopback_only:
            return
        name = urlsplit(f"//{host}").hostname or ""
        if not _is_loopback(name):
            raise HttpError(403, "forbidden host: this server answers to loopback names only")

    def _check_origin(self, origin: str | None) -> None:
        if origin is None:
            return  # not a browser: nothing to rebind
        normal = origin.rstrip("/").lower()
        if normal in self.allowed_origins:
            return
        if not self.allowed_origins and _is_loopback(urlsplit(normal).hostname or ""):
            return
        raise HttpError(403, "forbidden origin")

    def _authenticate(self, authorization: str | None) -> TenantState:
        token = None
        if authorization is not None:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer":
                token = value.strip()
        tenant = find_tenant(self.tenants, token)
        if tenant is None:
            raise HttpError(
                401, "a valid bearer token is required",
                {"www-authenticate": 'Bearer realm="corral"'},
            )
        return self.states[tenant.name]

    # -- one message -----------------------------------------------------------------

    async def _post(
        self, state: TenantState, headers: dict[str, str], receive: Receive, send: Send,
        raw: list[tuple[bytes, bytes]],
    ) -> None:
        if not headers.get("content-type", "").lower().startswith("application/json"):
            raise HttpError(415, "the body must be application/json")
        accept = headers.get("accept", "*/*").lower()
        if not any(kind in accept for kind in ("application/json", "application/*", "*/*")):
            raise HttpError(406, "this server answers with application/json")
        if state.in_progress >= state.max_requests:
            raise HttpError(429, f"tenant {state.tenant.name} has {state.max_requests} requests "
                            "in progress, the most it may; try again shortly",
                            {"retry-after": str(RETRY_AFTER_S)})
        state.in_progress += 1
        try:
            message = _parse(await self._body(headers, receive))
            modern = _checked(raw, message)
            session, new_id, client_id, message = self._route(state, headers, message)
        except BaseException:
            state.in_progress -= 1
            raise
        # A question to a handshake client travels in the answer's event stream.
        streams = "text/event-stream" in accept and state.asking < state.max_requests
        await self._run(state, session, message, receive, send, new_id, client_id, streams,
                        modern)

    def _route(
        self, state: TenantState, headers: dict[str, str], message: dict[str, Any]
    ) -> tuple[HttpSession, str | None, Any, dict[str, Any]]:
        """(the session that serves `message`, the id of a session it opens, the
        client's own request id when the shared session serves it under another,
        the message to hand it)."""
        session_id = headers.get(SESSION_HEADER)
        if session_id is not None:
            session = state.find(session_id)
            if session is None:
                raise HttpError(404, "unknown session", rpc=error_response(
                    message.get("id"), INVALID_REQUEST, "unknown or expired session"))
            return session, None, None, message
        if message.get("method") == "initialize" and "id" in message:
            new_id, session = state.open()
            return session, new_id, None, message
        if _needs_session(message):
            # Streamable HTTP, Session Management: a server that requires a session id
            # SHOULD answer a request without one (other than initialize) 400.
            raise HttpError(400, f"missing {SESSION_HEADER}", rpc=error_response(
                message.get("id"), INVALID_REQUEST,
                f"{message['method']} needs the {SESSION_HEADER} header of an initialized "
                f"session, or params._meta[{PROTOCOL_VERSION_KEY!r}] (protocol 2026-07-28)"))
        if "method" not in message or not valid_id(message.get("id")):
            return state.shared(), None, None, message
        # The shared session serves every client of the tenant, and a client's ids are
        # its own: the request runs there under an id no client chose, and its answer
        # goes back under the client's.
        ours = {**message, "id": f"http-{secrets.token_hex(8)}"}
        return state.shared(), None, message["id"], ours

    async def _run(
        self, state: TenantState, session: HttpSession, message: dict[str, Any],
        receive: Receive, send: Send, new_id: str | None, client_id: Any, streams: bool,
        modern: bool,
    ) -> None:
        """Hand `message` to a call thread of the tenant's and answer; the request
        counts against the tenant's bound until it is answered, or until the work
        it started on a call thread is over (a call waiting for its client's
        answer holds no thread)."""
        loop = asyncio.get_running_loop()
        actions: asyncio.Queue[Action] = asyncio.Queue()

        def put(action: Action) -> None:
            loop.call_soon_threadsafe(actions.put_nowait, action)

        key = message["id"] if "method" in message and valid_id(message.get("id")) else None
        if key is not None and key in session.channels:
            # two open requests with one id: their answers could not be told apart
            state.in_progress -= 1
            await _respond(send, 200, _encode(error_response(
                key, INVALID_REQUEST, f"request id {key!r} is already in use")),
                {"content-type": "application/json"})
            return
        cancel = Cancel()
        if key is not None:
            session.channels[key] = put
            session.cancels[key] = cancel
        if key is not None and state.refuses(session, message):
            # Refused, or as good as: the session says so here, on the event loop, with
            # no call thread to wait for (a flood of refusals would hold them all and
            # slow the tenant's other calls, and a hand-over to a thread costs more
            # than the refusal). Should room appear meanwhile, the call runs on one.
            said: list[Action] = []
            session.channels[key] = said.append
            for run in session.driver.handle(message, said.append, can_ask=streams):
                session.spawn(run)
            session.channels[key] = put
            if len(said) == 1 and isinstance(said[0], Reply):
                session.channels.pop(key, None)
                session.cancels.pop(key, None)
                state.in_progress -= 1
                await _Answer(send, new_id, client_id, state, modern).send(said[0])
                return
            for action in said:
                actions.put_nowait(action)
            work: asyncio.Future[None] = loop.create_future()
            work.set_result(None)
        else:
            work = loop.run_in_executor(
                state.threads, _handle, session, message, put, cancel, streams, key
            )
        counted = True

        def release(_work: object = None) -> None:
            nonlocal counted
            if counted:
                counted = False
                state.in_progress -= 1

        work.add_done_callback(release)
        gone = asyncio.ensure_future(_disconnected(receive))
        answer = _Answer(send, new_id, client_id, state, modern)
        try:
            if await self._answer(actions, work, gone, answer, key):
                if new_id and answer.failed:  # a failed initialize opens no session
                    state.end(new_id)
                return
            if gone.done() and not gone.cancelled() and key is not None:
                # the client went away: its call is cancelled (queued: never runs;
                # running: its worker is killed) and nobody is left to answer
                cancel.cancel()
                session.driver.handle({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                       "params": {"requestId": key}})
        finally:
            left = gone.done() and not gone.cancelled()
            gone.cancel()
            if not left:
                release()  # else it counts until its work is over (work's callback)
            answer.done()
            if key is not None:
                session.channels.pop(key, None)
                session.cancels.pop(key, None)

    async def _answer(
        self, actions: asyncio.Queue[Action], work: asyncio.Future[None],
        gone: asyncio.Future[None], answer: _Answer, key: str | int | None,
    ) -> bool:
        """Send what the session says for this request: its answer as one JSON
        body, or, once its call asks the client something first, an event stream
        of the questions and then the answer. False if the client went away."""
        while True:
            getter = asyncio.ensure_future(actions.get())
            waits: set[asyncio.Future[Any]] = {getter, gone}
            if not work.done():
                waits.add(work)
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                if await answer.send(getter.result()):
                    return True
                continue
            getter.cancel()
            if gone.done():
                return False
            if not actions.empty():
                continue  # said just before the work ended
            if work.exception() is not None:  # a bug, reported on stderr: not left hanging
                if key is None:
                    await answer.nothing()
                else:
                    await answer.send(Reply(error_response(key, INTERNAL_ERROR, "internal error")))
                return True
            if key is None:
                await answer.nothing()  # a notification or a response: nothing to say
                return True
            # else the call waits for its client's answer: its answer comes later

    async def _body(self, headers: dict[str, str], receive: Receive) -> bytes:
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise HttpError(400, "invalid content-length")
            if int(declared) > self.max_body_bytes:
                raise HttpError(413, f"the body is {declared} bytes, over the limit of "
                                f"{self.max_body_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.client_timeout_s):  # the whole body, not each part
                while True:
                    event = await receive()
                    if event["type"] == "http.disconnect":
                        raise HttpError(400, "the client went away")
                    chunk = event.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        raise HttpError(413, "the body is over the limit of "
                                        f"{self.max_body_bytes} bytes")
                    chunks.append(chunk)
                    if not event.get("more_body"):
                        return b"".join(chunks)
        except TimeoutError:
            raise HttpError(408, f"the body did not arrive within {self.client_timeout_s:g} s",
                            {"connection": "close"}) from None

    def queued(self) -> dict[str, int]:
        """Each tenant's calls waiting for a worker now."""
        return {name: state.queued() for name, state in self.states.items()}

    def set_tenants(self, tenants: list[Tenant], protected: tuple[str, ...],
                    observers: Mapping[str, Observer]) -> list[TenantState]:
        """Serve `tenants` from the next request on (on the event loop: no request is
        between its authentication and its state then). A tenant whose entry is
        unchanged keeps its state and sessions; returns the states of those no longer
        served (removed or changed), for faces/drain.py to close once their requests
        are done."""
        kept = {tenant.name: self.states[tenant.name] for tenant in tenants
                if tenant.name in self.states and self.states[tenant.name].tenant == tenant}
        removed = [state for name, state in self.states.items() if kept.get(name) is not state]
        for state in kept.values():
            state.protected = protected  # a new tenant's config is the server's file too
        self.states = {
            tenant.name: kept.get(tenant.name) or self._new_state(
                tenant, protected=protected, observer=observers.get(tenant.name))
            for tenant in tenants
        }
        self.tenants = tenants
        return removed

    def stop_calls(self) -> None:
        """End every call in flight now (faces/drain.py, at the drain's deadline)."""
        for state in list(self.states.values()):
            with state.lock:
                sessions = [*state.sessions.values(), state.stateless]
            for session in sessions:
                if session is not None:
                    session.core.stop_calls()

    def close(self) -> None:
        for state in self.states.values():
            state.close()


def _handle(
    session: HttpSession, message: dict[str, Any], put: Callable[[Action], None],
    cancel: Cancel, streams: bool, key: str | int | None,
) -> None:
    """On a tenant's thread: the message, and the call it starts, which `cancel`
    may give up on (a cancelled call leaves the queue, or its worker is killed).
    Calls the message lets go on (an answer to a question) run on other threads."""
    try:
        for run in session.driver.handle(message, put, can_ask=streams):
            if run.call == key:
                session.driver.execute(run, WaitPolicy(cancel=cancel))
            else:
                session.spawn(run)
    except Exception:
        # a host-side bug: the request is answered "internal error"
        log.exception("corral: internal error handling a request")
        raise


class _Answer:
    """One request's HTTP answer: a JSON body, or an event stream once a question
    comes before the answer."""

    def __init__(
        self, send: Send, new_id: str | None, client_id: Any, state: TenantState,
        modern: bool = False,
    ) -> None:
        self._send = send
        # 2026-07-28 (Streamable HTTP, Protocol Version Header): a method the server
        # does not implement is HTTP 404 with -32601
        self._modern = modern
        self._new_id = new_id
        self._client_id = client_id  # the id to answer under, if not the message's own
        self._state = state
        self._streaming = False
        self.failed = False

    def done(self) -> None:
        if self._streaming:
            self._state.asking -= 1
            self._streaming = False

    def _headers(self, kind: str) -> dict[str, str]:
        extra = {SESSION_HEADER: self._new_id} if self._new_id and not self.failed else {}
        return {"content-type": kind, **extra}

    async def send(self, action: Action) -> bool:
        """Carry one action out; True once the request is answered."""
        if isinstance(action, Drop):  # withdrawn: nothing more to say
            if self._streaming:
                await self._send({"type": "http.response.body", "body": b""})
            else:
                await self.nothing()
            return True
        assert not isinstance(action, Run)  # a face runs those itself
        message = action.message
        if isinstance(action, Reply):
            self.failed = "error" in message
            if self._client_id is not None:
                message = {**message, "id": self._client_id}
        if not self._streaming and isinstance(action, Reply):
            unknown = self._modern and message.get("error", {}).get("code") == METHOD_NOT_FOUND
            await _respond(send=self._send, status=404 if unknown else 200,
                           body=_encode(message), headers=self._headers("application/json"))
            return True
        if not self._streaming:
            self._streaming = True
            self._state.asking += 1
            raw = [(k.encode("latin-1"), v.encode("latin-1"))
                   for k, v in self._headers("text/event-stream").items()]
            raw.append((b"cache-control", b"no-store"))
            await self._send({"type": "http.response.start", "status": 200, "headers": raw})
        done = isinstance(action, Reply)
        await self._send({"type": "http.response.body", "more_body": not done,
                          "body": b"event: message\ndata: " + _encode(message) + b"\n\n"})
        return done

    async def nothing(self) -> None:
        await _respond(self._send, 202, b"", {})


async def _disconnected(receive: Receive) -> None:
    """Returns once the client has gone (the body was read: the next event is that)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _parse(body: bytes) -> dict[str, Any]:
    try:
        message = parse_line(body)
    except ValueError as exc:
        raise HttpError(400, "parse error", rpc=error_response(
            None, PARSE_ERROR, f"parse error: {exc}")) from None
    if not isinstance(message, dict):
        raise HttpError(400, "invalid request", rpc=error_response(
            None, INVALID_REQUEST, "expected one JSON-RPC message (an object); batches are "
            "not supported")) from None
    return message


def _checked(raw: list[tuple[bytes, bytes]], message: dict[str, Any]) -> bool:
    """Whether `message` is a request of the stateless revision, once its SEP-2243
    headers are checked (http_headers); HttpError if they are refused."""
    refused = refusal(raw, message)
    if refused is not None:
        request_id = message.get("id")
        raise HttpError(refused.status, refused.message, rpc=error_response(
            request_id if valid_id(request_id) else None, refused.code, refused.message,
            refused.data))
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def _needs_session(message: dict[str, Any]) -> bool:
    """A handshake-revision request (no protocol version in its _meta) that only an
    initialized session can serve; ping needs none."""
    if "id" not in message or message.get("method") in (None, "initialize", "ping"):
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return not (isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta)


def _headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope["headers"]}


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _encode(value: dict[str, Any]) -> bytes:
    return jsonfast.dumps(value, for_client=True)  # strict JSON; a large read as it came


async def _respond(send: Send, status: int, body: bytes, headers: dict[str, str]) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _respond_error(send: Send, error: HttpError) -> None:
    if error.rpc is not None:
        body, kind = _encode(error.rpc), "application/json"
    else:
        body, kind = (error.message + "\n").encode(), "text/plain; charset=utf-8"
    with contextlib.suppress(Exception):  # the client may be gone already
        await _respond(send, error.status, body, {"content-type": kind, **error.headers})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        event = await receive()
        if event["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif event["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def parse_address(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT, :PORT or PORT (host 127.0.0.1), or HOST (`default_port`)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.isdigit():
        host, port = "", text
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
    port = port or str(default_port)
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"invalid port in {text!r}")
    return host or "127.0.0.1", int(port)


def serve(
    address: str, roster: Roster, *, allowed_origins: list[str],
    max_workers: int, idle_timeout_s: float, max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = MAX_CONNECTIONS, max_tenant_requests: int = MAX_TENANT_REQUESTS,
    client_timeout_s: float = CLIENT_TIMEOUT_S,
    ready: Callable[[str, int], None] = lambda host, port: None,
    metrics: str | None = None, log_format: str = "text", structured_text: bool | None = None,
    state_key: bytes | None = None, drain_delay_s: float = 0.0,
    drain_timeout_s: float | None = None, reload: Callable[[], Roster] | None = None,
) -> None:
    """Serve `roster`'s tenants until SIGINT, or SIGTERM and a drain (faces/drain.py:
    drain_delay_s, drain_timeout_s); `ready(host, port)` once listening; `reload`
    reads the tenants file again at SIGHUP. metrics: HOST:PORT to serve Prometheus
    metrics at (faces/metrics.py). log_format: "json" sends uvicorn's log records to
    corral's handler (faces/logs.py) instead of uvicorn's own. state_key: what seals
    requestState (faces/state_key.py)."""
    try:
        import uvicorn
        from uvicorn.config import LOGGING_CONFIG
        from uvicorn.protocols.http.auto import AutoHTTPProtocol
    except ImportError:
        raise ConfigError("the HTTP face needs the http extra: pip install '.[http]' in the "
                          "corral clone, or pip install uvicorn prometheus_client") from None
    host, port = parse_address(address)
    if not _is_loopback(host):
        log.warning("corral: warning: %s is not a loopback address and this server speaks plain "
                    "HTTP (tokens and files in clear text); put TLS in front of it (a reverse "
                    "proxy)", host)
    with listen(host, port) as sock, serving_metrics(metrics) as exported, Pool(
            max_workers=max_workers, idle_timeout_s=idle_timeout_s) as pool:
        def observers(roster: Roster) -> dict[str, Observer]:
            return {} if exported is None else {
                tenant.name: exported.metrics.observer(tenant.name)
                for tenant in roster.tenants}

        face = HttpFace(pool, roster.tenants, allowed_origins=allowed_origins,
                        loopback_only=_is_loopback(host), max_body_bytes=max_body_bytes,
                        max_tenant_requests=max_tenant_requests, client_timeout_s=client_timeout_s,
                        protected=roster.protected, observers=observers(roster),
                        structured_text=structured_text, state_key=state_key)
        health = Health(face, Readiness(pool, roster.require))
        if exported is not None:
            exported.metrics.watch(pool.stats, face.queued)

        def started(host: str, port: int) -> None:
            conductor.install()
            ready(host, port)
            if exported is not None:
                url = f"http://{shown_host(exported.host)}:{exported.port}/metrics"
                log.info("corral: serving Prometheus metrics at %s", url, extra={"url": url})

        config = uvicorn.Config(
            health, host=host, port=port, lifespan="on", log_level="warning",
            access_log=False, server_header=False, timeout_graceful_shutdown=5,
            http=guarded(AutoHTTPProtocol, max_connections=max_connections,
                         timeout_s=client_timeout_s),
            # asyncio accepts up to `backlog` connections at a time before the guard sees
            # any of them: kept small, so a burst cannot run the process out of files
            # (_run lengthens the listen queue, which asyncio sets to the same number)
            backlog=min(max_connections, ACCEPT_BURST),
            # no WebSocket: an upgrade request is served as the plain request it also is
            ws="none",
            # json: no handlers of uvicorn's own; its records reach corral's JSON one
            log_config=None if log_format == "json" else LOGGING_CONFIG,
        )
        server = uvicorn.Server(config)
        beside = None if exported is None else exported.server(client_timeout_s)
        conductor = Conductor(server, face, health, roster, delay_s=drain_delay_s,
                              timeout_s=drain_timeout_s, load=reload, observers=observers)
        try:
            asyncio.run(_run(server, sock, host, started, beside))
        finally:
            face.close()
            health.readiness.close()


class Exported:
    """The metrics of `--metrics`, and the listener that serves them: uvicorn, with
    the guard of /mcp (a cap on connections, a deadline for headers and for a
    client to read), since it needs no token. It runs on the MCP endpoint's event
    loop, started and stopped with it."""

    def __init__(self, metrics: Metrics, sock: socket.socket) -> None:
        self.metrics = metrics
        self.sock = sock
        self.host, self.port = sock.getsockname()[:2]

    def server(self, timeout_s: float) -> tuple[Any, socket.socket]:
        """(the uvicorn server, the socket it serves)."""
        import uvicorn
        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        class Beside(uvicorn.Server):
            """A second server of the process: signals are the main one's (uvicorn's
            own capture would take them from it); _run stops this one after it."""

            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        return Beside(uvicorn.Config(
            self.metrics.app, lifespan="off", log_level="warning", log_config=None,
            access_log=False, server_header=False, timeout_graceful_shutdown=1, ws="none",
            http=guarded(AutoHTTPProtocol, max_connections=METRICS_MAX_CONNECTIONS,
                         timeout_s=timeout_s),
            backlog=METRICS_MAX_CONNECTIONS)), self.sock


@contextlib.contextmanager
def serving_metrics(address: str | None) -> Iterator[Exported | None]:
    """The Prometheus listener's socket at `address` (None: no metrics), bound for
    the server's life."""
    if address is None:
        yield None
        return
    try:
        from corral.faces.metrics import Metrics
    except ImportError:
        raise ConfigError("--metrics needs prometheus_client: pip install '.[http]' in the "
                          "corral clone, or pip install prometheus_client") from None
    with listen(*parse_address(address, METRICS_PORT), doing="serve metrics on") as sock:
        yield Exported(Metrics(), sock)


def listen(host: str, port: int, doing: str = "listen on") -> socket.socket:
    """The listening socket, bound here rather than by uvicorn so that an address in
    use is one ConfigError (uvicorn logs it and exits). Made as asyncio makes its
    own, down to the protocol number: asyncio sets TCP_NODELAY only on connections
    of a socket whose protocol is TCP, and without it every answer waited 40 ms
    for a delayed acknowledgement."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"cannot {doing} {shown}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(LISTEN_QUEUE)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot {doing} {shown}: "
                          f"{(exc.strerror or str(exc)).lower()}") from None
    return sock


async def _run(
    server: Any, sock: socket.socket, host: str, ready: Callable[[str, int], None],
    beside: tuple[Any, socket.socket] | None = None,
) -> None:
    """Serve until `server` stops; `beside`: (the metrics server, its socket), served
    meanwhile on this loop."""
    metrics_server: Any = None if beside is None else beside[0]
    side = None if beside is None else asyncio.ensure_future(
        metrics_server.serve(sockets=[beside[1]]))
    try:
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:  # port 0 asks for any free port: say which
            sock.listen(LISTEN_QUEUE)  # a full queue drops connections, which retry 1 s later
            ready(host, sock.getsockname()[1])
        await task
    finally:
        if side is not None:
            metrics_server.should_exit = True
            await side


def announce(host: str, port: int) -> None:
    url = f"http://{shown_host(host)}:{port}{ENDPOINT}"
    log.info("corral: serving MCP over HTTP at %s", url, extra={"url": url})


def shown_host(host: str) -> str:
    """A host as a URL spells it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host
