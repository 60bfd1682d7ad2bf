"""What the kernel offers, and what a confined process actually got: for
`corral doctor`, the pool's confinement report and the tests."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from typing import Any

from corral import _prctl, seccomp
from corral.fs import syscalls as fs_sys
from corral.sandbox import _landlock

# the directory holding this `corral` package: the child imports the same one
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE_TIMEOUT_S = 30.0  # an interpreter's start on a loaded machine, at worst
_LANDLOCK_PROBE = "/"  # never a root (system paths cannot be): readable only without Landlock


def probe() -> dict[str, Any]:
    """The layers this kernel offers: landlock_abi (0 = none), seccomp, openat2,
    no_new_privs, mount_namespace."""
    return {
        "landlock_abi": _landlock.abi_version(),
        "seccomp": seccomp.supported(),
        "openat2": openat2_available(),
        "no_new_privs": _no_new_privs_available(),
        "mount_namespace": mount_namespace_available(),
    }


def mount_namespace_available() -> bool:
    """True if a process like a worker may have a mount namespace (as root, or through
    an unprivileged user namespace)."""
    return mount_namespace_refusal() is None


def mount_namespace_refusal() -> str | None:
    """None if a process like a worker may have a mount namespace; else why not, as
    the kernel said it (e.g. "EPERM: Operation not permitted"). Asked of a fresh
    child, since entering one is irreversible and a fork of a threaded host is unsafe."""
    code = (
        f"import sys; sys.path[:] = {[_PACKAGE_PARENT, *sys.path]!r}\n"
        "import errno\n"
        "from corral.sandbox import _mountns\n"
        "try: _mountns.unshare_mounts()\n"
        "except OSError as exc:\n"
        "    print(errno.errorcode.get(exc.errno, exc.errno), exc.strerror, sep=': ')\n"
        "    sys.exit(1)"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code], env={}, check=False,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=PROBE_TIMEOUT_S)
    if done.returncode == 0:
        return None
    return done.stdout.strip() or f"the probe exited with status {done.returncode}"


def openat2_available() -> bool:
    try:
        fd = fs_sys.openat2(-100, "/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, 0)
    except OSError as exc:
        # ENOSYS: no such call; EPERM: a seccomp filter of ours (or a container's)
        return exc.errno not in (errno.ENOSYS, errno.EPERM)
    os.close(fd)
    return True


def _no_new_privs_available() -> bool:
    try:
        _prctl.no_new_privs()
    except OSError:
        return False
    return True


def observed(pid: int | None = None) -> dict[str, Any]:
    """What process `pid` (default: this one) runs under, from /proc/PID/status:
    no_new_privs, seccomp (filter mode), seccomp_filters; for this process also
    landlock, from a probe access (another process's Landlock domain is not visible).
    Inside a Landlock domain /proc is out of reach (in a worker's mount namespace it is
    absent but for /proc/self/fd), so this process then asks prctl."""
    try:
        report = _status(f"/proc/{pid or 'self'}/status")
    except (PermissionError, FileNotFoundError):
        if pid is not None:
            raise
        report = {
            "no_new_privs": _prctl.no_new_privs(),
            "seccomp": _prctl.seccomp_mode() == 2,
            "seccomp_filters": None,  # only /proc tells how many
        }
    if pid is None:
        report["landlock"] = landlock_enforced()
    return report


def landlock_enforced() -> bool:
    """True if this process is in a Landlock domain that hides `/`."""
    try:
        fd = os.open(_LANDLOCK_PROBE, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:
        return True
    os.close(fd)
    return False


def _status(path: str) -> dict[str, Any]:
    with open(path, encoding="ascii") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {
        "no_new_privs": fields.get("NoNewPrivs", "0").strip() == "1",
        "seccomp": fields.get("Seccomp", "0").strip() == "2",
        "seccomp_filters": int(fields.get("Seccomp_filters", "0").strip()),
    }
