"""The zygote: a fork of the zygote template (template.py: a fresh interpreter,
exec'd, never forked from the threaded host, that has preloaded everything a
worker needs) that opens the root fds once and forks confined workers on
request. Each worker's socket and a pidfd for it travel back to the broker
over SCM_RIGHTS.

Control channel (a Unix socket pair with the broker, frames of protocol.py,
messages of calls/control.py): the first frame is ZygoteStart (its setup null
for a shared pool's zygote, which never sees any sandbox's setup: it forks a
blank worker, and the host sends that worker its sandbox's setup and root fds
over the worker's own socket, so no worker inherits another sandbox's roots,
rules or options from the zygote's memory); then {"op": "spawn"} -> {"pid"} +
fds [socket, pidfd], and {"op": "wait", "pid"} -> {"pid", "code"} (the exit
code as os.waitstatus_to_exitcode gives it, None if unknown: the broker waits
for every worker it kills, so an evicted worker is reaped before the fork that
replaces it and the pool's process count never passes its bound). End of
stream on the channel means the broker closed or died: the zygote kills its
workers, reaps them and exits, as forkserver's "alive" pipe does.

The template runs prepare() once and main(FD) in each zygote it forks.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import sys

from corral._malloc import keep_freed_memory
from corral.calls.control import Reply, Spawn, Wait, ZygoteStart, control_from_wire
from corral.policy import Policy
from corral.sandbox import confine, worker
from corral.sandbox.protocol import (
    CONTROL_FRAME_BYTES,
    ProtocolError,
    read_frame,
    recv_frame_with_fds,
    send_frame_with_fds,
    widen_socket,
    write_frame,
)


def prepare() -> None:
    """Once, in the template every zygote is forked from (template.py): what each
    would otherwise repeat, inherited by every zygote and worker."""
    keep_freed_memory()  # for the workers: each answer reuses the last one's pages
    confine.prepare()  # the seccomp profiles compiled, the Landlock ABI asked
    # The built-in rules' regexes (~20 ms), compiled once per process and shared by
    # every policy that replaces none of them: most sandboxes' zygotes need no other.
    Policy().warm()


def main(control_fd: int) -> None:
    """A zygote's body, in a fork of the template (which set its death signal)."""
    control = socket.socket(fileno=control_fd)
    wire = read_frame(control_fd, CONTROL_FRAME_BYTES)
    if wire is None:
        return
    try:
        start = ZygoteStart.from_wire(wire)
        setup = None if start.setup is None else worker.Setup.open(
            start.setup, worker.built_policy(start.setup))
    except Exception as exc:  # Malformed, or roots that cannot be opened
        _reply(control_fd, Reply(error=str(exc)))
        return
    _reply(control_fd, Reply(os.getpid()))
    Zygote(control, setup).serve()
    # Every worker is reaped and the zygote has nothing to flush: exit now, not after
    # the interpreter tears down its modules (tens of ms a closing host waits for).
    os._exit(0)


def _reply(control_fd: int, reply: Reply) -> None:
    write_frame(control_fd, reply.to_wire(), CONTROL_FRAME_BYTES)


class Zygote:
    """The fork loop: accept a request, fork one worker, reap the dead."""

    def __init__(self, control: socket.socket, setup: worker.Setup | None) -> None:
        self.control = control
        self.setup = setup
        self.children: set[int] = set()
        self.exited: dict[int, int] = {}  # reaped, not yet asked for by the broker
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()

    def serve(self) -> None:
        """Loop until the control channel ends, then take every worker down with us."""
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # only wakes the selector
        signal.set_wakeup_fd(self.wake_w)
        self.selector.register(self.control, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        try:
            while True:
                for key, _ in self.selector.select():
                    if key.fd == self.wake_r:
                        self._drain_wakeups()
                        self.reap()
                    elif not self.accept():
                        return
        finally:
            self.stop_children()

    def accept(self) -> bool:
        """Serve one broker request; False when the channel has ended."""
        try:
            # none of its requests has fds attached: one that has is not our broker's
            request, _ = recv_frame_with_fds(self.control, CONTROL_FRAME_BYTES, 0)
        except (ProtocolError, ConnectionError):
            return False
        match None if request is None else control_from_wire(request):
            case Spawn():
                self.fork_one(self.setup)
            case Wait(pid=pid):
                _reply(self.control.fileno(), Reply(pid, self.wait(pid)))
            case _:
                return False  # the channel ended, or not our broker talking: stop, never guess
        return True

    def fork_one(self, setup: worker.Setup | None) -> None:
        """Fork a worker on a fresh socket pair (for a private pool's setup; None: a
        blank worker that reads its setup from the host); hand the broker its end
        and a pidfd."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for end in (ours, theirs):
            widen_socket(end)
        zygote_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                self._forget_in_child(ours)
                code = worker.run(theirs.fileno(), setup, zygote_pid=zygote_pid)
            except BaseException:
                sys.excepthook(*sys.exc_info())
            finally:
                os._exit(code)
        theirs.close()
        self.children.add(pid)
        pidfd = os.pidfd_open(pid)  # race-free: the child cannot be reaped before we wait
        try:
            send_frame_with_fds(
                self.control, Reply(pid).to_wire(), [ours.fileno(), pidfd], CONTROL_FRAME_BYTES
            )
        finally:
            ours.close()
            os.close(pidfd)

    def reap(self) -> None:
        """Collect every exited child without blocking; keep codes for the broker."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.exited[pid] = os.waitstatus_to_exitcode(status)

    def wait(self, pid: int) -> int | None:
        """Exit code of a worker the broker has killed (or saw end); blocks until it is gone."""
        if pid in self.exited:
            return self.exited.pop(pid)
        if pid not in self.children:
            return None
        _, status = os.waitpid(pid, 0)
        self.children.discard(pid)
        return os.waitstatus_to_exitcode(status)

    def stop_children(self) -> None:
        """SIGKILL and reap every worker, so none outlives the zygote."""
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.children.clear()

    def _forget_in_child(self, ours: socket.socket) -> None:
        """In a new worker: drop the zygote's signal wiring and every fd of its own."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        self.control.close()
        ours.close()
        os.close(self.wake_r)
        os.close(self.wake_w)

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_r, 4096):
                pass

