"""The plumbing under every system call corral makes by hand, through ctypes: one
libc handle, the errno check, syscall(2) and prctl(2).

Why by hand: Python's `os` has no openat2, renameat2, prctl, capget/capset,
unshare, mount, pivot_root, seccomp or landlock calls, and the few libraries that
wrap some of them bring more than the one call each needs (the `landlock`
package is used for its rules; see sandbox/_landlock.py). The domain wrappers
live beside their callers (fs/_sys.py, _prctl.py, sandbox/_caps.py, _mountns.py,
_landlock.py, seccomp/_kernel.py); this module is what they share.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

LIBC = ctypes.CDLL(None, use_errno=True)


def check(result: int) -> int:
    """`result` of a libc call, or OSError from errno when it is -1."""
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def call(function: Any, *args: Any) -> int:
    """A libc function with each argument already a ctypes value (no variadic
    guessing), errno cleared first so a stale one is never read."""
    ctypes.set_errno(0)
    return check(function(*args))


def syscall(nr: int, *args: Any) -> int:
    """syscall(2) for calls glibc has no wrapper for."""
    return call(LIBC.syscall, ctypes.c_long(nr), *args)


def prctl(option: int, *args: int | ctypes.c_void_p) -> int:
    """prctl(2); integer arguments pass as unsigned longs, the rest padded with 0."""
    typed = [ctypes.c_ulong(arg) if isinstance(arg, int) else arg for arg in args]
    typed += [ctypes.c_ulong(0)] * (4 - len(typed))
    return call(LIBC.prctl, ctypes.c_int(option), *typed)
