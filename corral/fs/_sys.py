"""Syscall leaves for corral/fs: openat2 and renameat2 through ctypes (hazmat).

Everything else the fs layer needs is in `os`; only these two have no Python
wrapper. Both raise OSError like the `os` functions do and retry EINTR.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

# Syscall numbers per machine (the generic table: x86_64 keeps its own for renameat2).
_NUMBERS = {
    "x86_64": {"openat2": 437, "renameat2": 316},
    "aarch64": {"openat2": 437, "renameat2": 276},
}
_NR = _NUMBERS.get(platform.machine(), {})

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
RENAME_NOREPLACE = 0x01


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def _call(nr: int, *args: object) -> int:
    while True:
        result = _syscall(ctypes.c_long(nr), *args)
        if result >= 0:
            return int(result)
        err = ctypes.set_errno(0)  # read and clear: the landlock package trusts a stale errno
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err))


def openat2(dirfd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    """The new fd; ENOSYS where the kernel (or this machine's table) lacks openat2."""
    if "openat2" not in _NR:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    how = _OpenHow(flags, mode, resolve)
    return _call(
        _NR["openat2"],
        ctypes.c_long(dirfd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )


def renameat2(src_dirfd: int, src: str, dst_dirfd: int, dst: str, flags: int) -> None:
    if "renameat2" not in _NR:
        if flags:
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
        os.rename(src, dst, src_dir_fd=src_dirfd, dst_dir_fd=dst_dirfd)
        return
    _call(
        _NR["renameat2"],
        ctypes.c_long(src_dirfd),
        ctypes.c_char_p(os.fsencode(src)),
        ctypes.c_long(dst_dirfd),
        ctypes.c_char_p(os.fsencode(dst)),
        ctypes.c_uint(flags),
    )


def fd_path(fd: int) -> str:
    """The path the kernel records for an open fd (readlink, not a Landlock-covered access)."""
    return os.readlink(f"/proc/self/fd/{fd}")
