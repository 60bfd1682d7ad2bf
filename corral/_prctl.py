"""prctl for confinement: set and read no_new_privs, read the seccomp mode, ask
for a parent-death signal, shrink the bounding and ambient capability sets.
Private plumbing (through corral/_syscall.py) for the sandbox's confine.py, probe.py,
zygote and workers, and for corral.seccomp."""

from __future__ import annotations

from corral._syscall import prctl

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_GET_SECCOMP = 21
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return int(prctl(option, arg2, arg3))


def set_no_new_privs() -> None:
    """Irreversible: execve can never again grant privileges (setuid bits, file caps)."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def no_new_privs() -> bool:
    return _prctl(PR_GET_NO_NEW_PRIVS) == 1


def seccomp_mode() -> int:
    """0 none, 1 strict, 2 filter (only answered while a filter lets prctl through)."""
    return _prctl(PR_GET_SECCOMP)


def set_parent_death_signal(signum: int) -> None:
    """The kernel sends `signum` when the thread that forked this process exits."""
    _prctl(PR_SET_PDEATHSIG, signum)


def dumpable() -> bool:
    """False after a change of credentials (setuid): /proc/self then belongs to root."""
    return _prctl(PR_GET_DUMPABLE) == 1


def in_bounding_set(cap: int) -> bool:
    """OSError EINVAL for a capability this kernel does not know."""
    return _prctl(PR_CAPBSET_READ, cap) == 1


def drop_from_bounding_set(cap: int) -> None:
    """Irreversible; needs CAP_SETPCAP."""
    _prctl(PR_CAPBSET_DROP, cap)


def clear_ambient_capabilities() -> None:
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
