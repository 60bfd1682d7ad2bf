"""The store's bounds: what it holds (every record and checkpoint with its blobs, in
any directory of the store), evicting the oldest until it is within `max_bytes`
and `max_age_days`, and the note a start reads instead of reading the store
through (`bounded`: the bytes held and when it was last read through). The
work directories' leftovers are leftovers.py's. The host runs these under the
store's lock.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from corral.history.records import ID_WIDTH, BadRecord, is_id
from corral.history.store import (
    BLOB,
    CHECKPOINT,
    DONE,
    KEPT,
    PENDING,
    RECORD,
    SPARE,
    TEMP,
    WORK,
    Store,
    id_time,
    read_small,
    remove_tree,
    write_new,
)

BOUND = "bounded"  # the bytes held, and when the store was last read through (write_bound)
BOUND_CLOCK_SLACK_S = 60.0  # a note's time may run this far ahead of the clock
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


@dataclass
class Usage:
    """The store's bytes: in all, by record or checkpoint id, and where each id's
    files are ((work directory or "", name)); `writing`: ids not yet committed;
    `spares`: the spare files found (work directory, name)."""

    total: int = 0
    sizes: dict[str, int] = field(default_factory=dict)
    files: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    writing: set[str] = field(default_factory=set)
    spares: list[tuple[str, str]] = field(default_factory=list)




def usage_of(store: Store) -> Usage:
    """What every record and checkpoint holds, with its blobs (in any work
    directory): one read through the store."""
    usage = Usage()
    for where, name, size in _kept(store, usage.writing, usage.spares):
        key = name[2:2 + ID_WIDTH]
        usage.files.setdefault(key, []).append((where, name))
        usage.sizes[key] = usage.sizes.get(key, 0) + size
        usage.total += size
    return usage

def _kept(
    store: Store, writing: set[str], spares: list[tuple[str, str]],
) -> Iterator[tuple[str, str, int]]:
    """(work directory or "", name, bytes) of every file of the store that a record
    or checkpoint holds; adds to `writing` the ids of the records not yet committed
    (their blobs are among those yielded, but are no one's to evict), and to
    `spares` the spare files."""
    for where, fd in store.dirs():
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    name = entry.name
                    if where and name.endswith((PENDING, DONE)):
                        writing.add(name[2:2 + ID_WIDTH])
                    if where and name.startswith(SPARE):
                        spares.append((where, name))
                    if not name.startswith((RECORD, CHECKPOINT, BLOB)) or (
                        where.startswith(WORK) and not name.startswith(BLOB)
                    ):
                        continue
                    if where.startswith(KEPT) and not name.startswith(BLOB):
                        yield where, name, 0  # a mirror of the store's own file
                        continue
                    with contextlib.suppress(OSError):
                        st = entry.stat(follow_symlinks=False)
                        yield where, name, entry_size(fd, name, st)
        finally:
            if where:
                os.close(fd)

def evict(store: Store, max_bytes: int, max_age_s: float, keep_newest: int = 1) -> int:
    """Remove the oldest records and checkpoints (with their blobs) until the store
    is within max_bytes and nothing is older than max_age_s; the newest
    `keep_newest` stay whatever their size (the last change stays undoable).
    Returns the bytes now held."""
    usage = usage_of(store)
    for where, name in usage.spares:  # no one's: a writer without one makes a file
        with contextlib.suppress(OSError):
            _remove(store, where, name)
    total = usage.total
    now = time.time()
    horizon = now - max_age_s
    # a worker's blob dated in the future is no change's: not the newest to keep
    # (leftovers.py evicts it)
    ids = sorted(key for key in set(usage.sizes) - usage.writing
                 if not is_id(key) or id_time(key) <= now + BOUND_CLOCK_SLACK_S)
    for record_id in ids[: max(0, len(ids) - keep_newest)]:
        if total <= max_bytes and (not is_id(record_id) or id_time(record_id) >= horizon):
            break
        for where, name in usage.files[record_id]:
            with contextlib.suppress(OSError):
                _remove(store, where, name)
        total -= usage.sizes[record_id]
    return total

def _remove(store: Store, where: str, name: str) -> None:
    fd = os.open(where, _DIR_FLAGS, dir_fd=store.home) if where else store.home
    try:
        try:
            os.unlink(name, dir_fd=fd)
        except IsADirectoryError:
            remove_tree(fd, name)
    finally:
        if where:
            os.close(fd)


def read_bound(dir_fd: int) -> tuple[int, int] | None:
    """(bytes held, when bounded, in whole seconds) as write_bound left them; None if
    there is no such note or it is not one: two numbers in a small regular file
    (never followed; a FIFO or a directory is not one). A note from the future is
    none either: it would put off bounding the store for good."""
    try:
        data = read_small(dir_fd, BOUND)
    except (OSError, BadRecord):
        return None
    fields = (data or b"").split()
    if len(fields) != 2 or not all(f.isdigit() and len(f) <= 18 for f in fields):
        return None
    held, when = int(fields[0]), int(fields[1])
    return None if when > time.time() + BOUND_CLOCK_SLACK_S else (held, when)


def write_bound(dir_fd: int, held: int, when: int) -> None:
    """Note that the store holds `held` bytes and was last read through at `when`
    (the caller holds the store's lock): the note replaces the last one whole (a
    host killed here leaves a temp, which remove_temps clears)."""
    temp = f"{TEMP}{BOUND}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp, dir_fd=dir_fd)
    write_new(dir_fd, temp, f"{held} {when}\n".encode())
    os.replace(temp, BOUND, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)



def entry_size(dir_fd: int, name: str, st: os.stat_result) -> int:
    """Bytes a store entry holds; a directory blob (a moved-away tree) counts what is in it."""
    if not stat.S_ISDIR(st.st_mode):
        return st.st_blocks * 512 if st.st_nlink == 1 else st.st_size
    total = 0
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                total += entry_size(fd, entry.name, entry.stat(follow_symlinks=False))
    finally:
        os.close(fd)
    return total

