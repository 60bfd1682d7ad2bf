"""A private sandbox's supply of workers (call_path.Supply): a set forked by its own
zygote, one at start and more as calls overlap (up to its size), kept at the size
it reached, handed to waiting calls in their order of arrival. gunicorn's arbiter
verbs (manage_workers, murder_worker, halt), minus the loop: they run on whichever
thread finds work for them.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from corral.calls.waiting import Cancel
from corral.config import Limits, SandboxOptions
from corral.errors import SandboxError
from corral.observe import Observer
from corral.sandbox.handles import Worker, WorkerLost, WorkerMisbehaved, ZygoteHandle
from corral.sandbox.supplies import (
    MAX_BOOT_KILLS,
    SWEEP_FAILURES,
    BootKilled,
    check_boot,
    fork_worker,
    halt_if_unconfined,
    log_halt,
    note_death,
    sweep_on,
    sweep_taken,
)


class _Waiter:
    """A call waiting for a worker of a WorkerSet: handed one in its turn."""

    __slots__ = ("ready", "worker")

    def __init__(self, lock: threading.RLock) -> None:
        self.ready = threading.Condition(lock)  # the set's lock: one waiter per call
        self.worker: Worker | None = None


class WorkerSet:
    """The supply of a private sandbox: up to N confined workers forked by its own
    zygote, one at start and another each time a call finds every worker busy,
    kept at the number reached; one call per worker at a time, given to waiting
    calls in their order of arrival. Its calls are not cancelled (take ignores
    `cancel`)."""

    def __init__(self, zygote: ZygoteHandle, options: SandboxOptions, limits: Limits,
                 observer: Observer | None = None) -> None:
        self.zygote = zygote
        self.options = options
        self.limits = limits
        self.observer = observer
        self.confinement: dict[str, Any] = {}
        self._lock = threading.RLock()
        # Calls waiting for a worker, oldest first: a freed worker goes to the first,
        # never to whichever thread asks next (a thread whose call just ended would
        # take it back at once, and another could wait for hundreds of calls).
        self._waiting: deque[_Waiter] = deque()
        self._idle: list[Worker] = []
        self._workers: set[Worker] = set()
        self._spawning = 0  # forks in progress, counted towards the target size
        # The target size: one worker at start (a one-shot call needs no more, and each
        # fork and confinement costs milliseconds of CPU), raised towards
        # options.workers as calls overlap; a started worker is replaced, not dropped.
        self._size = 1
        self._halted: str | None = None
        self._closed = False

    def start(self) -> None:
        """Fork the first workers, then read their reports: they confine in parallel.
        The first report sets the confinement every later worker must match, one
        started on demand as much as one started here (check_boot)."""
        forked = [self._fork() for _ in range(self._size)]
        for worker in forked:
            try:
                self._boot(worker)
            except BootKilled:
                continue  # replaced below
            with self._lock:
                self._idle.append(worker)
        self.manage_workers()
        with self._lock:
            self._check_usable()

    def take(self, cancel: Cancel | None = None) -> Worker:
        """An idle worker, or one handed over in this call's turn; a worker that
        died idle is replaced first."""
        while True:
            self._grow_if_busy()
            with self._lock:
                worker = self._take_in_turn()
            if worker.looks_alive():
                return worker
            self.died(self.lost(worker))

    def give_back(self, worker: Worker) -> None:
        """To the call waiting longest, else idle."""
        with self._lock:
            self._give(worker)

    def lost(self, worker: Worker) -> int | None:
        """Kill and reap the worker, then manage the set back to size; its exit code."""
        code = self.murder_worker(worker)
        halt_if_unconfined(code, self.halt)
        self.manage_workers()
        return code

    def died(self, code: int | None) -> None:
        if not self.closing():
            note_death(self.observer, code)

    def closing(self) -> bool:
        return self._closed

    def stats(self) -> dict[str, int]:
        """Pool.stats()'s keys, for this set alone."""
        with self._lock:
            return {"workers": len(self._workers), "idle_workers": len(self._idle),
                    "busy_workers": len(self._workers) - len(self._idle),
                    "queued_calls": len(self._waiting)}

    def sole(self) -> bool:
        """Every other worker is idle (an unlocked read)."""
        return len(self._idle) + 1 >= len(self._workers)

    def wake(self) -> None:
        """Worker.wake the idle worker the next call takes (the last one given back)."""
        with self._lock:
            if self._idle and not self._waiting:
                self._idle[-1].wake()

    def sweep_temps(self) -> int:
        """sweep_on, on an idle worker of the set if one is idle and no call waits
        (the broker sweeps once its first call is answered: that call's worker), else
        on a worker of its own outside the set, confined as the set's are. A call
        that comes meanwhile finds the set busy, as any busy set, and may grow it."""
        with self._lock:
            usable = not (self._closed or self._halted or self._waiting)
            worker = self._idle.pop() if usable and self._idle else None
        if worker is None:
            return self._sweep_on_own()
        return sweep_taken(self, worker, self.options.max_frame_bytes, self.limits.timeout_s)

    def _sweep_on_own(self) -> int:
        try:
            worker = fork_worker(self.zygote, self.options)
        except SandboxError:
            return 0
        died_alone = False
        try:
            worker.boot(self.options.max_frame_bytes)
            if worker.layers is None or worker.layers != self.confinement:
                return 0  # not confined as the set's workers are: it runs nothing
            return sweep_on(worker, self.options.max_frame_bytes, self.limits.timeout_s)
        except WorkerLost as exc:  # it died under the sweep: of something outside, unless
            died_alone = not isinstance(exc, WorkerMisbehaved)  # it misbehaved
            return 0
        except SWEEP_FAILURES:
            return 0
        finally:
            worker.kill()
            worker.close()
            code = self.zygote.wait(worker.pid)
            if died_alone:
                self.died(code)

    def manage_workers(self) -> None:
        """Spawn workers until the set is back at its target size; a worker that
        fails to start halts the set rather than being retried, unless something
        else killed it, a few times in a row at most."""
        killed = 0
        while True:
            with self._lock:
                if self._closed or self._halted:
                    return
                if len(self._workers) + self._spawning >= self._size:
                    return
                self._spawning += 1
            try:
                fresh = self._fork()
                self._boot(fresh)
            except BootKilled as exc:
                killed += 1
                if killed > MAX_BOOT_KILLS:
                    self.halt(f"{killed} workers in a row were killed while starting ({exc})")
                    return
                continue
            except SandboxError as exc:
                self.halt(str(exc).rstrip("."))
                return
            finally:
                with self._lock:
                    self._spawning -= 1
            with self._lock:
                self._give(fresh)

    def _grow_if_busy(self) -> None:
        """One more worker, forked on this call's thread, when none is idle and the
        set is below options.workers; it goes to the call waiting longest."""
        with self._lock:
            if self._idle or self._closed or self._halted or self._size >= self.options.workers:
                return
            self._size += 1
        self.manage_workers()

    def murder_worker(self, worker: Worker) -> int | None:
        """SIGKILL a worker (timeout, crash, recycle) and reap it through the zygote;
        its exit code."""
        with self._lock:
            self._retire(worker)
        return self.zygote.wait(worker.pid)

    def halt(self, reason: str) -> None:
        """Fail closed: kill every idle worker and refuse every later call."""
        with self._lock:
            if self._halted is None:
                self._halted = reason
                log_halt(reason)
            while self._idle:
                self._retire(self._idle.pop())
            self._wake_waiting()

    def close(self) -> None:
        """Kill every worker (a call in flight ends with worker_crashed) and stop the zygote."""
        with self._lock:
            self._closed = True
            while self._idle:
                self._retire(self._idle.pop())
            for worker in self._workers:
                worker.kill()  # busy: its caller retires it
            self._wake_waiting()
        self.zygote.stop()

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(worker.pid for worker in self._workers)

    def _take_in_turn(self) -> Worker:
        """An idle worker if no call waits before this one, else the one handed to
        this call when its turn comes; caller holds the lock."""
        self._check_usable()
        if self._idle and not self._waiting:
            return self._idle.pop()
        waiter = _Waiter(self._lock)
        self._waiting.append(waiter)
        try:
            while waiter.worker is None:
                waiter.ready.wait()
                if waiter.worker is None:
                    self._check_usable()
            self._check_usable()  # halted or closed since it was handed one
        except BaseException:
            if waiter.worker is None:
                self._waiting.remove(waiter)
            else:  # the next call's, or retired if the set stopped
                self._give(waiter.worker)
            raise
        return waiter.worker

    def _give(self, worker: Worker) -> None:
        """An idle worker to the call waiting longest, else to the idle list (retired
        if the set is closed or halted); caller holds the lock."""
        if self._closed or self._halted:
            self._retire(worker)
        elif self._waiting:
            waiter = self._waiting.popleft()
            waiter.worker = worker
            waiter.ready.notify()
        else:
            self._idle.append(worker)

    def _wake_waiting(self) -> None:
        """Every waiting call sees the set halted or closed; caller holds the lock."""
        for waiter in self._waiting:
            waiter.ready.notify()

    def _fork(self) -> Worker:
        worker = fork_worker(self.zygote, self.options)
        with self._lock:
            self._workers.add(worker)
        return worker

    def _boot(self, worker: Worker) -> None:
        """check_boot; anything but the set's confinement halts it (SandboxError)."""
        if not check_boot(worker, self.options.max_frame_bytes, self.confinement,
                          self.murder_worker, self.halt, self.died):
            raise SandboxError(f"The sandbox halted: {self._halted}.")
        self.confinement = self.confinement or dict(worker.layers or {})

    def _retire(self, worker: Worker) -> None:
        """Kill and forget a worker; caller holds the lock (pidfds are used under it only)."""
        if worker in self._workers:
            self._workers.discard(worker)
            worker.kill()
            worker.close()

    def _check_usable(self) -> None:
        if self._closed:
            raise SandboxError("The sandbox is closed.")
        if self._halted:
            raise SandboxError(f"The sandbox halted: {self._halted}.")
