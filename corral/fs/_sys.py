"""Syscall leaves for corral/fs: openat2 and renameat2 through ctypes (hazmat).

Everything else the fs layer needs is in `os`; only these two have no Python
wrapper. Both raise OSError like the `os` functions do and retry EINTR.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Callable

from corral._syscall import LIBC

# Syscall numbers per machine (the generic table: x86_64 keeps its own for renameat2).
_NUMBERS = {
    "x86_64": {"openat2": 437, "renameat2": 316},
    "aarch64": {"openat2": 437, "renameat2": 276},
}
_NR = _NUMBERS.get(platform.machine(), {})

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
RENAME_NOREPLACE = 0x01
RENAME_EXCHANGE = 0x02  # swap two names atomically (history keeps the replaced inode)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_HOW_SIZE = ctypes.sizeof(_OpenHow)
_long, _int, _path = ctypes.c_long, ctypes.c_int, ctypes.c_char_p
# syscall(2) through fixed prototypes: every argument has its C type (no variadic
# guessing), and glibc's syscall() only moves registers, so this is safe.
_SYSCALL = ctypes.cast(LIBC.syscall, ctypes.c_void_p).value or 0  # libc has syscall()
_openat2 = ctypes.CFUNCTYPE(
    _long, _long, _int, _path, ctypes.POINTER(_OpenHow), ctypes.c_size_t, use_errno=True
)(_SYSCALL)
_renameat2 = ctypes.CFUNCTYPE(
    _long, _long, _int, _path, _int, _path, ctypes.c_uint, use_errno=True
)(_SYSCALL)


def _call(fn: Callable[..., int], *args: object) -> int:
    while True:
        result = fn(*args)
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
    return _call(_openat2, _NR["openat2"], dirfd, os.fsencode(path), how, _HOW_SIZE)


def renameat2(src_dirfd: int, src: str, dst_dirfd: int, dst: str, flags: int) -> None:
    if "renameat2" not in _NR:
        if flags:
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
        os.rename(src, dst, src_dir_fd=src_dirfd, dst_dir_fd=dst_dirfd)
        return
    _call(
        _renameat2, _NR["renameat2"], src_dirfd, os.fsencode(src), dst_dirfd,
        os.fsencode(dst), flags,
    )


def fd_path(fd: int) -> str:
    """The path the kernel records for an open fd (readlink, not a Landlock-covered access)."""
    return os.readlink(f"/proc/self/fd/{fd}")
