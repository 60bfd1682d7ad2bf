"""Read a live process's memory from outside, as a debugger would: every readable
region of /proc/PID/maps through /proc/PID/mem (the tests run as root)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

# The kernel's own mappings: reading [vvar] faults, and none holds a process's data.
SKIPPED = ("[vvar]", "[vvar_vclock]", "[vsyscall]")


def markers_in_memory(pid: int, markers: Iterable[str]) -> set[str]:
    """Which of `markers` (ASCII) appear anywhere in the readable memory of `pid`."""
    wanted = {marker: marker.encode() for marker in markers}
    found: set[str] = set()
    longest = max(len(needle) for needle in wanted.values())
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1] or (len(fields) > 5 and fields[5] in SKIPPED):
                continue
            start, end = (int(edge, 16) for edge in fields[0].split("-"))
            tail = b""
            for offset in range(start, end, 1 << 20):  # a MiB at a time: the heap can be large
                with contextlib.suppress(OSError):  # unmapped or unreadable since the listing
                    mem.seek(offset)
                    chunk = tail + mem.read(min(1 << 20, end - offset))
                    found |= {marker for marker, needle in wanted.items() if needle in chunk}
                    tail = chunk[-longest:]
    return found
