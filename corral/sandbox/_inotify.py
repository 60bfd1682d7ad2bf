"""inotify(7), the three calls and the event layout (ctypes; Linux). Private plumbing
for snapshot_watch.py.

By hand: Python has no inotify binding, glibc has a wrapper for each of the three
calls, and the packages that wrap them (inotify_simple and others) would be a
runtime dependency of every worker for some twenty lines.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from corral._syscall import LIBC, call

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

# everything that changes a directory's entries or an entry's bytes, mode or times
CHANGES = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
           | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)
GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED  # the watched one itself

_HEAD = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
_BUFFER = 1 << 16

_init1 = LIBC.inotify_init1
_init1.argtypes, _init1.restype = [ctypes.c_int], ctypes.c_int
_add = LIBC.inotify_add_watch
_add.argtypes, _add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
_rm = LIBC.inotify_rm_watch
_rm.argtypes, _rm.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int


class Event(NamedTuple):
    wd: int
    mask: int


def init() -> int:
    """A new inotify fd, non-blocking, closed on exec."""
    return call(_init1, ctypes.c_int(IN_NONBLOCK | IN_CLOEXEC))


def add_watch(fd: int, dir_fd: int, mask: int) -> int:
    """A watch on the directory open as `dir_fd` (by its /proc/self/fd link: the
    call takes a path, and this one names the inode already open, with no lookup
    of the tree's names); its watch descriptor, the same for the same inode."""
    path = f"/proc/self/fd/{dir_fd}".encode()
    return call(_add, ctypes.c_int(fd), path, ctypes.c_uint32(mask | IN_ONLYDIR))


def rm_watch(fd: int, wd: int) -> None:
    call(_rm, ctypes.c_int(fd), ctypes.c_int(wd))


def events(fd: int) -> Iterator[Event]:
    """Every event queued now (the fd is non-blocking: none waits)."""
    while True:
        try:
            data = os.read(fd, _BUFFER)
        except BlockingIOError:
            return
        offset = 0
        while offset + _HEAD.size <= len(data):
            wd, mask, _, length = _HEAD.unpack_from(data, offset)
            offset += _HEAD.size + length
            yield Event(wd, mask)
