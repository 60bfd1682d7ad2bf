"""confine(): the layers a worker applies to itself before it serves. Hazmat:
every step is irreversible for the calling process.

Order: close inherited fds, rlimits, the mount namespace (it needs the privilege
the next steps give up), no_new_privs, capabilities, Landlock, seccomp last (so the
earlier steps may still use the calls it denies). Whatever needs a file (the
seccomp profile, the syscall tables) is read first, before anything is closed.
Best effort by kernel: a layer the kernel lacks is reported as absent; a layer
the kernel offers that fails to apply raises ConfinementError (fail closed).
"""

from __future__ import annotations

import errno
import os
import resource
import signal
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from corral import _prctl, seccomp
from corral.config import Limits
from corral.sandbox import _caps, _landlock, _mountns

# Address space: the interpreter with everything a worker imports (~100 MiB
# measured), malloc's 128 MiB per-thread arena reservations and thread stacks ...
ADDRESS_SPACE_BASE = 1 << 30
# ... plus this many copies of the largest file: bytes, the decoded str (up to 4
# bytes a character), lines, results. Measured: reading and grepping a 64 MiB file
# peaks at ~410 MiB, well under 1 GiB + 16 x 64 MiB.
FILE_COPIES_IN_MEMORY = 16
# The file size cap never goes below this: a history record (a small JSON file) must
# fit even when max_file_bytes is set tiny; the fs layer enforces max_file_bytes itself.
MIN_FILE_SIZE_LIMIT = 64 * 1024
MAX_OPEN_FILES = 1024  # roots, the pipe, a few per call, and a directory walk's depth
# The capabilities a worker keeps when the host has them (a root host), so its file
# calls behave as the host's own would within the roots: DAC_OVERRIDE reads, writes
# and searches whatever the mode bits say; FOWNER renames and deletes in sticky
# directories and fchmods (without set-id bits) a file another user owns. All else
# goes, from every set: DAC_READ_SEARCH (DAC_OVERRIDE covers our reads; alone it
# would only add open_by_handle_at), CHOWN and FSETID (no chown; set-id bits are
# never kept), SYS_ADMIN (madvise's page poisoning, among much else), SETPCAP, ...
KEPT_CAPABILITIES = (_caps.CAP_DAC_OVERRIDE, _caps.CAP_FOWNER)
CAP_LIMIT = 64  # capability numbers fit the two 32-bit words capset(2) takes
_PROC_FDS = "/proc/self/fd"
_PROC_TASKS = "/proc/self/task"


class ConfinementError(RuntimeError):
    """A layer the kernel offers could not be applied: the worker must not serve."""


class RootLike(Protocol):
    path: str
    mode: str
    fd: int


RootList = Sequence[tuple[str, str]] | Sequence[RootLike]


def confine(roots: RootList, *, keep_fds: Iterable[int], limits: Limits) -> dict[str, Any]:
    """Confine this process to `roots` ((absolute path, "rw"|"ro") pairs, or open
    Roots, whose fds then name the directories, immune to renames of their paths).
    `keep_fds` must include the roots' fds and the worker's pipe; stdin, stdout and
    stderr not in it are pointed at /dev/null. Returns the layers applied."""
    _check_single_threaded()
    writable = any(_mode(root) == "rw" for root in roots)
    program = _compile_seccomp(writable) if seccomp.supported() else None
    abi = _landlock.abi_version()
    rules = [_rule(root, abi) for root in roots]
    _close_fds(set(keep_fds))
    _set_rlimits(limits)
    mount_namespace = _enter_mount_namespace(roots)
    _set_no_new_privs()
    _drop_capabilities()
    if abi:
        _apply_landlock(rules, abi)
    if program is not None:
        _apply_seccomp(program)
    return {
        "landlock_abi": abi,
        "seccomp": program is not None,
        "no_new_privs": True,
        "rlimits": True,
        "mount_namespace": mount_namespace,
    }


def prepare() -> None:
    """Do once, in the zygote, what every confine() would otherwise repeat: compile
    the seccomp profiles (with a writable root, and without) and ask for the
    Landlock ABI (all cached per process)."""
    if seccomp.supported():
        seccomp.compile_native(writable=True)
        seccomp.compile_native(writable=False)
    _landlock.abi_version()


def _compile_seccomp(writable: bool) -> bytes:
    """The worker profile; with no writable root, one refusing every change of mode
    or owner (Landlock governs none; without the mount namespace nothing else would
    stop an fchmod in a read-only root)."""
    try:
        return seccomp.compile_native(writable=writable)
    except (seccomp.ProfileError, seccomp.SeccompError) as exc:
        raise ConfinementError(f"the seccomp profile does not compile: {exc}") from exc


def _check_single_threaded() -> None:
    """Landlock and no_new_privs bind the calling thread only: another thread would
    stay free (and could race the steps), so refuse."""
    threads = len(os.listdir(_PROC_TASKS))
    if threads != 1:
        raise ConfinementError(f"confine() needs a single-threaded process; this one has {threads}")


def _mode(root: tuple[str, str] | RootLike) -> str:
    return root[1] if isinstance(root, tuple) else root.mode


def _rule(root: tuple[str, str] | RootLike, abi: int) -> tuple[str, _landlock.FSAccess]:
    if isinstance(root, tuple):
        path, mode = root
        if not os.path.isabs(path):
            raise ConfinementError(f"root {path!r} is not an absolute path")
    else:
        # the magic link names the very directory the worker holds open
        path, mode = f"{_PROC_FDS}/{root.fd}", root.mode
    if mode not in ("rw", "ro", "store"):
        raise ConfinementError(f"root mode must be 'rw' or 'ro', not {mode!r}")
    rights = {"rw": _landlock.READ_WRITE, "ro": _landlock.READ, "store": _landlock.STORE}[mode]
    return path, (rights & _landlock.handled_fs()) if abi else rights


def _close_fds(keep: set[int]) -> None:
    """Only the kept fds survive; 0-2 are kept open on /dev/null so a stray print or
    warning can never land in a workspace file that reused their number."""
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for fd in (0, 1, 2):
        if fd not in keep and fd != devnull:
            os.dup2(devnull, fd, inheritable=False)
    close_fds_but(keep)


def close_fds_but(keep: set[int]) -> None:
    """Close every open fd above 2 that is not in `keep`: the ones listed open, not
    a range (without close_range, Linux before 5.9 or a libc before 2.34,
    os.closerange would call close() once per possible fd number)."""
    for name in os.listdir(_PROC_FDS):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:  # the listing's own fd, closed already
                    raise ConfinementError(f"closing fd {fd} failed: {exc}") from exc


def rlimits(limits: Limits) -> dict[int, int]:
    """The limits a worker runs under (soft = hard, so it cannot raise them)."""
    return {
        # a write past the largest file allowed fails with EFBIG (SIGXFSZ is ignored)
        resource.RLIMIT_FSIZE: max(limits.max_file_bytes, MIN_FILE_SIZE_LIMIT),
        resource.RLIMIT_NOFILE: MAX_OPEN_FILES,
        resource.RLIMIT_AS: ADDRESS_SPACE_BASE + FILE_COPIES_IN_MEMORY * limits.max_file_bytes,
        resource.RLIMIT_CORE: 0,  # a crash must not write the worker's memory to disk
    }


def _set_rlimits(limits: Limits) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        for which, value in rlimits(limits).items():
            _, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))
    except (OSError, ValueError) as exc:
        raise ConfinementError(f"setting resource limits failed: {exc}") from exc


def _enter_mount_namespace(roots: RootList) -> bool:
    """Best effort: False where the kernel allows no namespace (not root, and no
    unprivileged user namespaces); a namespace begun and not finished fails closed."""
    # a directory known only by its fd (the history store) is bound at its real path
    bound: list[tuple[str, int | None]] = []
    read_only: set[str] = set()
    for root in roots:
        path, fd = ((root[0], None) if isinstance(root, tuple)
                    else (root.path or os.readlink(f"{_PROC_FDS}/{root.fd}"), root.fd))
        bound.append((path, fd))
        if _mode(root) == "ro":
            read_only.add(path)
    try:
        return _mountns.enter(bound, read_only)
    except OSError as exc:
        raise ConfinementError(f"building the mount namespace failed: {exc}") from exc


def _set_no_new_privs() -> None:
    try:
        _prctl.set_no_new_privs()
    except OSError as exc:
        raise ConfinementError(f"no_new_privs failed: {exc.strerror}") from exc


def _drop_capabilities() -> None:
    """Bounding set (when allowed to: it takes CAP_SETPCAP), ambient, then the
    effective, permitted and inheritable sets down to KEPT_CAPABILITIES."""
    keep = sum(1 << cap for cap in KEPT_CAPABILITIES)
    try:
        held = _caps.current()
        if held.effective & (1 << _caps.CAP_SETPCAP):
            for cap in _known_capabilities():
                if not keep & (1 << cap) and _prctl.in_bounding_set(cap):
                    _prctl.drop_from_bounding_set(cap)
        _prctl.clear_ambient_capabilities()
        _caps.apply(_caps.CapSets(held.effective & keep, held.permitted & keep, 0))
    except OSError as exc:
        raise ConfinementError(f"dropping capabilities failed: {exc.strerror}") from exc


def _known_capabilities() -> range:
    """0..the kernel's last capability (PR_CAPBSET_READ refuses the first unknown)."""
    for cap in range(CAP_LIMIT):
        try:
            _prctl.in_bounding_set(cap)
        except OSError:
            return range(cap)
    return range(CAP_LIMIT)


def _apply_landlock(rules: list[tuple[str, _landlock.FSAccess]], abi: int) -> None:
    try:
        _landlock.restrict(rules, abi)
    except _landlock.ERRORS as exc:
        raise ConfinementError(f"Landlock (ABI {abi}) failed: {exc}") from exc


def _apply_seccomp(program: bytes) -> None:
    try:
        seccomp.install(program)
    except seccomp.SeccompError as exc:
        raise ConfinementError(str(exc)) from exc
