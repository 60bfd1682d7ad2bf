"""prctl(PR_SET_PDEATHSIG): the kernel signals a child when the thread that
forked it exits. The only syscall leaf of the zygote and workers."""

from __future__ import annotations

import ctypes
import os

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_libc = ctypes.CDLL(None, use_errno=True)


def set_parent_death_signal(signum: int) -> None:
    """Ask for `signum` when the parent thread exits; OSError if the kernel refuses."""
    if _libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signum), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
