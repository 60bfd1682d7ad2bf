"""How `corral serve --http` ends and changes its tenants without a restart.

SIGTERM drains, in the order a load balancer or Kubernetes needs:
1. /readyz answers 503 at once (the endpoint is taken out of rotation);
2. every request is still served for `delay_s` (--drain-delay), the time the
   endpoint's removal takes to reach every client;
3. then new requests are refused with 503 and Retry-After, and the requests in
   flight have up to `timeout_s` (--drain-timeout; default: the longest
   `timeout_s` of any tenant's config, plus ANSWER_S to send the answer) to end;
4. the calls still running then are ended (their workers killed, each answered
   worker_crashed), and the server exits with status 0.
A call answered before the exit was done: its write is on disk (fs/: atomic
writes), so nothing a client was told succeeded is lost.

SIGHUP re-reads the tenants file (faces/roster.py): tenants added are served at
once; a tenant whose entry is unchanged keeps its sessions; a removed (or
changed) tenant's token is refused from the next request on, and its sessions
are closed once its requests in flight are done. A file that does not load is
one error in the log, and the tenants served stay as they were.

The signal handlers are the event loop's (loop.add_signal_handler): they run as
callbacks on the loop, never inside a signal, and only start a task.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from corral.config import ConfigError
from corral.faces.health import Health
from corral.faces.logs import log
from corral.faces.roster import Roster
from corral.faces.tenants import Tenant
from corral.observe import Observer

ANSWER_S = 5.0  # past a call's own timeout, for its answer to reach the client
STOPPED_S = 5.0  # for the answers of calls ended at the drain's deadline to go out
RETIRE_POLL_S = 0.05  # how often a removed tenant's requests in flight are counted


class Retired(Protocol):
    """A tenant no longer served (http_server.TenantState), closed once idle."""

    @property
    def in_progress(self) -> int:
        """Its requests admitted and not yet done."""

    def close(self) -> None:
        """Close its sessions and their sandboxes."""


class Served(Protocol):
    """What the Conductor drives of the HTTP face (http_server.HttpFace): the
    tenants it serves, and the calls it can end. Written here, so this module
    never imports the face that imports it."""

    @property
    def states(self) -> Mapping[str, object]:
        """The tenants served now, by name."""

    def set_tenants(self, tenants: list[Tenant], protected: tuple[str, ...],
                    observers: Mapping[str, Observer]) -> Sequence[Retired]:
        """Serve `tenants` from the next request on; the states no longer served."""

    def stop_calls(self) -> None:
        """End every call in flight now."""


class Conductor:
    """The server's signals, on its event loop: SIGTERM drains, SIGHUP reloads."""

    def __init__(
        self, server: Any, face: Served, health: Health, roster: Roster, *,
        delay_s: float, timeout_s: float | None, load: Callable[[], Roster] | None,
        observers: Callable[[Roster], Mapping[str, Observer]],
    ) -> None:
        """server: the uvicorn.Server; load: reads the tenants file again (None:
        no reload); observers: the metrics' observer of each tenant of a roster."""
        self.server = server
        self.face = face
        self.health = health
        self.roster = roster
        self.delay_s = delay_s
        self.timeout_s = timeout_s
        self.load = load
        self.observers = observers
        self.draining = False
        self._reloading = False
        self._again = False  # a SIGHUP came during a reload: read the file once more
        self._tasks: set[asyncio.Task[Any]] = set()  # held: the loop keeps weak references

    def install(self) -> None:
        """On the event loop, once it serves: the handlers, and the readiness check."""
        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():  # signals reach it only
            loop.add_signal_handler(signal.SIGTERM, self._terminate)
            if self.load is not None:
                loop.add_signal_handler(signal.SIGHUP, self._hang_up)
        self._spawn(self.health.readiness.watch())

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- SIGTERM ---------------------------------------------------------------------

    def _terminate(self) -> None:
        if self.draining:
            log.info("corral: SIGTERM again: already draining")
            return
        self.draining = True
        self._spawn(self.drain())

    def deadline_s(self) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return self.roster.longest_timeout_s + ANSWER_S

    async def drain(self) -> None:
        timeout_s = self.deadline_s()
        self.health.draining = True
        log.info("corral: draining: not ready from now on; serving for %g s, then refusing new "
                 "requests while those in flight have up to %g s", self.delay_s, timeout_s)
        await asyncio.sleep(self.delay_s)
        self.health.refusing = True
        if not await self.health.idle(timeout_s):
            log.warning("corral: %d request(s) still in flight after %g s: their calls are ended",
                        self.health.in_flight, timeout_s)
            await asyncio.to_thread(self.face.stop_calls)
            await self.health.idle(STOPPED_S)
        log.info("corral: drained; exiting")
        self.server.should_exit = True

    # -- SIGHUP ----------------------------------------------------------------------

    def _hang_up(self) -> None:
        if self._reloading:
            self._again = True
            return
        self._reloading = True
        self._spawn(self.reload())

    async def reload(self) -> None:
        assert self.load is not None
        try:
            again = True
            while again:
                self._again = False
                try:
                    roster = await asyncio.to_thread(self.load)
                except (ConfigError, OSError) as exc:
                    log.error("corral: error: the tenants file was not reloaded, the tenants "
                              "served stay as they were: %s", exc)
                else:
                    self.apply(roster)
                again = self._again
        finally:
            self._reloading = False

    def apply(self, roster: Roster) -> None:
        """Serve `roster` from now on (on the event loop, between two requests)."""
        before = set(self.face.states)
        removed = self.face.set_tenants(roster.tenants, roster.protected, self.observers(roster))
        self.roster = roster
        self.health.readiness.set_require(roster.require)
        self._spawn(asyncio.to_thread(self.health.readiness.check))
        for state in removed:
            self._spawn(self._retire(state))
        now = set(self.face.states)
        gone = len(before - now)
        log.info("corral: tenants reloaded: %d served (%d new, %d changed, %d no longer served)",
                 len(now), len(now - before), len(removed) - gone, gone)

    async def _retire(self, state: Retired) -> None:
        """Close a tenant no longer served once its requests in flight are done."""
        while state.in_progress:
            await asyncio.sleep(RETIRE_POLL_S)
        await asyncio.to_thread(state.close)
