"""A shared pool: one zygote, many sandboxes ("lanes"), workers on demand.

Each lane is a sandbox's pool (the verbs of pool.Pool) whose workers the one
zygote forks from that sandbox's own root fds, sent with each spawn request, so
a worker is confined to its sandbox's roots and never serves another. Workers
are forked when a call needs one and exit after `idle_timeout_s` idle; at most
`max_workers` exist at once. A call that finds no worker of its lane idle
queues; queued calls are granted round-robin across lanes (one grant per lane
per turn), so a lane that floods cannot starve a quiet one. When the pool is
full, a waiting lane may take (kill) another lane's idle worker only if that
lane holds more workers than it does, and only a worker that has lived for
MIN_LIFE_S: capacity moves towards an even split, never ping-pongs between two
lanes of equal share, and when more lanes are busy than there are workers they
take turns in slices of MIN_LIFE_S rather than paying a fork for every call.

One lock (the hub's) guards every lane's state and the hub's counters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from corral.config import Limits, SandboxOptions
from corral.fs._resolve import DIR_FLAGS
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker, Submittable, check_known, check_required, summarise
from corral.sandbox.messages import Answer
from corral.sandbox.pool import (
    RSS_CHECK_EVERY,
    SWEEP_FAILURES,
    BootKilled,
    Pool,
    SandboxError,
    Worker,
    ZygoteHandle,
)
from corral.sandbox.protocol import MAX_ROOTS
from corral.sandbox.waiting import PLAIN, Cancel, WaitPolicy

# A worker is not taken from its lane for another before it has lived this long: a fork
# costs a few ms, so a slice of this many ms keeps that cost a small share of the time.
MIN_LIFE_S = 0.05
# New sandboxes' start-up sweeps (temp files of writers a killed host left) run on this
# many threads of the pool: each takes a worker as a call does.
SWEEP_THREADS = 2


class CallCancelled(SandboxError):
    """The caller gave up on a call before a worker took it."""


class Ticket:
    """A queued call: granted an idle worker of its lane, or leave to fork one."""

    __slots__ = ("granted", "ready", "victim", "worker")

    def __init__(self, lock: threading.RLock) -> None:
        self.ready = threading.Condition(lock)  # the hub's lock: one waiter per ticket
        self.granted = False
        self.worker: Worker | None = None
        self.victim: int | None = None  # pid of a worker killed to make room: reap it first


class Lane(Pool):
    """One sandbox's workers in a shared pool (pool.Pool's call path, on demand)."""

    def __init__(
        self, hub: Hub, roots: Sequence[RootSpec], limits: Limits, policy: Policy,
        options: SandboxOptions, history: str | None = None,
    ) -> None:
        super().__init__(hub.zygote, options, limits)
        self._cond = hub.lock  # every lane's state is the hub's, under its one lock
        self.hub = hub
        self.cap = options.workers
        self.queue: deque[Ticket] = deque()
        self.in_ring = False
        self.busy = 0  # calls holding a worker of this lane or leave to fork one
        self.roots = [[spec.path, spec.mode] for spec in roots]
        self.setup = {
            "roots": self.roots, "limits": dataclasses.asdict(limits),
            # JSON text: the zygote decodes and compiles it once, not at every fork
            "policy_json": json.dumps(policy.to_dict()), "options": dataclasses.asdict(options),
            "history": history,  # the workspace's history store, opened by the zygote
        }
        # Opened once, held until close: every worker gets the very directories the
        # sandbox was made with, whatever is renamed or replaced at those paths later.
        self.root_fds: list[int] = []
        try:
            for spec in roots:
                self.root_fds.append(os.open(spec.path, DIR_FLAGS))
        except OSError as exc:
            self._close_fds()
            raise SandboxError(f"The sandbox cannot open its root {exc.filename}: "
                               f"{exc.strerror}.") from None

    @property
    def held(self) -> int:
        return len(self._workers) + self._spawning

    def checkout(self, cancel: Cancel | None = None) -> Worker:
        """A worker of this lane: an idle one, or a fresh fork, as the hub grants;
        `cancel` (the caller's) may kill it from now on."""
        while True:
            ticket = self.hub.acquire(self, cancel)
            worker = ticket.worker
            if worker is None:
                try:
                    worker = self._fork_granted(ticket.victim)
                except BootKilled as exc:  # the OOM killer or an operator: this call fails
                    raise SandboxError(f"A new worker was killed while starting ({exc}).") from None
            elif not worker.looks_alive():  # ended while idle: queue again for another
                self.murder_worker(worker)
                self.hub.done(self)
                continue
            if cancel is not None:
                with self._cond:
                    cancel.worker = worker
                    if cancel.cancelled:
                        worker.kill()  # cancelled while it forked: the call ends at once
            return worker

    def checkin(self, worker: Worker) -> None:
        """Back to idle (the hub may hand it on at once), or recycled."""
        worker.calls += 1
        if worker.calls >= worker.max_calls or self._rss_over(worker):
            self.murder_worker(worker)
            self.hub.done(self)
            return
        self.hub.release(self, worker)

    def replace(self, worker: Worker) -> int | None:
        """Kill a worker that failed its call; its successor is forked on demand."""
        code = self.murder_worker(worker)
        self.hub.done(self)
        return code

    def manage_workers(self) -> None:
        """Nothing to keep at size: workers are forked when a call needs one."""

    def sweep_temps(self) -> int:
        """pool.Pool.sweep_temps on a worker of this lane, taken as a call takes one
        (within max_workers, in its turn), then left idle for the first call."""
        try:
            worker = self.checkout()
        except SandboxError:
            return 0
        try:
            removed = self._sweep_on(worker)
        except SWEEP_FAILURES:
            self.replace(worker)
            return 0
        self.checkin(worker)
        return removed

    def halt(self, reason: str) -> None:
        super().halt(reason)
        with self._cond:
            for ticket in self.queue:
                ticket.ready.notify()

    def close(self) -> None:
        """Kill this lane's workers (a call in flight ends with worker_crashed) and
        reap them; the zygote and the other lanes go on."""
        with self._cond:
            self._closed = True
            pids = [worker.pid for worker in self._workers]
            while self._idle:
                self._retire(self._idle.pop())
            for worker in self._workers:
                worker.kill()  # busy: its caller retires it
            for ticket in self.queue:
                ticket.ready.notify()
            self.hub.forget(self)
        for pid in pids:
            self.zygote.wait(pid)
        self._close_fds()

    def _fork_granted(self, victim: int | None) -> Worker:
        """Fork and boot a worker in the slot the hub reserved (after the worker it
        evicted for the slot is reaped, so the process count never passes the bound)."""
        try:
            try:
                worker = self._fork(victim)
            except BaseException:
                with self._cond:
                    self.hub.processes -= 1  # the slot reserved for it
                raise
            finally:
                with self._cond:
                    self._spawning -= 1
            self.confinement = self.confinement or self.hub.confinement
            self._boot(worker)  # halts the lane (and raises) if it came up wrong
        except BaseException:
            self.hub.done(self)
            raise
        with self._cond:
            self.hub.confinement = self.hub.confinement or dict(self.confinement)
        return worker

    def _fork(self, after: int | None = None) -> Worker:
        """pool.Pool._fork, with this sandbox's setup and root fds."""
        pid, sock, pidfd = self.zygote.spawn(self.setup, self.root_fds, after)
        limit = self.options.max_calls_per_worker
        worker = Worker(pid, sock, pidfd, limit, born=time.monotonic())
        with self._cond:
            self._workers.add(worker)
        return worker

    def _boot(self, worker: Worker) -> None:
        super()._boot(worker)
        if worker.roots != self.roots:  # defence in depth: never serve another's roots
            self.murder_worker(worker)
            self.halt(f"a worker came up with roots {worker.roots}, not {self.roots}")
            raise SandboxError(f"The sandbox halted: {self._halted}.")

    def _retire(self, worker: Worker) -> None:
        """pool.Pool._retire, and the hub's process count and idle list follow."""
        if worker in self._workers:
            self.hub.processes -= 1
            self.hub.idle.pop(worker, None)
        super()._retire(worker)

    def _detach(self, cancel: Cancel | None) -> None:
        if cancel is not None:
            with self._cond:
                cancel.worker = None

    def _rss_over(self, worker: Worker) -> bool:
        return (
            worker.calls % RSS_CHECK_EVERY == 0
            and worker.rss_mb() > self.options.max_worker_rss_mb
        )

    def _close_fds(self) -> None:
        while self.root_fds:
            os.close(self.root_fds.pop())


class Hub:
    """The shared pool's state: the zygote, its lanes, the fair queue, the reaper."""

    def __init__(self, max_workers: int, idle_timeout_s: float) -> None:
        if max_workers < 1:
            raise ValueError(f"a pool needs at least 1 worker, not {max_workers}")
        if not idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be positive, not {idle_timeout_s}")
        self.max_workers = max_workers
        self.idle_timeout_s = idle_timeout_s
        self._rlock = threading.RLock()  # reentrant: pool.Pool's verbs nest under it
        self.lock = threading.Condition(self._rlock)
        self.lanes: set[Lane] = set()
        self.waiting: deque[Lane] = deque()  # lanes with queued calls, in turn order
        self.idle: dict[Worker, tuple[Lane, float]] = {}  # oldest idle first
        self.processes = 0  # live workers and forks reserved, of every lane
        self.queued = 0
        self.confinement: dict[str, Any] = {}
        self.closed = False
        self._orphans: list[int] = []  # evicted workers whose grant went unused: reap later
        self.zygote = ZygoteHandle({
            "roots": None, "host_pid": os.getpid(),
            # as in broker.Broker: the death signal follows the thread that forked
            "pdeathsig": threading.current_thread() is threading.main_thread(),
        })
        self._reaper = threading.Thread(target=self._reap_idle, name="corral-reaper", daemon=True)
        self._reaper.start()
        self.sweeps = ThreadPoolExecutor(SWEEP_THREADS, thread_name_prefix="corral-sweep")

    def open_lane(
        self, roots: Sequence[RootSpec], limits: Limits, policy: Policy, options: SandboxOptions,
        history: str | None = None,
    ) -> Lane:
        if len(roots) > MAX_ROOTS:
            raise SandboxError(
                f"A sandbox in a pool may have at most {MAX_ROOTS} roots, not {len(roots)}."
            )
        lane = Lane(self, roots, limits, policy, options, history)
        with self.lock:
            if self.closed:
                lane._close_fds()
                raise SandboxError("The pool is closed.")
            self.lanes.add(lane)
        return lane

    # -- the fair queue --------------------------------------------------------

    def acquire(self, lane: Lane, cancel: Cancel | None) -> Ticket:
        """Queue a call of `lane` and wait for its grant (SandboxError if the lane
        closes or halts first, CallCancelled if its caller gives up)."""
        with self.lock:
            lane._check_usable()
            ticket = Ticket(self._rlock)
            lane.queue.append(ticket)
            self.queued += 1
            if not lane.in_ring:
                lane.in_ring = True
                self.waiting.append(lane)
            if cancel is not None:
                cancel.lock, cancel.ticket = self._rlock, ticket
            try:
                self._dispatch()
                while not ticket.granted:
                    if cancel is not None and cancel.cancelled:
                        raise CallCancelled("The call was cancelled before it ran.")
                    lane._check_usable()
                    # a worker may turn old enough to be taken with nothing else happening
                    if not ticket.ready.wait(MIN_LIFE_S):
                        self._dispatch()
            except BaseException:
                if ticket.granted:  # granted as it failed: give the grant back
                    self._give_back(lane, ticket)
                else:
                    lane.queue.remove(ticket)
                    self.queued -= 1
                raise
            finally:
                if cancel is not None:
                    cancel.ticket = None
            return ticket

    def release(self, lane: Lane, worker: Worker) -> None:
        """A call is done with its worker: idle it and serve the queue."""
        with self.lock:
            lane.busy -= 1
            if lane._closed or lane._halted:
                lane._retire(worker)
            else:
                lane._idle.append(worker)
                self.idle[worker] = (lane, time.monotonic())
            self._dispatch()

    def done(self, lane: Lane) -> None:
        """A call is done without a worker to give back (it died or was recycled)."""
        with self.lock:
            lane.busy -= 1
            self._dispatch()

    def forget(self, lane: Lane) -> None:
        with self.lock:
            self.lanes.discard(lane)
            self._dispatch()

    def _dispatch(self) -> None:
        """Grant queued calls, one per lane per turn, while capacity allows."""
        stalled = 0
        while self.waiting and stalled < len(self.waiting):
            lane = self.waiting.popleft()
            if not lane.queue:
                lane.in_ring = False
                continue
            if lane.busy < lane.cap and self._grant(lane):
                stalled = 0
            else:
                stalled += 1
            if lane.queue:
                self.waiting.append(lane)
            else:
                lane.in_ring = False

    def _grant(self, lane: Lane) -> bool:
        """Give the lane's first queued call a worker: its own idle one, a new
        slot, or the slot of an idle worker of a lane holding more than it."""
        ticket = lane.queue[0]
        if lane._idle:
            ticket.worker = lane._idle.pop()
            del self.idle[ticket.worker]
        elif self.processes < self.max_workers:
            self.processes += 1
            lane._spawning += 1
        else:
            victim = self._victim(lane.held)
            if victim is None:
                return False
            owner, _ = self.idle[victim]
            owner._idle.remove(victim)
            owner._retire(victim)  # kills it; the new fork waits until it is reaped
            ticket.victim = victim.pid
            self.processes += 1
            lane._spawning += 1
        lane.queue.popleft()
        self.queued -= 1
        lane.busy += 1
        ticket.granted = True
        ticket.ready.notify()
        return True

    def _victim(self, held: int) -> Worker | None:
        """The idle worker of the lane holding the most (more than `held`), oldest
        idle first, among those older than MIN_LIFE_S."""
        best: Worker | None = None
        most = held
        born_before = time.monotonic() - MIN_LIFE_S
        for worker, (owner, _) in self.idle.items():
            if owner.held > most and worker.born <= born_before:
                best, most = worker, owner.held
        return best

    def _give_back(self, lane: Lane, ticket: Ticket) -> None:
        """Undo a grant its caller cannot use (it was cancelled or its lane closed)."""
        if ticket.worker is not None:
            lane.busy -= 1
            lane._idle.append(ticket.worker)
            self.idle[ticket.worker] = (lane, time.monotonic())
        else:
            lane._spawning -= 1
            self.processes -= 1
            lane.busy -= 1
            if ticket.victim is not None:
                self._orphans.append(ticket.victim)
        self._dispatch()

    # -- idle workers ----------------------------------------------------------

    def _reap_idle(self) -> None:
        """Kill workers idle for idle_timeout_s (oldest first) and reap them."""
        while True:
            with self.lock:
                expired = self._expired()
                while not expired and not self.closed:
                    oldest = next(iter(self.idle.values()), None)
                    wait = self.idle_timeout_s if oldest is None else (
                        oldest[1] + self.idle_timeout_s - time.monotonic())
                    self.lock.wait(max(wait, 0.001))
                    expired = self._expired()
                if self.closed:
                    return
                pids = [worker.pid for worker in expired] + self._take_orphans()
                for worker in expired:
                    lane, _ = self.idle[worker]
                    lane._idle.remove(worker)
                    lane._retire(worker)
                self._dispatch()
            for pid in pids:
                self.zygote.discard(pid)

    def _expired(self) -> list[Worker]:
        limit = time.monotonic() - self.idle_timeout_s
        expired = []
        for worker, (_, since) in self.idle.items():
            if since > limit:
                break
            expired.append(worker)
        return expired

    def _take_orphans(self) -> list[int]:
        orphans, self._orphans = self._orphans, []
        return orphans

    # -- the whole pool ----------------------------------------------------------

    def stats(self) -> dict[str, int]:
        with self.lock:
            return {
                "sandboxes": len(self.lanes),
                "workers": sum(len(lane._workers) for lane in self.lanes),
                "busy_workers": sum(lane.busy for lane in self.lanes),
                "queued_calls": self.queued,
            }

    def close(self) -> None:
        """Close every lane still open, stop the reaper and the zygote."""
        with self.lock:
            if self.closed:
                return
            lanes = list(self.lanes)
        for lane in lanes:
            lane.close()
        with self.lock:
            self.closed = True
            self.lock.notify_all()
        self._reaper.join()
        self.sweeps.shutdown(wait=True)
        self.zygote.stop()



class PooledBroker(Broker):
    """broker.Broker's executor interface over a lane of a shared pool: no process
    of its own until a call needs one. A call's caller may cancel it (WaitPolicy.cancel,
    which asubmit sets): the lane honours it (Lane.checkout)."""

    def __init__(
        self, hub: Hub, roots: Sequence[RootSpec], limits: Limits, policy: Policy,
        options: SandboxOptions, history: str | None = None,
    ) -> None:
        check_known(options.require)
        self._zygote = hub.zygote
        self._pool = lane = hub.open_lane(roots, limits, policy, options, history)
        try:
            if not hub.confinement:  # the pool's first sandbox: learn what the kernel gives
                lane.checkin(lane.checkout())
            lane.confinement = dict(hub.confinement)
            self._confinement = summarise(hub.confinement)
            check_required(self._confinement, options.require)
        except BaseException:
            lane.close()
            raise
        self._ids = itertools.count(1)
        self._owner = os.getpid()
        # asubmit's threads: up to the lane's share, as in Broker (made as calls need them)
        self._threads = ThreadPoolExecutor(options.workers, thread_name_prefix="corral-call")
        # Broker's start-up sweep, on the pool's sweep threads rather than one per sandbox
        self._sweep = hub.sweeps.submit(lane.sweep_temps)

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        if not self._sweep.cancel():  # not begun: never needed; begun: let it finish
            self._sweep.result()
        self._pool.close()

    async def asubmit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer:
        """submit() on a thread; cancelling the awaiting task cancels the call (a
        queued call never runs, a running one loses its worker: Lane.checkout)."""
        cancel = Cancel()
        future = asyncio.get_running_loop().run_in_executor(
            self._threads, self.submit, request, WaitPolicy(wait.spin, wait.on_slow, cancel)
        )
        try:
            return await future
        except asyncio.CancelledError:
            cancel.cancel()
            raise
