"""The seccomp syscalls (ctypes). Private: only corral.seccomp calls these."""

from __future__ import annotations

import ctypes
import errno

from corral._syscall import prctl, syscall
from corral.seccomp.arches import load_arch

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_GET_ACTION_AVAIL = 2
SECCOMP_FILTER_FLAG_TSYNC = 1  # every thread gets the filter, or none does
SECCOMP_RET_KILL_PROCESS = 0x8000_0000


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp(arch: str, operation: int, flags: int, arg: ctypes.c_void_p | int | None) -> int:
    nr = load_arch(arch).syscalls["seccomp"]
    return syscall(nr, ctypes.c_uint(operation), ctypes.c_uint(flags), arg)


def filters_available(arch: str) -> bool:
    """True if the kernel takes seccomp filters with the actions our filters return."""
    action = ctypes.c_uint32(SECCOMP_RET_KILL_PROCESS)
    try:
        _seccomp(arch, SECCOMP_GET_ACTION_AVAIL, 0, ctypes.cast(ctypes.byref(action),
                                                               ctypes.c_void_p))
    except OSError:
        return False
    return True


def load_filter(arch: str, program: bytes) -> None:
    """Install `program` (packed struct sock_filter[]) on every thread of this process."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    pointer = ctypes.cast(ctypes.byref(fprog), ctypes.c_void_p)
    try:
        stuck = _seccomp(arch, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, pointer)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
        # kernels before 3.17 have only the prctl form (and no TSYNC)
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, pointer)
        return
    if stuck:
        # TSYNC answers with the id of a thread it could not move to the filter
        raise OSError(errno.EBUSY, f"thread {stuck} could not take the seccomp filter")
