"""The host side of the sandbox: the zygote's handle and the worker pool.

There is no arbiter thread: the thread that makes a call watches its own
deadline, and the pool's verbs (gunicorn's, minus the loop) run on whichever
thread finds work for them. The pool never opens a workspace path; the only
fds it holds are its sockets to the zygote and workers, and pidfds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil

from corral.config import Limits, SandboxOptions
from corral.sandbox.answers import answer_limits, decode_answer
from corral.sandbox.messages import (
    Answer,
    BootReport,
    CallRequest,
    CleanupRequest,
    Discard,
    FindTemps,
    HistoryRequest,
    Malformed,
    RemoveTemps,
    Spawn,
    Wait,
    error_answer,
    removed_from_wire,
    temps_from_wire,
)
from corral.sandbox.protocol import (
    CONTROL_FRAME_BYTES,
    EXIT_CONFINE_FAILED,
    FrameTooLarge,
    FrameTruncated,
    ProtocolError,
    decode,
    encode,
    read_frame,
    read_sole_frame,
    recv_frame_with_fds,
    send_bytes,
    write_frame,
)
from corral.sandbox.waiting import ANSWER_SPIN_S, PLAIN, SLOW_CALL_S, Cancel, WaitPolicy

# A worker reports its confinement within ms; this only catches a wedged one.
BOOT_TIMEOUT_S = 10.0
# The zygote's first answer comes after its imports: seconds on a loaded machine at worst.
START_TIMEOUT_S = 30.0
# Later answers take a fork or a waitpid on a SIGKILLed worker (which may finish an fsync).
CONTROL_TIMEOUT_S = 30.0
# close() waits this long for the zygote to take its workers down, then kills it.
STOP_GRACE_S = 5.0
# Workers recycle after max_calls plus up to this fraction more, so they do not all go at once.
RECYCLE_JITTER = 0.1
# RSS is read every this many calls: psutil costs ~50 us a read, a tenth of a small call,
# and RLIMIT_AS bounds what a worker can grow to in between.
RSS_CHECK_EVERY = 8
# Starting workers killed from outside (OOM killer, an operator) are replaced this
# many times in a row; more means something keeps killing them: halt, do not loop.
MAX_BOOT_KILLS = 3
# A cleanup is tried this many times: its own worker may be killed too (OOM, operator).
CLEANUP_ATTEMPTS = 3
# The directory that holds the `corral` package the host runs: the zygote imports the same one.
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
# All the zygote (so every worker) gets of the host's environment: the locale, which
# decides how Python decodes and encodes file names and text, and what decides how the
# interpreter starts (PYTHONHOME: where its library is; PYTHONUTF8: UTF-8 mode). Nothing
# else: a worker runs no program, so PATH is moot, and API keys and tokens stay in the
# host. PYTHONPATH is not needed either: the zygote gets the host's sys.path verbatim.
ZYGOTE_ENVIRONMENT = ("LANG", "PYTHONHOME", "PYTHONUTF8")
ZYGOTE_ENVIRONMENT_PREFIX = "LC_"

log = logging.getLogger(__name__)
T = TypeVar("T")

Request = CallRequest | HistoryRequest | CleanupRequest


class SandboxError(Exception):
    """The sandbox cannot start, or has halted (failing closed)."""


class CallFailed(Exception):
    """A call the worker could not answer (timeout, crash, halted pool): its code
    and message become the call's error answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class WorkerLost(Exception):
    """A worker's socket ended in the middle of a call."""


# What a sweep's exchange may fail with: the sweep then removes nothing.
SWEEP_FAILURES = (WorkerLost, TimeoutError, ProtocolError, Malformed)


class BootKilled(Exception):
    """A new worker was SIGKILLed from outside before it reported: not its own failure."""


class WorkerMisbehaved(WorkerLost):
    """A worker answered with something that is not an answer to its call: garbage,
    an oversize frame, another request's id, or the wrong shape."""


@dataclass(eq=False)
class Worker:
    """The host's view of one worker: its socket, a pidfd, and its call count."""

    pid: int
    sock: socket.socket
    pidfd: int
    max_calls: int
    calls: int = 0
    layers: dict[str, Any] | None = None
    roots: list[list[str]] | None = None  # [path, mode] of each root, as it reported
    born: float = 0.0  # time.monotonic() when it was forked
    _process: psutil.Process | None = None

    def exchange(
        self, frame: bytes, deadline: float, max_bytes: int, wait: WaitPolicy,
        spin: bool = False, max_values: int | None = None, raw: bool = False,
    ) -> dict[str, Any]:
        """Send one encoded request and read its answer frame; WorkerLost, TimeoutError.
        The answer is untrusted: one over max_bytes or, before it is decoded,
        max_values JSON values loses the worker (so does one the caller's
        messages.*.from_wire refuses). spin: poll for the answer first (waiting.py).
        raw: a large answer's result and text may stay JSON text (decode_answer)."""
        try:
            send_bytes(self.sock.fileno(), frame, deadline)
            if spin:
                _spin_for_answer(self.sock.fileno())
            if wait.notifies:
                _tell_if_slow(self.sock.fileno(), wait.on_slow)
            response = read_sole_frame(
                self.sock.fileno(), max_bytes, deadline,
                decode if max_values is None else (
                    lambda payload: decode_answer(payload, max_values, raw=raw)),
            )
        except (FrameTruncated, OSError) as exc:
            if isinstance(exc, TimeoutError):
                raise
            raise WorkerLost(str(exc)) from None
        except ProtocolError as exc:
            raise WorkerMisbehaved(str(exc)) from None
        if response is None:
            raise WorkerLost("its socket closed")
        return response

    def boot(self, max_bytes: int) -> BootReport | None:
        """The worker's first frame: its confinement layers (None if it never came,
        or was not a report)."""
        try:
            wire = read_frame(self.sock.fileno(), max_bytes, time.monotonic() + BOOT_TIMEOUT_S)
            report = None if wire is None else BootReport.from_wire(wire)
            if report is not None and report.confinement is not None:
                self._process = psutil.Process(self.pid)
                self.layers = report.confinement
                self.roots = [list(root) for root in report.roots]
        except (ProtocolError, OSError, psutil.Error, Malformed):
            return None
        return report

    def looks_alive(self) -> bool:
        """An idle worker has nothing to say: anything readable means it ended."""
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def rss_mb(self) -> float:
        assert self._process is not None
        try:
            return self._process.memory_info().rss / (1024 * 1024)
        except psutil.Error:
            return 0.0

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        self.sock.close()
        os.close(self.pidfd)


def _spin_for_answer(fd: int) -> None:
    """Poll (yielding) until the answer is readable or ANSWER_SPIN_S passes; the
    deadline and crash handling after it are those of a blocking wait."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    end = time.perf_counter() + ANSWER_SPIN_S
    while not poller.poll(0) and time.perf_counter() < end:
        os.sched_yield()


def _tell_if_slow(fd: int, hook: Callable[[], None]) -> None:
    """Wait up to SLOW_CALL_S for the answer to start, then tell `hook`."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(SLOW_CALL_S * 1000):
        with contextlib.suppress(Exception):  # the caller's hook must not cost the call its worker
            hook()


class ZygoteHandle:
    """The host's handle on the zygote process (sandbox/zygote.py's Zygote): start
    it, ask it to fork, ask how a worker ended."""

    # What the exec'd interpreter runs, given the control channel's fd.
    ENTRY = "from corral.sandbox.zygote import main; main({fd})"

    def __init__(self, config: dict[str, Any]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # -S and the host's own sys.path: the same modules, without site's start-up cost.
        path = [PACKAGE_PARENT, *sys.path]
        code = f"import sys; sys.path[:] = {path!r}; " + self.ENTRY.format(fd=theirs.fileno())
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-S", "-c", code], pass_fds=[theirs.fileno()], close_fds=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # stdout may be a protocol
                env=zygote_environment(os.environ),
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._lock = threading.Lock()
        self._closed = False
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            write_frame(ours.fileno(), config, CONTROL_FRAME_BYTES, deadline)
            reply = read_frame(ours.fileno(), CONTROL_FRAME_BYTES, deadline)
        except TimeoutError:
            reply = {"error": f"the zygote did not answer within {START_TIMEOUT_S:g} seconds"}
        except (ProtocolError, OSError) as exc:
            reply = {"error": f"the zygote broke its channel: {exc}"}
        if reply is None or "error" in reply:
            self.stop()
            reason = reply["error"] if reply else f"it exited with code {self.process.returncode}"
            raise SandboxError(f"The sandbox could not start: {reason}.")
        self.pid: int = reply["pid"]

    def spawn(
        self, setup: dict[str, Any] | None = None, root_fds: Sequence[int] = (),
        after: int | None = None,
    ) -> tuple[int, socket.socket, int]:
        """Fork one worker: (pid, socket, pidfd). A shared pool's zygote needs the
        sandbox's `setup` (its start config) and its root fds; `after`: the pid of
        a worker killed to make room, reaped before the fork."""
        message, fds = self._ask(Spawn(setup, after), max_fds=2, send_fds=root_fds)
        if message is None or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            if message is not None and "error" in message:
                raise SandboxError(f"The zygote could not start a worker: {message['error']}.")
            raise SandboxError("The zygote is gone, so no worker can be started.")
        sock = socket.socket(fileno=fds[0])
        sock.setblocking(False)
        return int(message["pid"]), sock, fds[1]

    def wait(self, pid: int) -> int | None:
        """Exit code of a worker that was killed or ended; None if unknown."""
        try:
            reply, _ = self._ask(Wait(pid), max_fds=0)
        except SandboxError:
            return None
        return None if reply is None else reply.get("code")

    def discard(self, pid: int) -> None:
        """Tell the zygote to reap a killed worker without keeping its exit code."""
        with self._lock:
            if self._closed:
                return
            try:
                write_frame(
                    self._sock.fileno(), Discard(pid).to_wire(), CONTROL_FRAME_BYTES,
                    time.monotonic() + CONTROL_TIMEOUT_S,
                )
            except (ProtocolError, OSError):
                self._closed = True
                self._sock.close()

    def _ask(
        self, request: Spawn | Wait, max_fds: int, send_fds: Sequence[int] = ()
    ) -> tuple[dict[str, Any] | None, list[int]]:
        """One request (with `send_fds` attached) and its reply. A channel that fails
        or times out is closed for good: a late reply would otherwise answer the next
        request."""
        with self._lock:
            if self._closed:
                raise SandboxError("The sandbox is closed.")
            deadline = time.monotonic() + CONTROL_TIMEOUT_S
            try:
                frame = encode(request.to_wire(), CONTROL_FRAME_BYTES)
                if send_fds:  # the fds ride on the first byte; the rest as any frame
                    frame = frame[socket.send_fds(self._sock, [frame[:1]], list(send_fds)):]
                send_bytes(self._sock.fileno(), frame, deadline)
                return recv_frame_with_fds(self._sock, CONTROL_FRAME_BYTES, max_fds, deadline)
            except (ProtocolError, OSError) as exc:  # TimeoutError included
                self._closed = True
                self._sock.close()  # the zygote sees the end and takes its workers down
                raise SandboxError(f"The zygote broke its channel: {exc}.") from None

    def stop(self) -> None:
        """End the channel; the zygote kills and reaps its workers, then exits."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._sock.close()
        try:
            self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Waiter:
    """A call waiting for a worker of a private pool: handed one in its turn."""

    __slots__ = ("ready", "worker")

    def __init__(self, lock: threading.RLock) -> None:
        self.ready = threading.Condition(lock)  # the pool's lock: one waiter per call
        self.worker: Worker | None = None


class Pool:
    """N confined workers forked by one zygote; one call per worker at a time,
    given to waiting calls in their order of arrival."""

    def __init__(self, zygote: ZygoteHandle, options: SandboxOptions, limits: Limits) -> None:
        self.zygote = zygote
        self.options = options
        self.limits = limits
        self.confinement: dict[str, Any] = {}
        # What a tool's answer can need under these limits (answers.py): a bigger
        # one, or one of more values, is a misbehaving worker's, refused undecoded.
        size, self.answer_values = answer_limits(limits)
        self.answer_bytes = min(size, options.max_frame_bytes)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # Calls waiting for a worker, oldest first: a freed worker goes to the first,
        # never to whichever thread asks next (a thread whose call just ended would
        # take it back at once, and another could wait for hundreds of calls).
        self._waiting: deque[_Waiter] = deque()
        self._idle: list[Worker] = []
        self._workers: set[Worker] = set()
        self._spawning = 0  # forks in progress, counted towards the target size
        self._halted: str | None = None
        self._closed = False

    def start(self) -> None:
        """Fork every worker first, then read their reports: they confine in parallel.
        The first report sets the confinement every later worker must match."""
        forked = [self._fork() for _ in range(self.options.workers)]
        for worker in forked:
            try:
                self._boot(worker)
            except BootKilled:
                continue  # replaced below
            with self._cond:
                self._idle.append(worker)
        self.manage_workers()
        with self._cond:
            self._check_usable()

    def call(self, request: CallRequest | HistoryRequest, wait: WaitPolicy = PLAIN) -> Answer:
        """Run one call on an idle worker; failures of the worker become error answers."""
        try:
            return self._run(request, lambda wire: Answer.from_wire(wire, request), wait)
        except CallFailed as failed:
            return error_answer(request.tool, failed.code, failed.message, id=request.id)

    def _run(
        self, request: Request, parse: Callable[[dict[str, Any]], T], wait: WaitPolicy,
    ) -> T:
        """`request` on an idle worker, its answer frame made into a T by `parse`
        (messages.*.from_wire: Malformed loses the worker); CallFailed otherwise."""
        limit = self.options.max_frame_bytes
        try:
            frame = encode(request.to_wire(), limit)
        except ProtocolError as exc:
            why = "too_large" if isinstance(exc, FrameTooLarge) else "invalid_arguments"
            raise CallFailed(why, f"The request cannot be sent: {exc}.") from None
        try:
            worker = self.checkout(wait.cancel)
        except SandboxError as exc:
            raise CallFailed("worker_crashed", str(exc)) from None
        timeout = self.limits.timeout_s
        tool = request.tool
        try:
            # only a lone call spins: concurrent ones would take the GIL from each other
            # (an unlocked read: a wrong guess costs a little speed, nothing else)
            alone = len(self._idle) + 1 >= len(self._workers)
            spin = wait.spin and self.options.spin and alone
            try:
                wire = worker.exchange(
                    frame, time.monotonic() + timeout, self.answer_bytes, wait, spin,
                    self.answer_values, isinstance(request, CallRequest) and request.raw,
                )
                if wire.get("id") != request.id:
                    raise WorkerMisbehaved("it answered another request")
                answer = parse(wire)
            except Malformed as exc:
                raise WorkerMisbehaved(f"it sent {exc}") from None
            except (WorkerLost, TimeoutError):
                raise
            except Exception as exc:
                # reading its answer failed as nothing foresaw: the worker's state is
                # unknown, and a worker neither replaced nor checked in would jam the pool
                raise WorkerMisbehaved(
                    f"its answer could not be read ({type(exc).__name__}: {exc})"
                ) from exc
            finally:
                self._detach(wait.cancel)
        except TimeoutError:
            self.replace(worker)
            self.clean_after(worker.pid, request, wait)
            raise CallFailed(
                "timeout",
                f"{tool} did not finish within the {timeout:g} second limit; "
                "its worker was stopped.",
            ) from None
        except WorkerLost as exc:
            code = self.replace(worker)
            self.clean_after(worker.pid, request, wait)
            what = (
                f"sent an invalid answer ({exc})" if isinstance(exc, WorkerMisbehaved)
                else f"stopped unexpectedly ({describe_exit(code, str(exc))})"
            )
            if code == -signal.SIGSYS:
                # the seccomp profile kills a worker only for a call corral never makes
                what = "was killed by SIGSYS: it attempted a system call the sandbox forbids"
                log.error(
                    "corral: worker %d running %s was killed by SIGSYS: it attempted a "
                    "system call the seccomp profile forbids outright (a compromised "
                    "worker?); the pool replaced it", worker.pid, tool,
                )
            else:
                log.warning("corral: worker %d running %s %s; the pool replaced it",
                            worker.pid, tool, what)
            raise CallFailed(
                "worker_crashed", f"The worker running {tool} {what}; the pool replaced it.",
            ) from None
        self.checkin(worker)
        return answer

    def clean_after(self, pid: int, request: Request, wait: WaitPolicy) -> None:
        """Have a live worker remove the temp files a killed one may have left. A
        cleanup whose own worker dies is tried again (it writes nothing itself);
        it runs even when its call was cancelled."""
        if not isinstance(request, CallRequest | HistoryRequest):
            return
        cleanup = CleanupRequest.after(pid, request)
        for _ in range(CLEANUP_ATTEMPTS):
            try:
                self._run(cleanup, lambda wire: removed_from_wire(wire, cleanup), wait.quiet())
                return
            except CallFailed:
                continue

    def sweep_temps(self) -> int:
        """Remove the temp files of writers that died mid-write unseen by this pool
        (a killed host's workers die with it). A worker of its own, outside the pool
        (so no call waits for it and no count changes), lists every temp file; the
        host keeps those whose writer's pid is alive now (another sandbox's worker on
        the same workspace), and the worker removes exactly the other names: a pid
        reused since the listing can only keep a file. Returns how many were removed."""
        try:
            pid, sock, pidfd = self.zygote.spawn()
        except SandboxError:
            return 0
        worker = Worker(pid, sock, pidfd, max_calls=2)
        try:
            worker.boot(self.options.max_frame_bytes)
            if worker.layers is None or worker.layers != self.confinement:
                return 0  # not confined as the pool's workers are: it runs nothing
            return self._sweep_on(worker)
        except SWEEP_FAILURES:
            return 0
        finally:
            worker.kill()
            worker.close()
            self.zygote.wait(pid)

    def _sweep_on(self, worker: Worker) -> int:
        """sweep_temps' two requests on `worker` (SWEEP_FAILURES if either fails)."""
        find = FindTemps(1)
        listed = temps_from_wire(self._exchange(worker, find), find)
        dead = tuple((index, path) for index, path, pid in listed if not _alive(pid))
        if not dead:
            return 0
        remove = RemoveTemps(dead, 2)
        return removed_from_wire(self._exchange(worker, remove), remove)

    def _exchange(self, worker: Worker, request: FindTemps | RemoveTemps) -> dict[str, Any]:
        limit = self.options.max_frame_bytes
        deadline = time.monotonic() + self.limits.timeout_s
        return worker.exchange(encode(request.to_wire(), limit), deadline, limit, PLAIN)

    def checkout(self, cancel: Cancel | None = None) -> Worker:
        """Take an idle worker, or wait in line for one; a worker that died idle is
        replaced first. (A private pool's calls are not cancelled: see hub.Lane.)"""
        while True:
            with self._cond:
                worker = self._take_in_turn()
            if worker.looks_alive():
                return worker
            self.replace(worker)

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
            else:  # the next call's, or retired if the pool stopped
                self._give(waiter.worker)
            raise
        return waiter.worker

    def _give(self, worker: Worker) -> None:
        """An idle worker to the call waiting longest, else to the idle list (retired
        if the pool is closed or halted); caller holds the lock."""
        if self._closed or self._halted:
            self._retire(worker)
        elif self._waiting:
            waiter = self._waiting.popleft()
            waiter.worker = worker
            waiter.ready.notify()
        else:
            self._idle.append(worker)

    def _detach(self, cancel: Cancel | None) -> None:
        """The call's worker is no longer its cancel handle's to kill (hub.Lane)."""

    def checkin(self, worker: Worker) -> None:
        """Back to idle, or recycled (max calls, RSS cap) without failing anyone."""
        worker.calls += 1
        if worker.calls >= worker.max_calls or (
            worker.calls % RSS_CHECK_EVERY == 0
            and worker.rss_mb() > self.options.max_worker_rss_mb
        ):
            self.replace(worker)
            return
        with self._cond:
            self._give(worker)

    def replace(self, worker: Worker) -> int | None:
        """Murder a worker, then manage the pool back to size; returns its exit code."""
        code = self.murder_worker(worker)
        self.manage_workers()
        return code

    def manage_workers(self) -> None:
        """Spawn workers until the pool is back at its target size; a worker that
        fails to start halts the pool (in _boot) rather than being retried, unless
        something else killed it, a few times in a row at most."""
        killed = 0
        while True:
            with self._cond:
                if self._closed or self._halted:
                    return
                if len(self._workers) + self._spawning >= self.options.workers:
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
                with self._cond:
                    self._spawning -= 1
            with self._cond:
                self._give(fresh)

    def murder_worker(self, worker: Worker) -> int | None:
        """SIGKILL a worker (timeout, crash, recycle) and reap it through the zygote."""
        with self._cond:
            self._retire(worker)
        return self.reap_worker(worker.pid)

    def reap_worker(self, pid: int) -> int | None:
        """Decode how a worker ended. A confinement failure halts the pool: a pool
        that respawned would either loop forever or, worse, serve unconfined."""
        code = self.zygote.wait(pid)
        if code == EXIT_CONFINE_FAILED:
            self.halt("a worker could not confine itself")
        return code

    def halt(self, reason: str) -> None:
        """Fail closed: kill every idle worker and refuse every later call."""
        with self._cond:
            if self._halted is None:
                self._halted = reason
            while self._idle:
                self._retire(self._idle.pop())
            self._wake_waiting()
            self._cond.notify_all()

    def close(self) -> None:
        """Kill every worker (a call in flight ends with worker_crashed) and stop the zygote."""
        with self._cond:
            self._closed = True
            while self._idle:
                self._retire(self._idle.pop())
            for worker in self._workers:
                worker.kill()  # busy: its caller retires it
            self._wake_waiting()
            self._cond.notify_all()
        self.zygote.stop()

    def _wake_waiting(self) -> None:
        """Every waiting call sees the pool halted or closed; caller holds the lock."""
        for waiter in self._waiting:
            waiter.ready.notify()

    def pids(self) -> list[int]:
        with self._cond:
            return sorted(worker.pid for worker in self._workers)

    def _fork(self) -> Worker:
        pid, sock, pidfd = self.zygote.spawn()
        limit = self.options.max_calls_per_worker
        worker = Worker(pid, sock, pidfd, limit + random.randint(0, int(limit * RECYCLE_JITTER)))
        with self._cond:
            self._workers.add(worker)
        return worker

    def _boot(self, worker: Worker) -> None:
        """Read a new worker's report; anything but the pool's confinement halts it."""
        report = worker.boot(self.options.max_frame_bytes)
        if worker.layers is None:
            confine_error = report.confine_error if report is not None else None
            if confine_error:
                self.halt(f"a worker could not confine itself: {confine_error}")
            ended_alone = report is None and not worker.looks_alive()
            code = self.murder_worker(worker)  # halts as well on EXIT_CONFINE_FAILED
            if ended_alone and code == -signal.SIGKILL and not self._halted:
                # the OOM killer or an operator, not its own failure: worth another try
                raise BootKilled(describe_exit(code, ""))
            self.halt(f"a worker did not start ({describe_exit(code, 'it sent no report')})")
        elif self.confinement and worker.layers != self.confinement:
            self.murder_worker(worker)
            self.halt(f"a worker came up confined differently ({worker.layers})")
        else:
            self.confinement = self.confinement or dict(worker.layers)
            return
        raise SandboxError(f"The sandbox halted: {self._halted}.")

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


def _alive(pid: int) -> bool:
    """A process that can still write: a zombie (dead, not yet reaped) cannot."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: keep its file


def zygote_environment(host: Mapping[str, str]) -> dict[str, str]:
    """The part of the host's environment the zygote starts with (ZYGOTE_ENVIRONMENT)."""
    return {
        name: value for name, value in host.items()
        if name in ZYGOTE_ENVIRONMENT or name.startswith(ZYGOTE_ENVIRONMENT_PREFIX)
    }


def describe_exit(code: int | None, fallback: str) -> str:
    if code is None:
        return fallback
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
