"""The host side of the sandbox: the zygote's handle, its workers, and the one
call path over a supply of them.

A call goes checkout -> exchange -> check in or replace (CallPath), whatever
supplies its workers (Supply): a private sandbox's WorkerSet (worker_set.py) or
a lane of a shared pool (hub.Lane). What both supplies do alike lives here too:
forking a worker, checking its boot report, the start-up sweep of temp files.
The host never opens a workspace path here; the only fds it holds are its
sockets to the zygote and workers, and pidfds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from corral.calls.control import Reply, SandboxSetup, Spawn, Wait, ZygoteStart
from corral.calls.messages import (
    Answer,
    BootReport,
    CallRequest,
    CleanupRequest,
    FindTemps,
    HistoryRequest,
    Malformed,
    Removed,
    RemoveTemps,
    TempList,
    error_answer,
)
from corral.calls.waiting import (
    ANSWER_SPIN_S,
    NEXT_REQUEST_SPIN_S,
    PLAIN,
    SLOW_CALL_S,
    Cancel,
    WaitPolicy,
)
from corral.config import Limits, SandboxOptions
from corral.errors import SandboxError
from corral.fs import READ_ONLY_FS
from corral.observe import Observer
from corral.sandbox.answers import answer_limits, decode_answer
from corral.sandbox.launcher import ZYGOTE_ENTRY, launch_zygote
from corral.sandbox.protocol import (
    CONTROL_FRAME_BYTES,
    EXIT_CONFINE_FAILED,
    POKE,
    FrameTooLarge,
    FrameTruncated,
    ProtocolError,
    ask_with_fds,
    decode,
    encode,
    read_frame,
    read_sole_frame,
    recv_frame_with_fds,
    send_bytes,
    send_bytes_with_fds,
)

if TYPE_CHECKING:  # imported at a worker's first RSS read: `corral call` makes none
    import psutil

# A worker reports its confinement within ms; this only catches a wedged one.
BOOT_TIMEOUT_S = 10.0
# A worker that reported it could not confine itself exits at once; its own exit code
# (EXIT_CONFINE_FAILED) is awaited this long before it is killed, so the halt names it.
CONFINE_FAILED_EXIT_S = 5.0
# The zygote's first answer comes after it opened the roots (and the template's, after
# its imports): seconds on a loaded machine at worst.
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

# Every worker's end an operator should see (a halt, a kill at boot, a recycle, an
# eviction, an idle reap), with its decoded exit; a call's crash too.
log = logging.getLogger("corral.workers")
T = TypeVar("T")

Runnable = CallRequest | HistoryRequest | CleanupRequest  # what run() sends a worker


class CallFailed(Exception):
    """A call the worker could not answer (timeout, crash, halted sandbox): its code
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
    idle_since: float = 0.0  # time.monotonic() when its last call was checked in
    poked: bool = False  # poked since then: it is awake, or about to be
    _process: psutil.Process | None = None

    def wake(self) -> None:
        """Poke an idle worker that has gone to sleep (idle longer than it polls for
        its next request), once: a request is coming, and waking it now overlaps its
        wake-up with the host's parsing of that request, where waking it with the
        request puts the two wakes one after the other. The caller holds its
        supply's lock, with the worker idle: no request frame is being written, so
        the 4 bytes go whole into an empty socket. A worker that finds no request
        after it polls sleeps again (worker.serve)."""
        if self.poked or time.monotonic() - self.idle_since < NEXT_REQUEST_SPIN_S:
            return
        self.poked = True
        with contextlib.suppress(OSError):  # a dead worker is found when a call takes it
            os.write(self.sock.fileno(), POKE)

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
                self.layers = report.confinement
                self.roots = [list(root) for root in report.roots]
        except (ProtocolError, OSError, Malformed):
            return None
        return report

    def ended_within(self, timeout_s: float) -> bool:
        """Whether the worker's process ends within `timeout_s`."""
        return _ended_within(self.pidfd, timeout_s)

    def looks_alive(self) -> bool:
        """An idle worker has nothing to say: anything readable means it ended."""
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def rss_mb(self) -> float:
        import psutil  # here: psutil is a tenth of what `corral call` would import

        try:
            if self._process is None:
                process = psutil.Process(self.pid)
                # Its pid is ours while the worker lives (the zygote reaps it only after
                # it dies): once the handle exists, psutil tells a reused pid apart.
                if self.ended_within(0):
                    return 0.0
                self._process = process
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
    it, ask it to fork, ask how a worker ended. A shared pool's zygote that died
    (killed from outside, or hung past CONTROL_TIMEOUT_S and killed) is replaced at
    the next spawn: it serves every sandbox of the pool, every tenant of a server,
    and holds nothing of theirs (each new worker gets its setup from the host).
    A private sandbox's zygote is not: it opened its roots by path, and a new one
    might open other directories there; its sandbox fails closed instead."""

    # The module the zygote runs (launcher.ZYGOTE_ENTRY: its prepare() once in the
    # template, its main(fd) in the zygote).
    ENTRY = ZYGOTE_ENTRY

    def __init__(self, setup: SandboxSetup | None) -> None:
        """Start the zygote for a private sandbox's `setup` (None: a shared pool's,
        whose workers get their setup from the host): a fork of the template."""
        self._lock = threading.Lock()
        self._shared = setup is None
        self._stopped = False  # by stop(): for good
        self._broken: str | None = None  # why the channel ended, if it has
        # The workers this zygote forked and wait() has not been asked about: a worker
        # of a zygote that was replaced died with it, and its pid, asked of the new
        # one, could be a live worker's by now (wait would block on it).
        self._forked: set[int] = set()
        self._start(setup)

    def _start(self, setup: SandboxSetup | None) -> None:
        # A private sandbox's zygote is asked for its first worker with its start frame
        # (its reply waits for spawn()): one round trip fewer before the first call.
        self._queued = Spawn() if setup is not None else None
        try:
            hello = encode(ZygoteStart(setup).to_wire(), CONTROL_FRAME_BYTES)
        except ProtocolError as exc:  # a setup too large for the control channel
            raise SandboxError(f"The sandbox could not start: {exc}.") from None
        if self._queued is not None:
            hello += encode(self._queued.to_wire(), CONTROL_FRAME_BYTES)
        self.pid, self._sock, self._pidfd = launch_zygote(self.ENTRY, hello)
        self._broken = None
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            wire = read_frame(self._sock.fileno(), CONTROL_FRAME_BYTES, deadline)
            reply = None if wire is None else Reply.from_wire(wire)
        except TimeoutError:
            reply = Reply(error=f"the zygote did not answer within {START_TIMEOUT_S:g} seconds")
        except (ProtocolError, OSError, Malformed) as exc:
            reply = Reply(error=f"the zygote broke its channel: {exc}")
        if reply is None or reply.error is not None:
            self._end("it did not start")
            reason = reply.error if reply else "it exited before it answered"
            raise SandboxError(f"The sandbox could not start: {reason}.")

    def spawn(
        self, setup: SandboxSetup | None = None, root_fds: Sequence[int] = (),
    ) -> tuple[int, socket.socket, int]:
        """Fork one worker: (pid, socket, pidfd). A shared pool's worker is sent its
        sandbox's `setup` and root fds on its own socket, never through the zygote."""
        reply, fds = self._ask(Spawn(), max_fds=2)
        if reply is None or reply.pid is None or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            if reply is not None and reply.error is not None:
                raise SandboxError(f"The zygote could not start a worker: {reply.error}.")
            raise SandboxError("The zygote is gone, so no worker can be started.")
        with self._lock:
            self._forked.add(reply.pid)
        sock = socket.socket(fileno=fds[0])
        sock.setblocking(False)
        if setup is not None:
            try:
                send_setup(sock, setup, root_fds)
            except (ProtocolError, OSError) as exc:  # TimeoutError included
                sock.close()
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fds[1], signal.SIGKILL)
                os.close(fds[1])
                self.wait(reply.pid)
                raise SandboxError(f"The zygote's new worker took no setup: {exc}.") from None
        return reply.pid, sock, fds[1]

    def wait(self, pid: int) -> int | None:
        """Exit code of a worker that was killed or ended; None if unknown."""
        with self._lock:
            if pid not in self._forked:
                return None  # not this zygote's: its own died with it
            self._forked.discard(pid)
        try:
            reply, _ = self._ask(Wait(pid), max_fds=0)
        except SandboxError:
            return None
        return None if reply is None else reply.code

    def _ask(self, request: Spawn | Wait, max_fds: int) -> tuple[Reply | None, list[int]]:
        """One request and its reply. A channel that fails,
        ends or times out is closed for good (a late reply would otherwise answer the
        next request): a shared pool's spawn then starts another zygote and asks it."""
        with self._lock:
            if self._stopped:
                raise SandboxError("The sandbox is closed.")
            for retry in (False, True):
                if self._broken is None:
                    reply = self._exchange(request, max_fds)
                    if reply is not None:
                        return reply
                if retry or not self._shared or not isinstance(request, Spawn):
                    break
                self._end("replaced")  # its workers died with it (their death signal)
                self._start(None)
            raise SandboxError(f"The zygote broke its channel: {self._broken}.")

    def _exchange(
        self, request: Spawn | Wait, max_fds: int,
    ) -> tuple[Reply | None, list[int]] | None:
        """`request` sent, its reply read; None if the channel broke (then closed,
        and why kept in _broken); caller holds _lock."""
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        fds: list[int] = []
        try:
            if request == self._queued:  # sent with the start frame
                self._queued = None
                wire, fds = recv_frame_with_fds(self._sock, CONTROL_FRAME_BYTES, max_fds,
                                                deadline)
            else:
                wire, fds = ask_with_fds(self._sock, request.to_wire(), (), max_fds,
                                         CONTROL_FRAME_BYTES, deadline)
            if wire is not None:
                return Reply.from_wire(wire), fds
            why = "it ended"
        except (ProtocolError, OSError, Malformed) as exc:  # TimeoutError included
            why = str(exc) or type(exc).__name__
        for fd in fds:
            os.close(fd)
        self._broken = why
        self._sock.close()  # the zygote sees the end and takes its workers down
        return None

    def stop(self) -> None:
        """End the channel; the zygote kills and reaps its workers, then exits (the
        template reaps it). Waits on its pidfd, and kills it if it lingers."""
        with self._lock:
            self._stopped = True
            self._end("the sandbox is closed")

    def _end(self, why: str) -> None:
        """Close the channel (if still open) and see the zygote gone: waited for on its
        pidfd, killed if it lingers; caller holds _lock (or is the constructor)."""
        if self._broken is None:
            self._broken = why
            self._sock.close()
        pidfd, self._pidfd = self._pidfd, -1
        self._forked.clear()
        if pidfd < 0:
            return  # ended already
        try:
            if not _ended_within(pidfd, STOP_GRACE_S):
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                _ended_within(pidfd, None)
        finally:
            os.close(pidfd)


def _ended_within(pidfd: int, timeout_s: float | None) -> bool:
    """Whether the process of `pidfd` ends within `timeout_s` (None: however long)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)  # readable once the process has exited
    return bool(poller.poll(None if timeout_s is None else timeout_s * 1000))


def send_setup(sock: socket.socket, setup: SandboxSetup, root_fds: Sequence[int]) -> None:
    """A shared pool's new worker's first frame, its sandbox's setup with the root
    fds attached to its first byte, on the worker's (non-blocking) socket."""
    send_bytes_with_fds(sock, encode(setup.to_wire(), CONTROL_FRAME_BYTES), root_fds,
                        time.monotonic() + CONTROL_TIMEOUT_S)


class Supply(Protocol):
    """Where a sandbox's call path gets its workers: a WorkerSet of its own (a
    private sandbox) or a hub.Lane (a sandbox of a shared pool). Its state is
    guarded by one lock, the supply's own or its hub's; the call path holds none."""

    zygote: ZygoteHandle
    confinement: dict[str, Any]

    def start(self) -> None:
        """Have a worker confined, so `confinement` is known (SandboxError if none can be)."""

    def take(self, cancel: Cancel | None) -> Worker:
        """A live worker for one call, in the call's turn; SandboxError if none will
        come (halted, closed, or the caller cancelled)."""

    def give_back(self, worker: Worker) -> None:
        """A worker whose call went well: idle again, or to the next call waiting."""

    def lost(self, worker: Worker) -> int | None:
        """A worker that must not serve again (it crashed, timed out, misbehaved or
        is recycled): kill it, reap it, return its exit code; the supply makes up
        for it (at once, or when a call needs one)."""

    def died(self, code: int | None) -> None:
        """A worker ended with exit `code` of something the host did not do: tell the
        sandbox's observer (note_death), unless the supply's close killed it."""

    def closing(self) -> bool:
        """The supply was closed: its workers were killed by its close, not lost."""

    def close(self) -> None:
        """Kill every worker (a call in flight ends with worker_crashed) and reap them."""

    def sweep_temps(self) -> int:
        """Remove the temp files of writers that died unseen (sweep_on), on a worker
        the supply finds for it; returns how many were removed."""

    def pids(self) -> list[int]:
        """The pids of the supply's live workers."""

    def stats(self) -> dict[str, int]:
        """{"workers", "idle_workers", "busy_workers", "queued_calls"} now."""

    def sole(self) -> bool:
        """No other call holds a worker now (an unlocked guess: a wrong one costs speed)."""

    def wake(self) -> None:
        """A call is on its way: Worker.wake the idle worker it will take, if any."""


class CallPath:
    """The one call path: checkout (Supply.take) -> exchange -> check in (give back,
    or recycle) or replace (Supply.lost). Failures of the worker become error answers."""

    def __init__(self, supply: Supply, options: SandboxOptions, limits: Limits) -> None:
        self.supply = supply
        self.options = options
        self.limits = limits
        # What a tool's answer can need under these limits (answers.py): a bigger
        # one, or one of more values, is a misbehaving worker's, refused undecoded.
        size, self.answer_values = answer_limits(limits)
        self.answer_bytes = min(size, options.max_frame_bytes)

    def wake(self) -> None:
        """A call is on its way (its first bytes came in): wake the worker it will
        take if that one sleeps. Only where workers poll for requests (spin)."""
        if self.options.spin:
            self.supply.wake()

    def call(self, request: CallRequest | HistoryRequest, wait: WaitPolicy = PLAIN) -> Answer:
        """Run one call on a worker; failures of the worker become error answers."""
        try:
            return self.run(request, lambda wire: Answer.from_wire(wire, request), wait)
        except CallFailed as failed:
            return error_answer(request.tool, failed.code, failed.message, id=request.id)

    def run(self, request: Runnable, parse: Callable[[dict[str, Any]], T], wait: WaitPolicy) -> T:
        """`request` on a worker, its answer frame made into a T by `parse`
        (messages.*.from_wire: Malformed loses the worker); CallFailed otherwise."""
        limit = self.options.max_frame_bytes
        try:
            frame = encode(request.to_wire(), limit)
        except ProtocolError as exc:
            why = "too_large" if isinstance(exc, FrameTooLarge) else "invalid_arguments"
            raise CallFailed(why, f"The request cannot be sent: {exc}.") from None
        try:
            worker = self.supply.take(wait.cancel)
        except SandboxError as exc:
            raise CallFailed("worker_crashed", str(exc)) from None
        timeout = self.limits.timeout_s
        tool = request.tool
        try:
            # only a lone call spins: concurrent ones would take the GIL from each other
            spin = wait.spin and self.options.spin and self.supply.sole()
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
                # unknown, and a worker neither replaced nor checked in would jam the supply
                raise WorkerMisbehaved(
                    f"its answer could not be read ({type(exc).__name__}: {exc})"
                ) from exc
            finally:
                if wait.cancel is not None:
                    wait.cancel.detach()  # the call is over: a late cancel kills nothing
        except TimeoutError:
            self.supply.lost(worker)
            self.clean_after(worker.pid, request, wait)
            raise CallFailed(
                "timeout",
                f"{tool} did not finish within the {timeout:g} second limit; "
                "its worker was stopped.",
            ) from None
        except WorkerLost as exc:
            code = self.supply.lost(worker)
            if self.supply.closing():  # killed by the sandbox's close (^C to a server)
                raise CallFailed("worker_crashed", f"The sandbox was closed while {tool} "
                                 "ran; its worker was stopped.") from None
            cancelled = wait.cancel is not None and wait.cancel.cancelled  # killed by us
            if not cancelled and not isinstance(exc, WorkerMisbehaved):
                self.supply.died(code)
            self.clean_after(worker.pid, request, wait)
            raise CallFailed("worker_crashed", _crashed(worker.pid, tool, code, exc)) from None
        self.checkin(worker, _read_only_fs(answer))
        return answer

    def checkin(self, worker: Worker, stale: bool = False) -> None:
        """Back to the supply, or recycled (max calls, RSS cap, a view of the file
        system that may be out of date) without failing anyone."""
        worker.calls += 1
        worker.idle_since, worker.poked = time.monotonic(), False
        if stale:
            why = "after a read-only file system refused a change"
        elif worker.calls >= worker.max_calls:
            why = f"after {worker.calls} calls"
        elif worker.calls % RSS_CHECK_EVERY == 0 and (
            (rss := worker.rss_mb()) > self.options.max_worker_rss_mb
        ):
            why = f"at {rss:.0f} MiB of RSS"
        else:
            self.supply.give_back(worker)
            return
        code = self.supply.lost(worker)
        log.info("corral: worker %d recycled %s: %s", worker.pid, why, describe_exit(code, "gone"))

    def clean_after(self, pid: int, request: Runnable, wait: WaitPolicy) -> None:
        """Have a live worker remove the temp files a killed one may have left. A
        cleanup whose own worker dies is tried again (it writes nothing itself);
        it runs even when its call was cancelled."""
        if not isinstance(request, CallRequest | HistoryRequest):
            return
        cleanup = CleanupRequest.after(pid, request)
        for _ in range(CLEANUP_ATTEMPTS):
            try:
                self.run(cleanup, lambda wire: Removed.from_wire(wire, cleanup), wait.quiet())
                return
            except CallFailed:
                continue


def _read_only_fs(answer: object) -> bool:
    """Whether a file system refused a change as read-only (EROFS). The worker's
    mounts were copied when it was forked (a bind keeps the flags it was made
    with): one forked while the file system was read-only keeps refusing after
    it is remounted read-write, so it is recycled and the next call gets a fresh
    view. A worker that fakes the answer only has itself replaced."""
    error = answer.error if isinstance(answer, Answer) else None
    return (isinstance(error, dict) and error.get("code") == "read_only"
            and READ_ONLY_FS in str(error.get("message")))


def _crashed(pid: int, tool: str, code: int | None, exc: WorkerLost) -> str:
    """The error message of a call whose worker was lost, and its log line."""
    if code == -signal.SIGSYS:
        # the seccomp profile kills a worker only for a call corral never makes
        log.error(
            "corral: worker %d running %s was killed by SIGSYS: it attempted a system "
            "call the seccomp profile forbids outright (a compromised worker?); it was "
            "replaced", pid, tool, extra={"pid": pid, "tool": tool, "signal": "SIGSYS"},
        )
        what = "was killed by SIGSYS: it attempted a system call the sandbox forbids"
    else:
        what = (
            f"sent an invalid answer ({exc})" if isinstance(exc, WorkerMisbehaved)
            else f"stopped unexpectedly ({describe_exit(code, str(exc))})"
        )
        log.warning("corral: worker %d running %s %s; it was replaced", pid, tool, what,
                    extra={"pid": pid, "tool": tool})
    return f"The worker running {tool} {what}; the pool replaced it."


def fork_worker(
    zygote: ZygoteHandle, options: SandboxOptions, setup: SandboxSetup | None = None,
    root_fds: Sequence[int] = (), jitter: bool = True,
) -> Worker:
    """Have the zygote fork one worker (for a shared pool's sandbox: its `setup` and
    root fds). jitter: recycle it up to RECYCLE_JITTER later than max_calls_per_worker."""
    pid, sock, pidfd = zygote.spawn(setup, root_fds)
    limit = options.max_calls_per_worker
    # os.urandom, not random: that module costs `corral call` ~1.4 ms of CPU to import
    # (it loads hashlib and seeds a generator) for one number a worker
    spread = int(limit * RECYCLE_JITTER) + 1
    extra = int.from_bytes(os.urandom(4), "little") % spread if jitter else 0
    return Worker(pid, sock, pidfd, limit + extra, born=time.monotonic())


def check_boot(
    worker: Worker, max_bytes: int, confinement: dict[str, Any],
    kill: Callable[[Worker], int | None], halt: Callable[[str], None],
    died: Callable[[int | None], None],
) -> bool:
    """Read a new worker's report: True if it came up confined as `confinement` (any
    way, if that is still empty). Otherwise `kill` kills and reaps it, `halt` fails
    its supply closed with the worker's decoded exit, and False; BootKilled instead
    if something outside SIGKILLed it before it reported (the OOM killer, an
    operator): not its own failure. A worker that ended before it reported is told
    to `died` (Supply.died) either way: a SIGSYS while it starts is one too."""
    report = worker.boot(max_bytes)
    if worker.layers is None:
        ended_alone = report is None and not worker.looks_alive()
        if report is not None and report.confine_error:
            worker.ended_within(CONFINE_FAILED_EXIT_S)  # its exit code, not our SIGKILL
        code = kill(worker)
        if ended_alone:
            died(code)
        ended = describe_exit(code, "it sent no report")
        if report is not None and report.confine_error:
            halt(f"a worker could not confine itself: {report.confine_error} ({ended})")
        elif code == EXIT_CONFINE_FAILED:
            halt(f"a worker could not confine itself ({ended})")
        elif ended_alone and code == -signal.SIGKILL:
            log.warning("corral: worker %d was %s while starting, before it reported",
                        worker.pid, ended)
            raise BootKilled(ended)
        else:
            halt(f"a worker did not start ({ended})")
        return False
    if confinement and worker.layers != confinement:
        code = kill(worker)
        halt(f"a worker came up confined differently ({worker.layers}; "
             f"{describe_exit(code, 'gone')})")
        return False
    return True


def halt_if_unconfined(code: int | None, halt: Callable[[str], None]) -> None:
    """A worker that ended with EXIT_CONFINE_FAILED halts its supply: one that
    respawned would either loop forever or, worse, serve unconfined."""
    if code == EXIT_CONFINE_FAILED:
        halt(f"a worker could not confine itself ({describe_exit(code, '')})")


def log_halt(reason: str) -> None:
    log.error("corral: a sandbox halted, failing closed: %s", reason)


def sweep_on(worker: Worker, max_bytes: int, timeout_s: float) -> int:
    """Remove the temp files of writers that died mid-write unseen (a killed host's
    workers die with it): `worker` lists every temp file; the host keeps those whose
    writer's pid is alive now (another sandbox's worker on the same workspace), and
    the worker removes exactly the other names: a pid reused since the listing can
    only keep a file. Returns how many were removed; SWEEP_FAILURES if a request fails."""
    find = FindTemps(1)
    listed = TempList.from_wire(_exchange(worker, find, max_bytes, timeout_s), find)
    dead = tuple((index, path) for index, path, pid in listed.temps if not _alive(pid))
    if not dead:
        return 0
    remove = RemoveTemps(dead, 2)
    return Removed.from_wire(_exchange(worker, remove, max_bytes, timeout_s), remove).removed


def sweep_taken(supply: Supply, worker: Worker, max_bytes: int, timeout_s: float) -> int:
    """sweep_on, on `worker` taken from `supply`: given back if the sweep went well,
    else lost (and a death the host did not cause told, as a call's would be)."""
    try:
        removed = sweep_on(worker, max_bytes, timeout_s)
    except WorkerLost as exc:  # it died under the sweep: of something outside, unless
        code = supply.lost(worker)  # it misbehaved (then the host killed it)
        if not isinstance(exc, WorkerMisbehaved):
            supply.died(code)
        return 0
    except SWEEP_FAILURES:
        supply.lost(worker)
        return 0
    supply.give_back(worker)
    return removed


def _exchange(
    worker: Worker, request: FindTemps | RemoveTemps, max_bytes: int, timeout_s: float,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    return worker.exchange(encode(request.to_wire(), max_bytes), deadline, max_bytes, PLAIN)


def _alive(pid: int) -> bool:
    """A process that can still write: a zombie (dead, not yet reaped) cannot."""
    import psutil  # here, as in Worker.rss_mb

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: keep its file


def note_death(observer: Observer | None, code: int | None) -> None:
    """Tell `observer` how a worker the host did not kill ended (Observer.on_worker_death)."""
    if observer is None:
        return
    if code is None:
        how = "unknown"
    elif code >= 0:
        how = "exit"
    else:
        try:
            how = signal.Signals(-code).name
        except ValueError:  # a real-time signal: a label of its own each would be unbounded
            how = "unknown"
    observer.on_worker_death(how)


def describe_exit(code: int | None, fallback: str) -> str:
    if code is None:
        return fallback
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
