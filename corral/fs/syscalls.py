"""The bottom of corral/fs (hazmat): calls through a directory fd and a name, with
no Root and no guard. Root acts through them beneath its roots; the history store,
a directory outside every root, uses them as they are.

openat2 and renameat2 go through ctypes: they have no Python wrapper (both raise
OSError as the `os` functions do, and retry EINTR). The rest is `os` calls in
the order corral needs them: the open flags, a fresh temp name, a new file
written whole.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
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

DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC  # a root, a resolved directory
SUBDIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC  # a listed one

TEMP_PREFIX = ".corral-tmp-"
SETID = stat.S_ISUID | stat.S_ISGID  # not copied: new content is not what was made set-id

# Puts a finished temp file in place: (dir_fd, temp name, target name, rename flags).
# The default renames; a history keeper records what it replaces and renames itself.
Land = Callable[[int, str, str, int], None]


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


def rename_into_place(dir_fd: int, tmp: str, name: str, flags: int) -> None:
    renameat2(dir_fd, tmp, dir_fd, name, flags)


def temp_name() -> str:
    """A name no other writer picks: TEMP_PREFIX + "<pid>-<random>" (the pid tells a
    cleanup whose it is)."""
    return f"{TEMP_PREFIX}{os.getpid()}-{os.urandom(8).hex()}"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_new(
    dir_fd: int, name: str, data: bytes, *, perms: int = 0o666, mode: int | None = None,
    sync: bool = False,
) -> None:
    """A new file `name` in `dir_fd` holding `data`, created with `perms` (umask
    applies), then given `mode` (set-id bits dropped) if one is given. O_EXCL and
    O_NOFOLLOW: an existing name (a symlink planted there included) is never opened,
    and never removed: it may be another's. Removed again if writing fails."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 perms, dir_fd=dir_fd)
    try:
        write_all(fd, data)
        if mode is not None:
            os.fchmod(fd, mode & ~SETID)
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    os.close(fd)
