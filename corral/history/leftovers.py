"""What the work directories hold that no committed record does: pending and done
records waiting for their host, their kept copies, and anything else a worker
made there. Workers write it, so it is bounded like the rest of the store: when
the store is over its bound once every committed change that may go has gone,
the oldest of it goes too (anything that is not a store file first, then records
dated in the future, then by age), but never a pending record its writer still
holds (it is mid-call: its worker is bounded by its rlimits and timeout) nor one
made in the last GRACE_S seconds (a call's done record waits that long at most
for its host to commit it). The host runs this under the store's lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Iterator

from corral.history.bounds import entry_size
from corral.history.records import ID_WIDTH, is_id
from corral.history.store import (
    BLOB,
    CHECKPOINT,
    DONE,
    PENDING,
    RECORD,
    WORK,
    Store,
    id_time,
    remove_tree,
)

GRACE_S = 60.0
ENTRY_FLOOR = 4096  # what any entry costs, empty or not (its inode, its block)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


def evict(store: Store, total: int, max_bytes: int) -> int:
    """`total`: the bytes the store's committed changes hold (and the work
    directories' blobs, which it counted); returns the bytes held after evicting."""
    groups: dict[tuple[str, str], list[tuple[str, int]]] = {}  # (work, id) -> names, sizes
    counted = 0  # blobs of uncommitted records: in `total` already
    for where, fd in _works(store):
        try:
            for name, size in _entries(fd):
                key = _id_of(name)
                groups.setdefault((where, key), []).append((name, size))
                if name.startswith(BLOB):
                    counted += size
        finally:
            os.close(fd)
    extra = sum(size for names in groups.values() for _, size in names) - counted
    total += max(0, extra)
    if total <= max_bytes:
        return total
    now = time.time()
    for (where, key), names in sorted(groups.items(), key=lambda item: _order(item[0][1], now)):
        if total <= max_bytes:
            break
        if key and now - GRACE_S <= id_time(key) <= now:
            continue  # a call's, waiting for its host
        fd = os.open(where, _DIR_FLAGS, dir_fd=store.home)
        try:
            if any(name.endswith(PENDING) and _held(fd, name) for name, _ in names):
                continue  # its writer lives, mid-call
            for name, size in names:
                with contextlib.suppress(OSError):
                    _remove(fd, name)
                    total -= size
        finally:
            os.close(fd)
    return total


def _order(key: str, now: float) -> tuple[int, str]:
    """Not a store file first, then dated in the future, then oldest first."""
    if not key:
        return 0, ""
    return (1 if id_time(key) > now else 2), key


def _id_of(name: str) -> str:
    """The record id a work directory's file belongs to ("" for none of ours)."""
    key = name[2:2 + ID_WIDTH]
    if not is_id(key):
        return ""
    if name.startswith(BLOB) or (name.startswith((RECORD, CHECKPOINT)) and name.endswith(
            (PENDING, DONE))):
        return key
    return ""


def _works(store: Store) -> Iterator[tuple[str, int]]:
    with os.scandir(store.home) as entries:
        names = [entry.name for entry in entries if entry.name.startswith(WORK)]
    for name in names:
        with contextlib.suppress(OSError):
            yield name, os.open(name, _DIR_FLAGS, dir_fd=store.home)


def _entries(fd: int) -> Iterator[tuple[str, int]]:
    with os.scandir(fd) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                yield entry.name, max(ENTRY_FLOOR, entry_size(fd, entry.name, st))


def _held(fd: int, name: str) -> bool:
    try:
        record = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK,
                         dir_fd=fd)
    except OSError:
        return False
    try:
        fcntl.flock(record, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(record)  # (closing drops the lock it took)
    return False


def _remove(fd: int, name: str) -> None:
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        remove_tree(fd, name)
    else:
        os.unlink(name, dir_fd=fd)
