"""Keep freed heap memory for the next call instead of handing it back to the kernel.

Why: glibc gives the top of its heap back to the kernel once more than its trim
threshold is free (by default twice the largest block recently freed), and
serves a block over its mmap threshold with a fresh mapping. A process that
handles megabyte messages one after another (a worker answering a 1 MiB read,
the server passing that answer on) then faults every page of every message in
anew: ~2,200 minor faults per 1 MiB read in the host, about a quarter of the
call's time on a 2-core VM. With the heap kept, the same call faults no page.

The cost is resident memory: a process keeps, free for reuse, up to
TRIM_THRESHOLD_BYTES of the heap its largest messages needed. Only processes
corral owns call this (the zygote, so its workers inherit it, and the `corral
serve` command); a host that embeds corral keeps its own malloc settings.
mallopt is glibc's: on another libc this does nothing.
"""

from __future__ import annotations

import ctypes

from corral._syscall import LIBC

_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3
# Blocks up to this come from the heap, so they are reused (glibc's ceiling is 32 MiB).
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# A 4 MiB read (the hard ceiling) needs ~40 MiB at once across its copies.
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Set both thresholds; True when this libc took them."""
    mallopt = getattr(LIBC, "mallopt", None)
    if mallopt is None:
        return False
    took = [
        mallopt(ctypes.c_int(option), ctypes.c_int(value))
        for option, value in (
            (_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
            (_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
        )
    ]
    return all(result == 1 for result in took)
