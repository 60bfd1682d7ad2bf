"""The history store of one workspace: a flat directory of small files, used
through a directory fd (a worker holds only that fd; the host opens the path).

    r-<id>.pending   a record written before its change lands
    r-<id>.json      the same record once the change has landed (committed)
    c-<id>.json      a checkpoint
    b-<id>-<n>       what the change replaced: the old inode itself (renamed in,
                     so an atomic write's old file is kept, not copied) or a copy

Ids sort in time order: nanoseconds, pid and a per-process counter, fixed-width
hex. A record is one JSON object {"id", "time", "tool", "pid", "entries":
[...], "undoes"?}; each entry names one path and its state before and after
(corral/history/states.py). Nothing here touches a workspace.

Files are written without fsync: the store survives a kill -9 of any process at
any instant (the kernel holds what was written); after a power loss the file
system's own ordering (ext4 data=ordered, xfs) keeps a record's data ahead of
the tree's later rename, but this is not forced.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from corral.config import ConfigError, Remedy
from corral.errors import CorralError
from corral.fs.version import content_version

RECORD, PENDING, CHECKPOINT, BLOB = "r-", ".pending", "c-", "b-"
_ID_WIDTH = 16 + 6 + 4  # hex: time_ns, pid, counter
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_COPY_CHUNK = 1 << 20
_counter_lock = threading.Lock()
_last = [0, 0]  # (time_ns of the last id, counter): ids of one process strictly increase


class StoreError(CorralError):
    """The store cannot be written: the call that needed a record fails, unchanged."""

    def __init__(self, exc: OSError | str) -> None:
        why = exc if isinstance(exc, str) else os.strerror(exc.errno or errno.EIO)
        super().__init__(
            "io_error", f"the history store cannot be written ({why}); nothing was changed."
        )


def blob_name(record_id: str) -> str:
    """Where a record keeps what its change replaced (one blob per record at most)."""
    return f"{BLOB}{record_id}-0"


def new_id() -> str:
    with _counter_lock:
        now = time.time_ns()
        if now <= _last[0]:
            now = _last[0]
            _last[1] = (_last[1] + 1) & 0xFFFF
        else:
            _last[1] = 0
        _last[0] = now
        return f"{now:016x}{os.getpid() & 0xFFFFFF:06x}{_last[1]:04x}"


def is_id(text: object) -> bool:
    return isinstance(text, str) and len(text) == _ID_WIDTH and all(
        c in "0123456789abcdef" for c in text
    )


def id_pid(record_id: str) -> int:
    """The pid of the process that made the id (its writer): known even when a
    crash left the record itself empty."""
    return int(record_id[16:22], 16)


def id_time(record_id: str) -> float:
    return int(record_id[:16], 16) / 1e9


def workspace_key(workspace: str) -> str:
    """The per-workspace subdirectory: a hash of the workspace's real path."""
    return content_version(os.fsencode(workspace))[:16]


def state_dir() -> str:
    """$XDG_STATE_HOME, else ~/.local/state (the XDG base directory spec)."""
    base = os.environ.get("XDG_STATE_HOME")
    if base and os.path.isabs(base):
        return base
    return os.path.join(os.path.expanduser("~"), ".local", "state")


def default_base() -> str:
    return os.path.join(state_dir(), "corral", "history")


def check_location(base: str | None, roots: list[str]) -> str:
    """The store's base directory (default: the state directory), real; ConfigError
    if it overlaps a root, where a tool could reach it. The fix must come from the
    operator, never from the workspace's own corral.toml."""
    base = os.path.realpath(base or default_base())
    for root in roots:
        if base == root or base.startswith(root.rstrip("/") + "/") or root.startswith(base + "/"):
            raise ConfigError(
                f"the history store {base} overlaps the root {root}, where tools could reach "
                "it; set [history] path to a directory outside every root, or [history] "
                "enabled = false", key="[history] path",
                remedy=Remedy("operator", ("[history] path", "[history] enabled")),
            )
    return base


def prepare(base: str | None, workspace: str, roots: list[str]) -> str:
    """Make (0700) and return the store directory of `workspace` under `base`
    (default: the state directory). Refused inside a root: a tool could reach it."""
    base = check_location(base, roots)
    path = os.path.join(base, workspace_key(workspace))
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        meta = os.path.join(path, "workspace")
        if not os.path.exists(meta):
            with open(meta, "w", encoding="utf-8") as handle:
                handle.write(workspace + "\n")
    except OSError as exc:
        raise CorralError(
            "io_error", f"the history store {path} cannot be created ({exc.strerror}); set "
            "[history] path to a writable directory outside every root, or enabled = false.",
        ) from None
    return path


@dataclass(frozen=True)
class Listing:
    """What the store holds, by name, each kind sorted oldest first."""

    records: list[str]  # committed ids
    pending: list[str]
    checkpoints: list[str]
    blobs: dict[str, list[str]]  # id -> its blob names


class Store:
    """The store directory behind `fd` (O_RDONLY|O_DIRECTORY). Reads raise OSError;
    writes that a change depends on raise StoreError."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, path: str) -> Store:
        try:
            return cls(os.open(path, _DIR_FLAGS))
        except OSError as exc:
            raise StoreError(exc) from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # -- writing ------------------------------------------------------------

    def _create(self, name: str, data: bytes) -> None:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600,
                         dir_fd=self.fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self.fd)
            raise StoreError(exc) from None

    def write_pending(self, record: dict[str, Any]) -> int:
        """Write a record before its change lands; the bytes it takes."""
        data = _dump(record)
        self._create(f"{RECORD}{record['id']}{PENDING}", data)
        return len(data)

    def commit(self, record_id: str) -> None:
        """The change landed. A failure here changes nothing the tree depends on: the
        record stays pending and is settled later."""
        with contextlib.suppress(OSError):
            os.rename(f"{RECORD}{record_id}{PENDING}", f"{RECORD}{record_id}.json",
                      src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def drop(self, record_id: str) -> None:
        """Forget a record whose change did not land, and its blobs."""
        for name in (f"{RECORD}{record_id}{PENDING}", f"{RECORD}{record_id}.json"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.fd)
        self.remove_blob(blob_name(record_id))

    def checkpoint(self, label: str | None) -> str:
        checkpoint = new_id()
        cp = {"id": checkpoint, "time": time.time(), "label": label}
        self._create(f"{CHECKPOINT}{checkpoint}.json", _dump(cp))
        return checkpoint

    def stash_copy(self, src_fd: int, blob: str) -> int:
        """Copy what `src_fd` holds (from its start) into a new blob; its size."""
        size = 0
        try:
            fd = os.open(blob, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600,
                         dir_fd=self.fd)
            try:
                offset = 0
                while chunk := os.pread(src_fd, _COPY_CHUNK, offset):
                    offset += len(chunk)
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
                size = offset
            finally:
                os.close(fd)
        except OSError as exc:
            self.remove_blob(blob)
            raise StoreError(exc) from None
        return size

    def stash_bytes(self, blob: str, data: bytes) -> None:
        self._create(blob, data)

    def remove_blob(self, blob: str) -> None:
        """A blob is a file, or (a directory taken away by a move) a directory tree."""
        try:
            os.unlink(blob, dir_fd=self.fd)
        except IsADirectoryError:
            _remove_tree(self.fd, blob)
        except FileNotFoundError:
            pass

    # -- reading ------------------------------------------------------------

    def listing(self) -> Listing:
        records, pending, checkpoints = [], [], []
        blobs: dict[str, list[str]] = {}
        with os.scandir(self.fd) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith(BLOB):
                    blobs.setdefault(name[2:2 + _ID_WIDTH], []).append(name)
                elif name.startswith(RECORD) and name.endswith(".json"):
                    records.append(name[2:-5])
                elif name.startswith(RECORD) and name.endswith(PENDING):
                    pending.append(name[2:-len(PENDING)])
                elif name.startswith(CHECKPOINT) and name.endswith(".json"):
                    checkpoints.append(name[2:-5])
        return Listing(sorted(records), sorted(pending), sorted(checkpoints), blobs)

    def record(self, record_id: str, *, pending: bool = False) -> dict[str, Any] | None:
        name = f"{RECORD}{record_id}{PENDING if pending else '.json'}"
        return self._load(name)

    def checkpoint_info(self, cp_id: str) -> dict[str, Any] | None:
        return self._load(f"{CHECKPOINT}{cp_id}.json")

    def _load(self, name: str) -> dict[str, Any] | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(fd)
        try:
            value = json.loads(b"".join(chunks))
        except ValueError:
            return None  # torn by a crash mid-create: it never described a change that landed
        return value if isinstance(value, dict) else None

    def records(self, newest_first: bool = True) -> Iterator[dict[str, Any]]:
        ids = self.listing().records
        for record_id in reversed(ids) if newest_first else ids:
            record = self.record(record_id)
            if record is not None:
                yield record

    def open_blob(self, blob: str) -> int:
        return os.open(blob, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                       dir_fd=self.fd)

    # -- bounds ---------------------------------------------------------------

    def usage(self) -> tuple[int, list[tuple[str, int]]]:
        """Total bytes, and (id, bytes) of every record and checkpoint, oldest first."""
        sizes: dict[str, int] = {}
        total = 0
        with os.scandir(self.fd) as entries:
            for entry in entries:
                if entry.name.startswith((RECORD, CHECKPOINT, BLOB)):
                    try:
                        size = _size(self.fd, entry.name, entry.stat(follow_symlinks=False))
                    except OSError:
                        continue
                    key = entry.name[2:2 + _ID_WIDTH]
                    sizes[key] = sizes.get(key, 0) + size
                    total += size
        return total, sorted(sizes.items())

    def evict(self, max_bytes: int, max_age_s: float, keep_newest: int = 1) -> int:
        """Remove the oldest records and checkpoints (with their blobs) until the store
        is within max_bytes and nothing is older than max_age_s; the newest
        `keep_newest` stay whatever their size (the last change stays undoable).
        Pending records are never evicted. Returns the bytes now held."""
        total, items = self.usage()
        listing = self.listing()
        pending = set(listing.pending)
        horizon = time.time() - max_age_s
        evictable = [(i, size) for i, size in items if i not in pending]
        for record_id, size in evictable[: max(0, len(evictable) - keep_newest)]:
            if total <= max_bytes and id_time(record_id) >= horizon:
                break
            for name in (f"{RECORD}{record_id}.json", f"{CHECKPOINT}{record_id}.json"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=self.fd)
            for blob in listing.blobs.get(record_id, ()):
                self.remove_blob(blob)
            total -= size
        return total


def _size(dir_fd: int, name: str, st: os.stat_result) -> int:
    """Bytes a store entry holds; a directory blob (a moved-away tree) counts what is in it."""
    if not stat.S_ISDIR(st.st_mode):
        return st.st_blocks * 512 if st.st_nlink == 1 else st.st_size
    total = 0
    fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                total += _size(fd, entry.name, entry.stat(follow_symlinks=False))
    finally:
        os.close(fd)
    return total


def _remove_tree(dir_fd: int, name: str) -> None:
    fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as entries:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for child, is_dir in children:
            if is_dir:
                _remove_tree(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
