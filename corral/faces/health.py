"""The HTTP face's probes and its refusal while it drains, in front of the MCP app.

    GET /healthz   200 while the process serves (a liveness probe)
    GET /readyz    200 once ready; 503 while starting, short of `require`,
                   halted, or draining (a readiness probe)

Both are answered without a token, before the MCP face's checks, and their
bodies name no tenant and no path: a probe may come from anything that reaches
the port. Ready means: the pool's zygote template is spawned and a worker forked
from it answers a call, the tenants file is loaded, and that worker's
confinement has every layer some tenant's `[sandbox] require` names. A
background check repeats the call every READY_CHECK_S, so a pool that stops
serving (its workers cannot confine themselves, say) turns the probe to 503.

While the server drains (faces/drain.py) the wrapper refuses every new request
but the probes with 503 and Retry-After, and counts the requests in flight so
the drain knows when the last has been answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from corral.config import HistoryOptions
from corral.errors import SandboxError
from corral.faces.logs import log
from corral.pool import Pool

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
READY_CHECK_S = 10.0  # how often a worker of the pool is asked a call, once ready
DRAIN_RETRY_AFTER_S = 5  # what a refused request is told: another replica serves by then
PROBE_PREFIX = "corral-probe-"  # the probe sandbox's directory, in the temp directory

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class Readiness:
    """Whether the pool serves: a probe sandbox of its own, over an empty directory
    of its own (no tenant's workspace, history off), whose one call says the
    template forks workers that confine themselves, and with which layers."""

    def __init__(self, pool: Pool, require: Sequence[str]) -> None:
        self.pool = pool
        self.require = tuple(dict.fromkeys(require))
        self.short: str | None = "starting"  # None: ready; else why not, in a few words
        self._dir = tempfile.TemporaryDirectory(prefix=PROBE_PREFIX)
        self._sandbox: Any = None
        self._lock = threading.Lock()  # the watch's check and a reload's: one at a time

    def set_require(self, require: Sequence[str]) -> None:
        """The layers the tenants now loaded require (after a reload)."""
        self.require = tuple(dict.fromkeys(require))

    def check(self) -> str | None:
        """Blocking: one call on the probe sandbox; sets and returns `short`, and
        logs a change of it (not every failed check again)."""
        with self._lock:
            short, detail = self._check()
            if short != self.short and short is not None:
                log.error("corral: not ready: %s%s", short, detail)
            elif short != self.short and self.short != "starting":
                log.info("corral: ready again")
            self.short = short
            return short

    def _check(self) -> tuple[str | None, str]:
        try:
            if self._sandbox is None:
                self._sandbox = self.pool.sandbox(
                    self._dir.name, history=HistoryOptions(enabled=False), workers=1)
            result = self._sandbox.call("stat_file", {"path": "."})
        except SandboxError as exc:
            return "the pool does not start a worker", f": {exc}"
        if not result["ok"]:
            code = result["error"]["code"]
            return f"halted: a worker of the pool fails its call ({code})", ""
        layers = self._sandbox.confinement  # broker.summarise's report
        missing = [name for name in self.require
                   if not (layers["landlock_abi"] if name == "landlock" else layers[name])]
        if missing:
            return f"the confinement lacks required layer(s): {', '.join(missing)}", ""
        return None, ""

    async def watch(self) -> None:
        """Check now, then every READY_CHECK_S, off the event loop."""
        while True:
            await asyncio.to_thread(self.check)
            await asyncio.sleep(READY_CHECK_S)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
        self._dir.cleanup()


class Health:
    """The ASGI application uvicorn serves: the probes, the drain's refusal, and
    everything else handed to `app` (the MCP face), counted while in flight."""

    def __init__(self, app: App, readiness: Readiness) -> None:
        self.app = app
        self.readiness = readiness
        self.draining = False  # not ready: endpoints are being taken away
        self.refusing = False  # and new requests are refused
        self.in_flight = 0  # requests handed to `app` and not yet done; on the loop only
        self._idle: asyncio.Event | None = None  # set when in_flight drops to 0

    def not_ready(self) -> str | None:
        return "draining" if self.draining else self.readiness.short

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in (HEALTH_PATH, READY_PATH):
            await self._probe(scope, path, send)
            return
        if self.refusing:
            await _answer(send, 503, b"the server is shutting down; try again\n",
                          {"retry-after": str(DRAIN_RETRY_AFTER_S), "connection": "close"},
                          scope["method"])
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0 and self._idle is not None:
                self._idle.set()

    async def _probe(self, scope: Scope, path: str, send: Send) -> None:
        method = scope["method"]
        if method not in ("GET", "HEAD"):
            await _answer(send, 405, b"use GET\n", {"allow": "GET, HEAD"}, method)
            return
        if path == HEALTH_PATH:
            await _answer(send, 200, b"ok\n", {}, method)
            return
        short = self.not_ready()
        if short is None:
            await _answer(send, 200, b"ready\n", {}, method)
        else:
            await _answer(send, 503, f"not ready: {short}\n".encode(), {}, method)

    async def idle(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for no request to be in flight; True if none is."""
        if self.in_flight == 0:
            return True
        self._idle = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self.in_flight:
                    self._idle.clear()
                    await self._idle.wait()
        return self.in_flight == 0


async def _answer(send: Send, status: int, body: bytes, headers: dict[str, str],
                  method: str) -> None:
    raw = [(b"content-type", b"text/plain; charset=utf-8"),
           (b"cache-control", b"no-store"),
           (b"content-length", str(len(body)).encode()),
           *((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
