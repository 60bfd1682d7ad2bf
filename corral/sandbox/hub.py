"""A shared pool: one zygote, many sandboxes ("lanes"), workers on demand.

Each lane is a sandbox's supply of workers (call_path.Supply): blank forks of the one
zygote, each sent that sandbox's setup and own root fds by the host on its own
socket, so a worker is confined to its sandbox's roots, never serves another,
and holds nothing of another in its memory. Workers are
forked when a call needs one and exit after `idle_timeout_s` idle; at most
`max_workers` exist at once. A call that finds no worker of its lane idle
queues; queued calls are granted round-robin across lanes (one grant per lane
per turn), so a lane that floods cannot starve a quiet one. When the pool is
full, a waiting lane may take (kill) another lane's idle worker only if that
lane holds more workers than it does, and only a worker that has lived for
MIN_LIFE_S: capacity moves towards an even split, never ping-pongs between two
lanes of equal share, and when more lanes are busy than there are workers they
take turns in slices of MIN_LIFE_S rather than paying a fork for every call.

The Hub owns the one worker table (a Share per lane: its workers, idle ones,
queue and state) under its one lock; a Lane holds only what its sandbox was
made with and asks the hub for everything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from corral.calls.control import SandboxSetup
from corral.calls.waiting import Cancel
from corral.errors import SandboxError
from corral.fs.syscalls import DIR_FLAGS
from corral.observe import Observer
from corral.sandbox.handles import Worker, ZygoteHandle, describe_exit
from corral.sandbox.protocol import MAX_ROOTS
from corral.sandbox.supplies import (
    BootKilled,
    check_boot,
    fork_worker,
    halt_if_unconfined,
    log,
    log_halt,
    note_death,
    sweep_taken,
)

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


@dataclass(eq=False)
class Share:
    """A lane's row in the hub's worker table."""

    workers: set[Worker] = field(default_factory=set)
    idle: dict[Worker, float] = field(default_factory=dict)  # idle since, oldest first
    spawning: int = 0  # forks reserved and not yet in `workers`
    busy: int = 0  # calls holding a worker of the lane or leave to fork one
    queue: deque[Ticket] = field(default_factory=deque)
    in_ring: bool = False  # in the hub's turn order
    halted: str | None = None
    closed: bool = False

    @property
    def held(self) -> int:
        return len(self.workers) + self.spawning


class Lane:
    """One sandbox's supply in a shared pool (call_path.Supply): workers of its own roots,
    forked on demand in the slots the hub grants."""

    def __init__(self, hub: Hub, setup: SandboxSetup, observer: Observer | None = None) -> None:
        self.hub = hub
        self.observer = observer
        self.zygote = hub.zygote
        self.setup = setup
        self.options = setup.options
        self.limits = setup.limits
        self.cap = setup.options.workers
        self.confinement: dict[str, Any] = {}
        self.roots = [[spec.path, spec.mode] for spec in setup.roots]  # as a worker reports them
        # Opened once, held until close: every worker gets the very directories the
        # sandbox was made with, whatever is renamed or replaced at those paths later.
        self.root_fds: list[int] = []
        # forks sending root_fds now: close waits for them (an fd closed under a fork
        # could be reused by another sandbox's root, and sent to this one's worker)
        self._forks = threading.Condition()
        self._forking = 0
        try:
            for spec in setup.roots:
                self.root_fds.append(os.open(spec.path, DIR_FLAGS))
        except OSError as exc:
            self.close_fds()
            raise SandboxError(f"The sandbox cannot open its root {exc.filename}: "
                               f"{exc.strerror}.") from None

    def start(self) -> None:
        """The pool's first sandbox forks a worker at once, to learn what the kernel gives."""
        if not self.hub.confinement:
            self.give_back(self.take())
        self.confinement = dict(self.hub.confinement)

    def take(self, cancel: Cancel | None = None) -> Worker:
        """An idle worker of this lane or a fresh fork, as the hub grants; `cancel`
        (the caller's) may kill it from now on."""
        while True:
            ticket = self.hub.acquire(self, cancel)
            worker = ticket.worker
            if worker is None:
                try:
                    worker = self._fork_granted(ticket.victim)
                except BootKilled as exc:  # the OOM killer or an operator: this call fails
                    raise SandboxError(f"A new worker was killed while starting ({exc}).") from None
            elif not worker.looks_alive():  # ended while idle: queue again for another
                self.died(self.lost(worker))
                continue
            if cancel is not None:
                cancel.attach(worker)
            return worker

    def give_back(self, worker: Worker) -> None:
        """Idle again (the hub may hand it on at once)."""
        self.hub.release(self, worker)

    def lost(self, worker: Worker) -> int | None:
        """Kill and reap it; its successor is forked when a call needs one."""
        code = self._murder(worker)
        halt_if_unconfined(code, self.halt)
        self.hub.done(self)
        return code

    def died(self, code: int | None) -> None:
        if not self.closing():
            note_death(self.observer, code)

    def closing(self) -> bool:
        return self.hub.closing(self)

    def stats(self) -> dict[str, int]:
        return self.hub.lane_stats(self)

    def sweep_temps(self) -> int:
        """sweep_on, on a worker of this lane taken as a call takes one (within
        max_workers, in its turn), then left idle for the first call."""
        try:
            worker = self.take()
        except SandboxError:
            return 0
        return sweep_taken(self, worker, self.options.max_frame_bytes, self.limits.timeout_s)

    def halt(self, reason: str) -> None:
        """Fail closed: kill its idle workers and refuse every later call."""
        self.hub.halt(self, reason)

    def close(self) -> None:
        """Kill this lane's workers (a call in flight ends with worker_crashed) and
        reap them; the zygote and the other lanes go on."""
        for pid in self.hub.close_lane(self):
            self.zygote.wait(pid)
        self.close_fds()

    def pids(self) -> list[int]:
        return self.hub.pids(self)

    def sole(self) -> bool:
        return self.hub.sole(self)

    def wake(self) -> None:
        """Nothing: which worker a shared pool's next call gets is the hub's choice
        when the call comes (a lane's workers may be lent to another sandbox by then)."""

    def close_fds(self) -> None:
        with self._forks:
            self._forks.wait_for(lambda: self._forking == 0)
            while self.root_fds:
                os.close(self.root_fds.pop())

    @contextlib.contextmanager
    def _lending_fds(self) -> Iterator[list[int]]:
        """root_fds, kept open until the fork that sends them is done; SandboxError
        once closed (a sandbox has at least one root, so none left means closed)."""
        with self._forks:
            if not self.root_fds:
                raise SandboxError("The sandbox is closed.")
            self._forking += 1
        try:
            yield self.root_fds
        finally:
            with self._forks:
                self._forking -= 1
                self._forks.notify_all()

    def _fork_granted(self, victim: int | None) -> Worker:
        """Fork and boot a worker in the slot the hub reserved, after the worker it
        evicted for the slot is reaped (so the process count never passes the bound)."""
        try:
            try:
                if victim is not None:
                    self.hub.reap_evicted(victim)
                with self._lending_fds() as root_fds:
                    worker = fork_worker(self.zygote, self.options, self.setup, root_fds,
                                         jitter=False)
            except BaseException:
                self.hub.unreserve(self)
                raise
            self.hub.add(self, worker)
            self._boot(worker)
        except BaseException:
            self.hub.done(self)
            raise
        return worker

    def _boot(self, worker: Worker) -> None:
        """check_boot against the pool's confinement, then its roots: a worker that came
        up any other way halts the lane (SandboxError)."""
        if check_boot(worker, self.options.max_frame_bytes, self.hub.confinement,
                      self._murder, self.halt, self.died):
            if worker.roots == self.roots:
                self.hub.learn(worker)
                return
            # defence in depth: never serve another's roots
            code = self._murder(worker)
            self.halt(f"a worker came up with roots {worker.roots}, not {self.roots} "
                      f"({describe_exit(code, 'gone')})")
        raise SandboxError(f"The sandbox halted: {self.hub.halted(self)}.")

    def _murder(self, worker: Worker) -> int | None:
        """SIGKILL a worker and reap it; its exit code."""
        self.hub.retire(worker, self)
        return self.zygote.wait(worker.pid)


class Hub:
    """The shared pool's state: the zygote, the worker table, the fair queue, the reaper."""

    def __init__(self, max_workers: int, idle_timeout_s: float) -> None:
        if max_workers < 1:
            raise ValueError(f"a pool needs at least 1 worker, not {max_workers}")
        if not idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be positive, not {idle_timeout_s}")
        self.max_workers = max_workers
        self.idle_timeout_s = idle_timeout_s
        self._rlock = threading.RLock()  # reentrant: a ticket's wait and a lane's halt nest
        self.lock = threading.Condition(self._rlock)
        self.shares: dict[Lane, Share] = {}
        self.waiting: deque[Lane] = deque()  # lanes with queued calls, in turn order
        self.processes = 0  # live workers and forks reserved, of every lane
        self.queued = 0
        self.confinement: dict[str, Any] = {}
        self.closed = False
        self._orphans: list[int] = []  # evicted workers whose grant went unused: reap later
        self.zygote = ZygoteHandle(None)
        self._reaper = threading.Thread(target=self._reap_idle, name="corral-reaper", daemon=True)
        self._reaper.start()
        self.sweeps = ThreadPoolExecutor(SWEEP_THREADS, thread_name_prefix="corral-sweep")

    def open_lane(self, setup: SandboxSetup, observer: Observer | None = None) -> Lane:
        if len(setup.roots) > MAX_ROOTS:
            raise SandboxError(
                f"A sandbox in a pool may have at most {MAX_ROOTS} roots, not {len(setup.roots)}."
            )
        lane = Lane(self, setup, observer)
        with self.lock:
            if self.closed:
                lane.close_fds()
                raise SandboxError("The pool is closed.")
            self.shares[lane] = Share()
        return lane

    # -- the fair queue --------------------------------------------------------

    def acquire(self, lane: Lane, cancel: Cancel | None) -> Ticket:
        """Queue a call of `lane` and wait for its grant (SandboxError if the lane
        closes or halts first, CallCancelled if its caller gives up)."""
        with self.lock:
            share = self._row(lane)
            self._check(share)
            ticket = Ticket(self._rlock)
            share.queue.append(ticket)
            self.queued += 1
            if not share.in_ring:
                share.in_ring = True
                self.waiting.append(lane)
            if cancel is not None:
                cancel.lock, cancel.ticket = self._rlock, ticket
            try:
                self._dispatch()
                while not ticket.granted:
                    if cancel is not None and cancel.cancelled:
                        raise CallCancelled("The call was cancelled before it ran.")
                    self._check(share)
                    # a worker may turn old enough to be taken with nothing else happening
                    if not ticket.ready.wait(MIN_LIFE_S):
                        self._dispatch()
            except BaseException:
                if ticket.granted:  # granted as it failed: give the grant back
                    self._give_back(share, ticket)
                    self._ended(lane, share)
                else:
                    share.queue.remove(ticket)
                    self.queued -= 1
                raise
            finally:
                if cancel is not None:
                    cancel.ticket = None
            return ticket

    def release(self, lane: Lane, worker: Worker) -> None:
        """A call is done with its worker: idle it and serve the queue."""
        with self.lock:
            share = self._row(lane)
            share.busy -= 1
            if share.closed or share.halted:
                self._retire(worker, share)
            else:
                share.idle[worker] = time.monotonic()
            self._ended(lane, share)
            self._dispatch()

    def done(self, lane: Lane) -> None:
        """A call is done without a worker to give back (it died or was recycled)."""
        with self.lock:
            share = self._row(lane)
            share.busy -= 1
            self._ended(lane, share)
            self._dispatch()

    def _dispatch(self) -> None:
        """Grant queued calls, one per lane per turn, while capacity allows."""
        stalled = 0
        while self.waiting and stalled < len(self.waiting):
            lane = self.waiting.popleft()
            share = self.shares.get(lane)
            if share is None or not share.queue:
                if share is not None:
                    share.in_ring = False
                continue
            if share.busy < lane.cap and self._grant(share):
                stalled = 0
            else:
                stalled += 1
            if share.queue:
                self.waiting.append(lane)
            else:
                share.in_ring = False

    def _grant(self, share: Share) -> bool:
        """Give the lane's first queued call a worker: its own idle one, a new
        slot, or the slot of an idle worker of a lane holding more than it."""
        ticket = share.queue[0]
        if share.idle:
            ticket.worker, _ = share.idle.popitem()  # the one idle least long
        elif self.processes < self.max_workers:
            self.processes += 1
            share.spawning += 1
        else:
            victim = self._victim(share.held)
            if victim is None:
                return False
            worker, owner = victim
            del owner.idle[worker]
            self._retire(worker, owner)  # kills it; the new fork waits until it is reaped
            ticket.victim = worker.pid
            self.processes += 1
            share.spawning += 1
        share.queue.popleft()
        self.queued -= 1
        share.busy += 1
        ticket.granted = True
        ticket.ready.notify()
        return True

    def _victim(self, held: int) -> tuple[Worker, Share] | None:
        """The idle worker of the lane holding the most (more than `held`), oldest
        idle first, among those older than MIN_LIFE_S."""
        best: tuple[Worker, Share] | None = None
        most, since_best = held, 0.0
        born_before = time.monotonic() - MIN_LIFE_S
        for share in self.shares.values():
            if share.held < most or (share.held == most and best is None):
                continue
            for worker, since in share.idle.items():
                if worker.born > born_before:
                    continue
                if share.held > most or since < since_best:
                    best, most, since_best = (worker, share), share.held, since
                break
        return best

    def _give_back(self, share: Share, ticket: Ticket) -> None:
        """Undo a grant its caller cannot use (it was cancelled or its lane closed)."""
        share.busy -= 1
        if ticket.worker is not None:
            if share.closed or share.halted:
                self._retire(ticket.worker, share)  # as release() does
            else:
                share.idle[ticket.worker] = time.monotonic()
        else:
            share.spawning -= 1
            self.processes -= 1
            if ticket.victim is not None:
                self._orphans.append(ticket.victim)
        self._dispatch()

    # -- the worker table --------------------------------------------------------

    def add(self, lane: Lane, worker: Worker) -> None:
        """A worker forked in a slot reserved for `lane`."""
        with self.lock:
            share = self._row(lane)
            share.spawning -= 1
            share.workers.add(worker)

    def unreserve(self, lane: Lane) -> None:
        """A reserved slot whose fork failed."""
        with self.lock:
            self._row(lane).spawning -= 1
            self.processes -= 1

    def retire(self, worker: Worker, lane: Lane) -> None:
        """Kill and forget a worker of `lane` (the caller reaps it)."""
        with self.lock:
            self._retire(worker, self._row(lane))

    def _retire(self, worker: Worker, share: Share) -> None:
        """Kill and forget a worker; caller holds the lock (pidfds are used under it only)."""
        if worker in share.workers:
            share.workers.discard(worker)
            share.idle.pop(worker, None)
            self.processes -= 1
            worker.kill()
            worker.close()

    def reap_evicted(self, pid: int) -> None:
        """Reap a worker killed to make room for another lane's, and say so."""
        code = self.zygote.wait(pid)
        log.info("corral: worker %d evicted for another sandbox: %s", pid,
                 describe_exit(code, "gone"))

    def learn(self, worker: Worker) -> None:
        """The first confined worker tells the pool what the kernel gives."""
        with self.lock:
            self.confinement = self.confinement or dict(worker.layers or {})

    def halt(self, lane: Lane, reason: str) -> None:
        """Fail `lane` closed: kill its idle workers and refuse its later calls."""
        with self.lock:
            share = self._row(lane)
            if share.halted is None and not share.closed:
                share.halted = reason
                log_halt(reason)
            for worker in list(share.idle):
                self._retire(worker, share)
            for ticket in share.queue:
                ticket.ready.notify()

    def closing(self, lane: Lane) -> bool:
        """The lane was closed (its workers killed by close_lane), or the pool."""
        with self.lock:
            return self.closed or self._row(lane).closed

    def halted(self, lane: Lane) -> str | None:
        with self.lock:
            return self._row(lane).halted

    def close_lane(self, lane: Lane) -> list[int]:
        """Kill `lane`'s workers (busy ones: their callers retire them); its row goes
        when its last call ends. Returns the pids to reap."""
        with self.lock:
            share = self._row(lane)
            if share.closed:
                return []
            share.closed = True
            pids = [worker.pid for worker in share.workers]
            for worker in list(share.idle):
                self._retire(worker, share)
            for worker in share.workers:
                worker.kill()
            for ticket in share.queue:
                ticket.ready.notify()
            self._ended(lane, share)
            self._dispatch()
        return pids

    def _row(self, lane: Lane) -> Share:
        """`lane`'s row; a closed, empty one if it has gone."""
        return self.shares.get(lane) or Share(closed=True)

    def _ended(self, lane: Lane, share: Share) -> None:
        """Drop a closed lane's row once no call holds anything of it; caller holds the lock."""
        if share.closed and share.busy == 0:
            self.shares.pop(lane, None)

    def pids(self, lane: Lane) -> list[int]:
        with self.lock:
            return sorted(worker.pid for worker in self._row(lane).workers)

    def sole(self, lane: Lane) -> bool:
        """No other call of `lane` holds a worker (an unlocked read)."""
        share = self._row(lane)
        return len(share.idle) + 1 >= len(share.workers)

    @staticmethod
    def _check(share: Share) -> None:
        if share.closed:
            raise SandboxError("The sandbox is closed.")
        if share.halted:
            raise SandboxError(f"The sandbox halted: {share.halted}.")

    # -- idle workers ----------------------------------------------------------

    def _reap_idle(self) -> None:
        """Kill workers idle for idle_timeout_s (oldest first) and reap them."""
        while True:
            with self.lock:
                expired = self._expired()
                while not expired and not self.closed:
                    oldest = min((next(iter(share.idle.values()))
                                  for share in self.shares.values() if share.idle), default=None)
                    wait = self.idle_timeout_s if oldest is None else (
                        oldest + self.idle_timeout_s - time.monotonic())
                    self.lock.wait(max(wait, 0.001))
                    expired = self._expired()
                if self.closed:
                    return
                for worker, share, _ in expired:
                    self._retire(worker, share)
                orphans, self._orphans = self._orphans, []
                self._dispatch()
            for worker, _, lane in expired:
                code = self.zygote.wait(worker.pid)
                log.info("corral: worker %d reaped after %gs idle: %s", worker.pid,
                         self.idle_timeout_s, describe_exit(code, "gone"))
                if code is not None and code != -signal.SIGKILL:  # it died before our kill
                    note_death(lane.observer, code)
            for pid in orphans:
                self.reap_evicted(pid)

    def _expired(self) -> list[tuple[Worker, Share, Lane]]:
        limit = time.monotonic() - self.idle_timeout_s
        expired = []
        for lane, share in self.shares.items():
            for worker, since in share.idle.items():
                if since > limit:
                    break
                expired.append((worker, share, lane))
        return expired

    # -- the whole pool ----------------------------------------------------------

    def stats(self) -> dict[str, int]:
        with self.lock:
            open_ = [share for share in self.shares.values() if not share.closed]
            return {
                "sandboxes": len(open_),
                "workers": sum(len(share.workers) for share in open_),
                "idle_workers": sum(len(share.idle) for share in open_),
                "busy_workers": sum(share.busy for share in open_),
                "queued_calls": self.queued,
            }

    def lane_stats(self, lane: Lane) -> dict[str, int]:
        """stats() of one lane (no "sandboxes")."""
        with self.lock:
            share = self._row(lane)
            return {"workers": len(share.workers), "idle_workers": len(share.idle),
                    "busy_workers": share.busy, "queued_calls": len(share.queue)}

    def close(self) -> None:
        """Close every lane still open, stop the reaper and the zygote."""
        with self.lock:
            if self.closed:
                return
            lanes = [lane for lane, share in self.shares.items() if not share.closed]
        for lane in lanes:
            lane.close()
        with self.lock:
            self.closed = True
            self.lock.notify_all()
        self._reaper.join()
        self.sweeps.shutdown(wait=True)
        self.zygote.stop()
