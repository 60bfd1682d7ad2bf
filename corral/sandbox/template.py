"""The zygote template: one fresh interpreter per host process (exec'd by the
launcher, never forked from the threaded host) that imports what a zygote and
its workers need and compiles what they share (the seccomp profiles), once; then
each sandbox's zygote is a fork of it. A zygote so starts in a millisecond or
two instead of an interpreter's start and import (~100 ms), and is the same
clean, single-threaded process an exec'd one would be.

Control channel (a Unix socket pair with the host's launcher): {"op": "zygote"}
with one fd attached, the new zygote's control socket -> {"pid"} with fds
[pidfd], or {"error"} if the shared preparation failed. Anything else, or end of
stream, stops the template; its zygotes outlive it (each goes when its own
channel with the host ends), so a template killed from outside takes no
sandbox with it: the host starts another for the next zygote.

Run as: python -c "from corral.sandbox.template import main; main(FD, ENTRY, PID, PDEATHSIG)",
where ENTRY names a module with prepare() (run once, here) and main(fd) (a
zygote's body, run in each fork).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import selectors
import signal
import socket
import sys
from collections.abc import Callable

from corral._prctl import set_parent_death_signal
from corral.calls.control import ForkZygote, Reply
from corral.sandbox.confine import close_fds_but
from corral.sandbox.protocol import (
    CONTROL_FRAME_BYTES,
    ProtocolError,
    recv_frame_with_fds,
    send_frame_with_fds,
    write_frame,
)


def main(control_fd: int, entry: str, host_pid: int, pdeathsig: bool) -> None:
    """Entry point of the exec'd interpreter. pdeathsig: die with the host's thread
    that started it (only its main thread lives as long as the host)."""
    # Any fd the host left inheritable beside this channel (a spawn passes them all):
    # none reaches a zygote or a worker.
    close_fds_but({control_fd})
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the host
    if pdeathsig:
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != host_pid:
            return
    module = importlib.import_module(entry)
    try:
        module.prepare()
        failed = None
    except Exception as exc:  # each zygote asked for says why, as an exec'd one would
        failed = str(exc)
    # What is loaded now is never garbage: the zygotes' and workers' collections
    # need not walk it, nor write to its pages (each write copies a page per process).
    # The collector was off while it loaded (imports allocate much and free little:
    # its passes cost ~10% of their CPU and found nothing).
    gc.freeze()
    gc.enable()
    Template(socket.socket(fileno=control_fd), module.main, failed).serve()
    os._exit(0)  # nothing to flush; the interpreter's teardown would only cost time


class Template:
    """The fork loop: fork a zygote per request, reap the dead."""

    def __init__(
        self, control: socket.socket, zygote: Callable[[int], None], failed: str | None,
    ) -> None:
        self.control = control
        self.zygote = zygote
        self.failed = failed
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()

    def serve(self) -> None:
        """Loop until the control channel ends (or says something else)."""
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # only wakes the selector
        signal.set_wakeup_fd(self.wake_w)
        self.selector.register(self.control, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in self.selector.select():
                if key.fd == self.wake_r:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 4096):
                            pass
                    reap()
                elif not self.accept():
                    return

    def accept(self) -> bool:
        """Serve one request; False when the channel has ended or was misused."""
        try:
            request, fds = recv_frame_with_fds(self.control, CONTROL_FRAME_BYTES, 1)
        except (ProtocolError, ConnectionError):
            return False
        if request != ForkZygote().to_wire() or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return False  # not our launcher talking: stop, never guess
        if self.failed is not None:
            os.close(fds[0])
            write_frame(self.control.fileno(), Reply(error=self.failed).to_wire(),
                        CONTROL_FRAME_BYTES)
            return True
        self.fork_zygote(fds[0])
        return True

    def fork_zygote(self, channel: int) -> None:
        """Fork a zygote on `channel`; hand the launcher a pidfd for it."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                self._forget_in_child()
                # No parent-death signal (a fork has none): the template is shared by
                # every sandbox of the host, so a zygote that died with it would take
                # every sandbox (every tenant of a server) down with one process. A
                # zygote goes when its own channel ends, however the host dies.
                self.zygote(channel)
                code = 0
            except BaseException:
                sys.excepthook(*sys.exc_info())
            finally:
                os._exit(code)
        os.close(channel)
        pidfd = os.pidfd_open(pid)  # race-free: the child cannot be reaped before we wait
        try:
            send_frame_with_fds(self.control, Reply(pid).to_wire(), [pidfd], CONTROL_FRAME_BYTES)
        finally:
            os.close(pidfd)

    def _forget_in_child(self) -> None:
        """In a new zygote: drop the template's signal wiring and fds."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        self.control.close()
        os.close(self.wake_r)
        os.close(self.wake_w)


def reap() -> None:
    """Collect every exited zygote without blocking (the host watches their pidfds)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
