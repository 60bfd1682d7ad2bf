"""The tree lock: an flock on each root directory that orders a directory move
against every call that adds a name beneath a root.

A directory move checks every entry beneath the directory, then renames it; a
name added meanwhile (a concurrent write of `tree/credentials` while `tree` is
being moved to `.aws`) would be renamed unchecked. So every change that adds
or renames a name holds the lock shared, from resolving its path to acting on
it, and a directory move holds it exclusively from its walk to its rename.

flock, not a lock file: nothing is created inside the roots, the lock is the
kernel's (a killed worker's goes with its fds) and it holds across processes
(every worker, and every Sandbox on the same directory, opens its own fd, so
each has its own open file description). It orders corral's own calls only:
other processes do not take it (see Root's docstring).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def held(root_fds: Sequence[tuple[tuple[int, int], int]], *, exclusive: bool) -> Iterator[int]:
    """Lock the root directories given as ((st_dev, st_ino), O_PATH fd), each once and
    in (dev, ino) order, so two calls locking the same two roots never wait on each
    other; yields the lock fd of the first root given (for _atomic's version lock)."""
    fds: dict[tuple[int, int], int] = {}
    try:
        for identity, root_fd in sorted(dict(root_fds).items()):
            fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
            fds[identity] = fd
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield fds[root_fds[0][0]]
    finally:
        for fd in fds.values():
            os.close(fd)
