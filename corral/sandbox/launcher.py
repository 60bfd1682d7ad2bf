"""The host's side of the zygote template (template.py): one template process per
host process, started by the first sandbox or earlier by warm(), asked to fork
each sandbox's zygote; it lives until the host exits. A zygote must start as an
exec'd one would have then: with the host's sys.path and the part of its
environment it passes on (the locale decides how the interpreter encodes file
names), so a host that changes either gets another template for the new ones.
"""

from __future__ import annotations

import _socket
import _thread
import atexit
import fcntl
import os
import sys
import time

# Only the cheapest modules above (C ones, no socket.py, subprocess or threading:
# ~10 ms of imports on a 2-core VM): `corral call` starts the template (warm) as
# soon as it runs, and everything else it imports after the spawn, beside the
# template's own start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping

# The fd the template finds its channel on.
CHANNEL_FD = 3
# The module whose prepare() the template runs once and whose main(fd) each zygote runs.
ZYGOTE_ENTRY = "corral.sandbox.zygote"
# The template's first answer comes after its imports: seconds on a loaded machine at worst.
START_TIMEOUT_S = 30.0
# stop() gives a template whose channel it closed this long to exit, then kills it.
STOP_GRACE_S = 5.0
# The directory that holds the `corral` package the host runs: the template imports the same one.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
# All the template (so every zygote and worker) gets of the host's environment: the
# locale, which decides how Python decodes and encodes file names and text, and what
# decides how the interpreter starts (PYTHONHOME: where its library is; PYTHONUTF8:
# UTF-8 mode). Nothing else: a worker runs no program, so PATH is moot, and API keys
# and tokens stay in the host. PYTHONPATH is not needed either: the template gets the
# host's sys.path verbatim.
ZYGOTE_ENVIRONMENT = ("LANG", "PYTHONHOME", "PYTHONUTF8")
ZYGOTE_ENVIRONMENT_PREFIX = "LC_"

_lock = _thread.allocate_lock()
# What a zygote's start depends on: its entry, environment and sys.path.
Key = tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]
_templates: dict[Key, Template] = {}


class TemplateGone(Exception):
    """The template's channel broke or ended: it exited (or never started)."""


class Template:
    """The host's handle on one template process."""

    def __init__(self, key: Key) -> None:
        entry, environment, path = key
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        # The template's end stays close-on-exec here (no other child a thread of the
        # host spawns meanwhile inherits it) and is above CHANNEL_FD, so that the
        # spawn's dup2 onto CHANNEL_FD makes an inheritable copy in the template alone.
        child_end = fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD_CLOEXEC, CHANNEL_FD + 1)
        theirs.close()
        # The death signal follows the thread that forked, not the process: only the
        # main thread lives as long as the host (on Linux, the thread whose id is the
        # process's). Elsewhere the template relies on its channel ending, which
        # happens however the host dies.
        main_thread = _thread.get_native_id() == os.getpid()
        # -S and the host's own sys.path: the same modules, without site's start-up cost;
        # no garbage collection until they are imported (template.main turns it back on)
        code = (
            f"import gc, sys; gc.disable(); sys.path[:] = {list(path)!r}; "
            f"from corral.sandbox.template import main; "
            f"main({CHANNEL_FD}, {entry!r}, {os.getpid()}, {main_thread})"
        )
        # posix_spawn, not subprocess (whose import alone is ~7 ms): the template gets
        # its channel, /dev/null for stdin and stdout (stdout may be a protocol) and
        # the host's stderr, or /dev/null if the host has none to pass on (else the
        # template's first fd would land on 2); template.main closes any other fd
        # the host left inheritable, as subprocess's close_fds would have.
        to_dev_null = [(0, os.O_RDONLY), (1, os.O_WRONLY)]
        if not _passed_on(2):
            to_dev_null.append((2, os.O_WRONLY))
        try:
            self.pid = os.posix_spawn(
                sys.executable, [sys.executable, "-S", "-c", code], dict(environment),
                file_actions=[
                    *((os.POSIX_SPAWN_OPEN, fd, os.devnull, flags, 0) for fd, flags in to_dev_null),
                    (os.POSIX_SPAWN_DUP2, child_end, CHANNEL_FD),
                ],
            )
        finally:
            os.close(child_end)
        # Held from the start: it names this process even once something else has
        # reaped it (a host's own SIGCHLD handler) and its pid is reused.
        self._pidfd = _pidfd_or_none(self.pid)
        import socket  # after the spawn, beside the template's start

        self._sock = socket.socket(fileno=ours.detach())
        self._sock.setblocking(False)
        self._lock = _thread.allocate_lock()
        self.owner = os.getpid()
        self.forked = 0  # zygotes it has forked: one that has is known to have started
        self.exited = False  # reaped (by us, or by something else)
        self.returncode: int | None = None  # its exit code, once we reaped it

    def fork_zygote(self, hello: bytes) -> tuple[int, socket.socket, int]:
        """A new zygote: (pid, its control socket, a pidfd for it), sent `hello` (its
        first frame, encoded). SandboxError if the template refuses; TemplateGone if
        its channel broke."""
        # here, not at the top: `corral call` starts the template (warm) before it
        # imports the rest of corral, so that the two interpreters import side by side
        import socket

        from corral.calls.control import ForkZygote, Reply
        from corral.calls.messages import Malformed
        from corral.errors import SandboxError
        from corral.sandbox.protocol import (
            CONTROL_FRAME_BYTES,
            ProtocolError,
            ask_with_fds,
            send_bytes,
        )

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        # Queued before the fork, the zygote reads its first frame as soon as it runs
        # instead of after the host has read the template's reply and been scheduled.
        unsent = hello[_write_some(ours, hello):]
        fds: list[int] = []
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            with self._lock:
                try:
                    wire, fds = ask_with_fds(
                        self._sock, ForkZygote().to_wire(), [theirs.fileno()], 1,
                        CONTROL_FRAME_BYTES, deadline,
                    )
                    reply = None if wire is None else Reply.from_wire(wire)
                except (ProtocolError, OSError, Malformed) as exc:  # TimeoutError included
                    # closed for good: a late reply would otherwise answer the next request
                    self._sock.close()
                    for fd in fds:
                        os.close(fd)
                    ours.close()
                    if isinstance(exc, TimeoutError):
                        raise TemplateGone(f"did not answer within {START_TIMEOUT_S:g} s") from None
                    raise TemplateGone(f"broke its channel ({exc})") from None
        finally:
            theirs.close()
        if reply is None or reply.pid is None or len(fds) != 1:
            ours.close()
            for fd in fds:
                os.close(fd)
            if reply is not None and reply.error is not None:
                raise SandboxError(f"The sandbox could not start: {reply.error}.")
            raise TemplateGone("broke its channel (it ended)")
        self.forked += 1
        try:
            send_bytes(ours.fileno(), unsent, deadline)  # what the buffer did not take
        except OSError as exc:  # TimeoutError included: the zygote read nothing
            ours.close()
            os.close(fds[0])
            raise SandboxError(f"The sandbox could not start: the zygote broke its "
                               f"channel: {exc}.") from None
        return reply.pid, ours, fds[0]

    def release(self) -> None:
        """End the channel, and so the template (not its zygotes), without waiting:
        it exits alone, and init reaps it once the host is gone."""
        self._sock.close()

    def stop(self) -> None:
        """End the channel; the template exits (its zygotes live on). One that never
        forked a zygote is killed: it may still be importing (a command that failed
        before its sandbox started), and has nothing to take down."""
        self._sock.close()
        try:
            if self.owner != os.getpid():
                return  # a forked host's copy: the process is its parent's to wait for
            if not self.forked or not wait_for_exit(self.pid, STOP_GRACE_S, self._pidfd):
                self._kill()
            if not self.exited:
                self._reap(0)
        finally:
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None

    def poll(self) -> int | None:
        """The template's exit code (as os.waitstatus_to_exitcode gives it) once it
        has exited; None while it runs, or if something else reaped it."""
        if not self.exited:
            self._reap(os.WNOHANG)
        return self.returncode

    def _kill(self) -> None:
        import contextlib
        import signal

        if self._pidfd is not None:  # this very process, whoever reaped it
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        elif self.poll() is None and not self.exited:  # unreaped: the pid is still ours
            os.kill(self.pid, signal.SIGKILL)

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped by something else: gone, its code unknown
            self.exited = True
            return
        if pid:
            self.exited = True
            self.returncode = os.waitstatus_to_exitcode(status)


def warm(entry: str = ZYGOTE_ENTRY) -> None:
    """Start the template now without waiting for it, so its start overlaps whatever
    the host does before its first sandbox (`corral call` importing corral). Public
    as corral.prestart()."""
    with _lock:
        _running(_key(entry))


def launch_zygote(entry: str, hello: bytes) -> tuple[int, socket.socket, int]:
    """Fork a zygote from the template for `entry`: (pid, control socket, pidfd),
    sent `hello` (its first frame, encoded). A template that served before and has
    died since is replaced, once."""
    from corral.errors import SandboxError

    key = _key(entry)
    with _lock:
        template = _running(key)
    try:
        return template.fork_zygote(hello)
    except TemplateGone as exc:
        if not template.forked:
            code = template.poll()
            _drop(key, template)  # the next sandbox tries a fresh one, not this channel
            how = f"exited with code {code}" if code is not None else str(exc)
            raise SandboxError(f"The sandbox could not start: the zygote template {how}.") from None
    _drop(key, template)  # it served before and has died since: replaced, once
    with _lock:
        template = _running(key)
    try:
        return template.fork_zygote(hello)
    except TemplateGone as exc:
        _drop(key, template)
        raise SandboxError(f"The sandbox could not start: the zygote template {exc}.") from None


def _drop(key: Key, template: Template) -> None:
    """Forget a template whose channel failed, and stop it (killed if it never forked:
    it may be hung in its imports)."""
    with _lock:
        if _templates.get(key) is template:
            del _templates[key]
    template.stop()


def _key(entry: str) -> Key:
    """What a zygote for `entry` started now would start with."""
    environment = tuple(sorted(zygote_environment(os.environ).items()))
    # Not the host's working directory (sys.path[0] under `python -m` or -c): the
    # import system would cache its listing in the template, so in every worker,
    # and a server's working directory may hold its tenants' workspaces.
    here = ("", os.getcwd())
    return entry, environment, (PACKAGE_PARENT, *(p for p in sys.path if p not in here))


def _running(key: Key) -> Template:
    """The template for `key`, started if there is none (or only a forked host's
    copy of its parent's); caller holds _lock."""
    template = _templates.get(key)
    if template is None or template.owner != os.getpid():
        if template is not None:
            template.stop()
        template = _templates[key] = Template(key)
    return template


def _write_some(sock: socket.socket, data: bytes) -> int:
    """Write what a non-blocking socket's buffer takes now; how many bytes."""
    try:
        return os.write(sock.fileno(), data)
    except BlockingIOError:
        return 0


def template_pids() -> list[int]:
    """The pids of this host's running templates (for doctor and tests)."""
    with _lock:
        return sorted(t.pid for t in _templates.values() if t.owner == os.getpid())


def _stop_all() -> None:
    """Stop every template and wait for each to exit."""
    with _lock:
        while _templates:
            _templates.popitem()[1].stop()


@atexit.register
def _release_all() -> None:
    """At the host's exit: end each template's channel and wait for none of them (a
    `corral call` would wait for another process to be scheduled). Each exits when
    it reads the end, or at once by its death signal; then init reaps it."""
    with _lock:
        for template in _templates.values():
            template.release()


def wait_for_exit(pid: int, timeout: float, pidfd: int | None = None) -> bool:
    """Block until our child `pid` (whose pidfd the caller may hold) exits or
    `timeout` passes (True if it exited), without reaping it, woken by its pidfd
    rather than by polling with sleeps. A kernel without pidfd_open (before Linux
    5.3) is asked every 10 ms."""
    import select

    fd = _pidfd_or_none(pid) if pidfd is None else pidfd
    if fd is None:
        return _wait_without_pidfd(pid, timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)  # readable once the process has exited
        return bool(poller.poll(timeout * 1000))
    finally:
        if pidfd is None:  # ours, not the caller's
            os.close(fd)


def _wait_without_pidfd(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped already (by us or something else)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def _pidfd_or_none(pid: int) -> int | None:
    """A pidfd for our child `pid`, or None if it is reaped already or the kernel
    has no pidfd_open (before Linux 5.3)."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _passed_on(fd: int) -> bool:
    """Whether `fd` is open and reaches an exec'd child (a host that closed its
    stderr may have reused 2 for one of its own, close-on-exec, fds)."""
    try:
        return os.get_inheritable(fd)
    except OSError:
        return False


def zygote_environment(host: Mapping[str, str]) -> dict[str, str]:
    """The part of the host's environment the template starts with (ZYGOTE_ENVIRONMENT)."""
    return {
        name: value for name, value in host.items()
        if name in ZYGOTE_ENVIRONMENT or name.startswith(ZYGOTE_ENVIRONMENT_PREFIX)
    }
