"""The host's handles on its processes: a worker (Worker: its socket, pidfd and
call count; one request and its answer at a time) and the zygote (ZygoteHandle:
start it, ask it to fork or reap). As CPython's multiprocessing/popen_forkserver.py
is to its forkserver: the parent's side of one process, no pool logic. The only
fds held here are sockets to those processes and pidfds; nothing opens a
workspace path.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.calls.control import Reply, SandboxSetup, Spawn, Wait, ZygoteStart
from corral.calls.messages import BootReport, Malformed
from corral.calls.waiting import ANSWER_SPIN_S, NEXT_REQUEST_SPIN_S, SLOW_CALL_S, WaitPolicy
from corral.errors import SandboxError
from corral.sandbox.answers import decode_answer
from corral.sandbox.launcher import ZYGOTE_ENTRY, launch_zygote
from corral.sandbox.protocol import (
    CONTROL_FRAME_BYTES,
    POKE,
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
# The zygote's first answer comes after it opened the roots (and the template's, after
# its imports): seconds on a loaded machine at worst.
START_TIMEOUT_S = 30.0
# Later answers take a fork or a waitpid on a SIGKILLed worker (which may finish an fsync).
CONTROL_TIMEOUT_S = 30.0
# close() waits this long for the zygote to take its workers down, then kills it.
STOP_GRACE_S = 5.0


class WorkerLost(Exception):
    """A worker's socket ended in the middle of a call."""


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
        meanwhile: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Send one encoded request and read its answer frame; WorkerLost, TimeoutError.
        The answer is untrusted: one over max_bytes or, before it is decoded,
        max_values JSON values loses the worker (so does one the caller's
        messages.*.from_wire refuses). spin: poll for the answer first (calls/waiting.py).
        raw: a large answer's result and text may stay JSON text (decode_answer).
        meanwhile: the host's own work, done while the worker runs the request."""
        try:
            send_bytes(self.sock.fileno(), frame, deadline)
            if meanwhile is not None:
                meanwhile()
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


def describe_exit(code: int | None, fallback: str) -> str:
    if code is None:
        return fallback
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
