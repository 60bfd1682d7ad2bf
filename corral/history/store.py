"""The history store of one workspace, used through directory fds: its files, how
a record goes from pending to done to committed, and reading it back. Where the
store lies is location.py's; what it may hold, bounds.py's.

    <key>/                the workspace's store; only the host writes here
      workspace           which workspace this is (a line of text)
      bounded             the bytes held and when it was last read through (bounds.py)
      lock                the host's flock: promoting, settling, evicting, one at a time
      r-<id>.json         a committed record (records.py), written by the host only
      c-<id>.json         a checkpoint, likewise
      t-...               one of those two being written (renamed into place once whole)
      i-<root>.json       a whole-workspace rewind under way, or cut short (intent.py)
      w-<roots>/          the work directory of the sandboxes that may write exactly
                          these roots (a hash of their paths): their workers write here
        r-<id>.pending    a record written before its change lands, flocked by its writer
        r-<id>.done       the same record once the change has landed
        s-<pid>           a done record the host has committed, handed back to its
                          writer, which reuses the file for its next pending record
        c-<id>.done       a checkpoint a rewind made
        b-<id>-<n>        what the change replaced: the old inode itself (renamed in,
                          so an atomic write's old file is kept, not copied) or a copy
      k-<root>/           a root's kept directory (kept.py): the committed records naming
                          the root (links), checkpoints, and its changes' blobs, moved here
                          by the host at commit

A worker of a sandbox that may write holds its work directory (read and write, no
symlinks) and the kept directories of its roots (read only), never the store
itself; a sandbox that writes nothing gets none. The host promotes a finished
record (`.done`) into the store only after checking it (promote.py): its shape, its
time, its roots, and its blob, whose size and content hash the committed record then
carries, so a blob changed afterwards is refused when an undo reads it. A pending
record's writer holds an flock on it while it lives: the kernel drops it when the
process dies (a zombie holds none), so a pending record nobody holds is an orphan
for `settle`.

Ids sort in time order: nanoseconds, pid and a per-process counter, fixed-width
hex. Files are written without fsync: the store survives a kill -9 of any process
at any instant (the kernel holds what was written); after a power loss the file
system's own ordering (ext4 data=ordered, xfs) keeps a record's data ahead of the
tree's later rename, but this is not forced.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import stat
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from corral.errors import CorralError
from corral.fs import syscalls
from corral.fs.syscalls import RENAME_NOREPLACE, renameat2
from corral.fs.version import chunked_version, content_version
from corral.history.records import (
    ID_WIDTH,
    MAX_RECORD_BYTES,
    BadRecord,
    Checkpoint,
    Record,
    State,
    checkpoint_from_bytes,
    dump,
    dump_wire,
    is_id,
    record_from_bytes,
)

RECORD, PENDING, DONE, CHECKPOINT, BLOB, WORK = "r-", ".pending", ".done", "c-", "b-", "w-"
KEPT = "k-"  # a root's kept directory (kept.py): what a worker writing that root reads
TEMP = "t-"  # a committed record or checkpoint being written by the host
SPARE = "s-"  # a committed record's done file, for its writer to reuse (spare_name)
SPARE_BYTES = 64 * 1024  # a bigger spare is not reused: its padding would cost more
COMMITTED = ".json"
META, LOCK = "workspace", "lock"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
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


def blob_name(record_id: str, index: int = 0) -> str:
    """Where a record keeps what its change replaced: one blob per record, but a
    patch's, which keeps one per entry (`index`)."""
    return f"{BLOB}{record_id}-{index}"


def spare_name(record_id: str) -> str:
    """The spare file of the record's writer: named by the pid in its ids."""
    return f"{SPARE}{record_id[16:22]}"


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


def id_pid(record_id: str) -> int:
    """The pid of the process that made the id (its writer): known even when a
    crash left the record itself empty."""
    return int(record_id[16:22], 16)


def id_time(record_id: str) -> float:
    return int(record_id[:16], 16) / 1e9


def work_name(writable: list[str]) -> str:
    """The work directory of the sandboxes that may write exactly `writable`: what a
    record found there may name is what its writer could write anyway."""
    return WORK + content_version(os.fsencode("\0".join(sorted(writable))))[:16]


@functools.lru_cache(maxsize=256)  # every commit names its roots' (a hash each)
def kept_name(root: str) -> str:
    """The kept directory of the root whose real path is `root` (kept.py)."""
    return KEPT + content_version(os.fsencode(root))[:16]


class Listing(NamedTuple):
    """What the store holds, by name, each kind sorted oldest first."""

    records: list[str]  # committed ids
    checkpoints: list[str]


class Store:
    """A workspace's store (`home`: read-only to a worker) and one work directory
    (`fd`). Reads raise OSError; writes that a change depends on raise StoreError.
    A Store serves one call at a time (a worker's calls, or a host under its lock)."""

    def __init__(self, fd: int, home: int, kept: dict[str, int] | None = None) -> None:
        self.fd = fd
        self.home = home
        # A worker's: {name: fd} of its roots' kept directories (kept.py), which it reads
        # instead of the store itself (`home` is then -1: it holds no fd of it).
        self.kept = kept
        self._held: dict[str, int] = {}  # pending record id -> its fd, flocked

    @classmethod
    def open(cls, work: str, roots: list[str] | None = None) -> Store:
        """The store whose work directory is `work` (its parent is the store); with
        `roots`, a worker's: the kept directories of those roots instead of the store."""
        try:
            fd = os.open(work, _DIR_FLAGS)
        except OSError as exc:
            raise StoreError(exc) from None
        try:
            home = os.open("..", _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise StoreError(exc) from None
        if roots is None:
            return cls(fd, home)
        kept: dict[str, int] = {}
        try:
            for root in roots:  # the host makes them; a store made before did not
                with contextlib.suppress(FileExistsError):
                    os.mkdir(kept_name(root), 0o700, dir_fd=home)
                kept[kept_name(root)] = os.open(kept_name(root), _DIR_FLAGS, dir_fd=home)
        except OSError as exc:
            for opened in (fd, *kept.values()):
                os.close(opened)
            raise StoreError(exc) from None
        finally:
            os.close(home)
        return cls(fd, -1, kept)

    def close(self) -> None:
        self.release()
        for name in ("fd", "home"):
            if getattr(self, name) >= 0:
                os.close(getattr(self, name))
                setattr(self, name, -1)
        for fd in (self.kept or {}).values():
            os.close(fd)
        self.kept = None if self.kept is None else {}

    def mirrored(self, record_id: str, root: str) -> bool:
        """A worker's: the committed record is in the kept directory of `root` (the
        host mirrors an entry-less one into those of its writer's roots)."""
        fd = (self.kept or {}).get(kept_name(root))
        if fd is None:
            return False
        try:
            os.stat(f"{RECORD}{record_id}{COMMITTED}", dir_fd=fd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def _readable(self) -> list[int]:
        """Where committed records and checkpoints are read: the store, or a worker's
        kept directories (which mirror it for their roots)."""
        return [self.home] if self.kept is None else list(self.kept.values())

    # -- a worker's writing (the work directory) ------------------------------

    def _create(self, name: str, data: bytes) -> None:
        try:
            write_new(self.fd, name, data)
        except FileExistsError as exc:
            raise StoreError(exc) from None  # someone else's file: left alone
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self.fd)
            raise StoreError(exc) from None

    def write_pending(self, record: Record) -> int:
        """Write a record before its change lands (checked as the host will check
        it), and hold its flock until it is committed or dropped (the sign its
        writer lives); the bytes it takes."""
        wire = record.to_wire()
        Record.from_wire(wire)  # what the host will refuse is refused here first
        data = dump_wire(wire)
        if len(data) > MAX_RECORD_BYTES:  # the host would refuse it: nothing changes
            raise CorralError("too_large", f"the history record of this change would take "
                              f"{len(data)} bytes, over the {MAX_RECORD_BYTES} byte limit; "
                              "nothing was changed.")
        name = f"{RECORD}{record.id}{PENDING}"
        fd = self._reuse(spare_name(record.id), name, data)
        if fd >= 0:
            self._held[record.id] = fd
            return len(data)
        try:
            fd = os.open(name, _NEW_FLAGS, 0o600, dir_fd=self.fd)
        except OSError as exc:
            raise StoreError(exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink == 0:  # a settler took it for a dead writer's first
                raise StoreError("a record was removed as it was being written")
            syscalls.write_all(fd, data)
        except BaseException as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self.fd)
            if isinstance(exc, OSError):
                raise StoreError(exc) from None
            raise
        self._held[record.id] = fd
        return len(data)

    def _reuse(self, spare: str, name: str, data: bytes) -> int:
        """The writer's spare file (the last record the host committed) holding `data`,
        renamed to `name` and locked; -1 if there is none fit to reuse (then a new
        file is made). A file created on this VM's ext4 costs 5-30x this (0.1-0.7 ms
        of CPU under load, most of a small write's), and every change makes one.
        The record is written over the old one before the rename, so a kill leaves
        either the spare or the whole record; what is left of a longer old record
        becomes spaces, which JSON allows after a value (truncating instead costs
        more than the create: ext4 frees the blocks, and flushes such a file at its
        close). Locked before it takes its pending name, so no settle can take it
        for an orphan's; one someone holds is not a spare (never waited for)."""
        try:
            fd = os.open(spare, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK,
                         dir_fd=self.fd)
        except OSError:
            return -1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            st = os.fstat(fd)
            # not ours to reuse: another link to it, not a file, or one too big to pad
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > SPARE_BYTES:
                raise OSError(errno.EINVAL, "not a spare")
            whole = data + b" " * (st.st_size - len(data))
            if os.pwrite(fd, whole, 0) != len(whole):
                raise OSError(errno.EIO, "a short write")
            renameat2(self.fd, spare, self.fd, name, RENAME_NOREPLACE)
            # The name may have gone to another file since it was opened (the host
            # removed the spare and handed back the next one): that one is no record
            # of this change, and goes; a new file is made instead.
            if os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_ino != st.st_ino:
                os.unlink(name, dir_fd=self.fd)
                raise OSError(errno.ESTALE, "the spare was replaced")
        except OSError:
            os.close(fd)
            return -1
        return fd

    def rewrite_pending(self, record: Record) -> None:
        """A pending record this Store holds, written again in place (its change kept
        something other than it first said: history/keeper.py); the same id, so the
        same blob. A kill meanwhile leaves it torn: dropped by the settle."""
        data = dump(Record.from_wire(record.to_wire()))
        fd = self._held[record.id]
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            syscalls.write_all(fd, data)
        except OSError as exc:
            raise StoreError(exc) from None

    def commit(self, record_id: str) -> bool:
        """The change landed: the record is done, for the host to promote. A failure
        here changes nothing the tree depends on: the record stays pending, settled
        later (False)."""
        try:
            os.rename(f"{RECORD}{record_id}{PENDING}", f"{RECORD}{record_id}{DONE}",
                      src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError:
            return False
        finally:
            self._release(record_id)
        return True

    def drop(self, record_id: str, blobs: int = 1) -> None:
        """Forget a record whose change did not land, and its blobs (a patch's record
        has one per entry)."""
        for name in (f"{RECORD}{record_id}{PENDING}", f"{RECORD}{record_id}{DONE}"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.fd)
        for index in range(blobs):
            self.remove_blob(blob_name(record_id, index))
        self._release(record_id)

    def checkpoint(self, label: str | None) -> str:
        """A checkpoint a worker makes (before a rewind): done, for the host to promote."""
        checkpoint = Checkpoint(new_id(), time.time(), label)
        self._create(f"{CHECKPOINT}{checkpoint.id}{DONE}", dump(checkpoint))
        return checkpoint.id

    def stash_copy(self, src_fd: int, blob: str) -> int:
        """Copy what `src_fd` holds (from its start) into a new blob; its size."""
        try:
            fd = os.open(blob, _NEW_FLAGS, 0o600, dir_fd=self.fd)
        except OSError as exc:
            raise StoreError(exc) from None
        try:
            try:
                offset = 0
                while chunk := os.pread(src_fd, _COPY_CHUNK, offset):
                    offset += len(chunk)
                    syscalls.write_all(fd, chunk)
            finally:
                os.close(fd)
        except OSError as exc:
            self.remove_blob(blob)
            raise StoreError(exc) from None
        return offset

    def stash_bytes(self, blob: str, data: bytes) -> None:
        """A settle keeps a dead writer's old file: a copy that writer cut short goes
        first (settles are serialised, so no one else is writing it)."""
        self.remove_blob(blob)
        self._create(blob, data)

    def remove_blob(self, blob: str) -> None:
        """A blob is a file, or (a directory taken away by a move) a directory tree."""
        try:
            os.unlink(blob, dir_fd=self.fd)
        except IsADirectoryError:
            remove_tree(self.fd, blob)
        except FileNotFoundError:
            pass

    def has_blob(self, state: State) -> bool:
        """Is a pending record's blob there, and whole (a copy cut short by a kill is
        not)? A directory blob is whole once it is there."""
        blob = state.blob
        if blob is None:
            return False
        try:
            st = os.stat(blob, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            return state.type == "dir"
        return stat.S_ISREG(st.st_mode) and st.st_size == state.size

    # -- settling a dead writer's records ----------------------------------------

    @contextlib.contextmanager
    def settling(self) -> Iterator[None]:
        """One settle at a time on this work directory (two would each copy the same
        blob); the orphans it claimed are released after."""
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            self.release()
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def orphans(self) -> list[str]:
        """Ids of the pending records whose writer is gone (nobody holds their
        flock), oldest first; each stays claimed (locked) by this Store until it is
        committed, dropped or released, so its writer cannot be mid-way meanwhile."""
        found = []
        for name in sorted(_names(self.fd)):
            record_id = name[2:-len(PENDING)]
            if not (name.startswith(RECORD) and name.endswith(PENDING) and is_id(record_id)):
                continue
            if record_id in self._held or self._claim(name, record_id):
                found.append(record_id)
        return found

    def _claim(self, name: str, record_id: str) -> bool:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False  # its writer lives
        self._held[record_id] = fd
        return True

    def let_go(self, record_id: str) -> None:
        """Leave a pending record to a settle: its change is in a state only a settle
        can finish (a patch whose old files could not be stored)."""
        self._release(record_id)

    def _release(self, record_id: str) -> None:
        fd = self._held.pop(record_id, None)
        if fd is not None:
            os.close(fd)

    def release(self) -> None:
        for record_id in list(self._held):
            self._release(record_id)

    # -- reading ------------------------------------------------------------

    def listing(self) -> Listing:
        records, checkpoints = set(), set()
        for fd in self._readable():
            for name in _names(fd):
                if name.endswith(COMMITTED) and is_id(name[2:-5]):
                    if name.startswith(RECORD):
                        records.add(name[2:-5])
                    elif name.startswith(CHECKPOINT):
                        checkpoints.add(name[2:-5])
        return Listing(sorted(records), sorted(checkpoints))

    def record(self, record_id: str, *, pending: bool = False) -> Record | None:
        """A committed (or, `pending`, this work directory's pending) record, checked;
        None if it is not there or not a valid record (reported in the log)."""
        if pending:
            return self.load_record(self.fd, f"{RECORD}{record_id}{PENDING}")
        for fd in self._readable():
            if (record := self.load_record(fd, f"{RECORD}{record_id}{COMMITTED}")) is not None:
                return record
        return None

    def uncommitted(self, after: str) -> Iterator[Record]:
        """The records written after the id `after` that no host has committed yet
        (pending, or done and waiting for it), checked, each work directory's oldest
        first: every work directory's, as sandboxes that write other sets of roots
        may have changed the same paths (a worker: its own only, all it may read).
        Only those are read: a name holds its id."""
        dirs = self.dirs() if self.kept is None else iter([(WORK, os.dup(self.fd))])
        for where, fd in dirs:
            if not where.startswith(WORK):
                if where:
                    os.close(fd)
                continue
            try:
                records = [record for name in sorted(_names(fd))
                           if name.startswith(RECORD) and name.endswith((PENDING, DONE))
                           and name[len(RECORD):len(RECORD) + ID_WIDTH] > after
                           and (record := self.load_record(fd, name)) is not None]
            finally:
                os.close(fd)
            yield from records

    def load_record(self, dir_fd: int, name: str) -> Record | None:
        try:
            data = read_small(dir_fd, name)
            if data is None:
                return None
            record = record_from_bytes(data)
            if name[2:2 + ID_WIDTH] != record.id:
                raise BadRecord("a record under another record's name")
            return record
        except (BadRecord, OSError) as why:
            skipped(name, why)
            return None

    def checkpoint_info(self, cp_id: str) -> Checkpoint | None:
        name = f"{CHECKPOINT}{cp_id}{COMMITTED}"
        try:
            data = None
            for fd in self._readable():
                if (data := read_small(fd, name)) is not None:
                    break
            if data is None:
                return None
            checkpoint = checkpoint_from_bytes(data)
            if checkpoint.id != cp_id:
                raise BadRecord("a checkpoint under another's name")
            return checkpoint
        except (BadRecord, OSError) as why:
            skipped(name, why)
            return None

    def records(self, newest_first: bool = True) -> Iterator[Record]:
        ids = self.listing().records
        for record_id in reversed(ids) if newest_first else ids:
            record = self.record(record_id)
            if record is not None:
                yield record

    def dirs(self) -> Iterator[tuple[str, int]]:
        """("", the store) and (name, an fd the caller closes) of each work and kept
        directory in it (the host's: a worker's Store holds no fd of the store)."""
        yield "", self.home
        for name in _names(self.home):
            if name.startswith((WORK, KEPT)):
                with contextlib.suppress(OSError):
                    yield name, os.open(name, _DIR_FLAGS, dir_fd=self.home)

    def open_blob(self, blob: str) -> int:
        """A committed record's blob ("k-<root>/b-<id>-0"), neither part followed."""
        where, _, name = blob.rpartition("/")
        if not where and self.kept is None:
            return os.open(name, _READ_FLAGS, dir_fd=self.home)
        work = self.open_dir(where)
        try:
            return os.open(name, _READ_FLAGS, dir_fd=work)
        finally:
            os.close(work)

    def open_dir(self, where: str) -> int:
        """A directory of the store a committed blob names, never followed; a worker
        opens only its own roots' kept directories (FileNotFoundError otherwise)."""
        if self.kept is None:
            return os.open(where, _DIR_FLAGS, dir_fd=self.home)
        if where not in self.kept:
            raise FileNotFoundError(errno.ENOENT, "not in a kept directory of this sandbox")
        return os.open(".", _DIR_FLAGS, dir_fd=self.kept[where])

    def read_blob(self, state: State) -> bytes:
        """A committed blob's bytes, checked against the size and content hash the
        record holds; CorralError (nothing written yet) if they differ."""
        blob, size, digest = state.blob, state.size, state.hash
        if blob is None or digest is None or size is None:
            raise CorralError("io_error", "the record keeps no verified copy of this file.")
        try:
            fd = self.open_blob(blob)
        except OSError as exc:
            raise CorralError("io_error", f"the kept copy is gone ({exc.strerror}).") from None
        try:
            st = os.fstat(fd)
            chunks = []
            if stat.S_ISREG(st.st_mode) and st.st_size == size:
                while chunk := os.read(fd, _COPY_CHUNK):
                    chunks.append(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if len(data) != size or content_version(data) != digest:
            raise CorralError(
                "io_error", "the kept copy of the old file is damaged or was replaced "
                "(its size or hash differs from the record's); nothing was written.")
        return data


def write_new(dir_fd: int, name: str, data: bytes) -> None:
    """A new file `name` holding `data`, for its owner only (as every file of the store)."""
    syscalls.write_new(dir_fd, name, data, perms=0o600)


def publish(dir_fd: int, name: str, data: bytes) -> bool:
    """A new file `name` holding `data`, whole or not at all: written under a temp
    name, then renamed in without replacing (a host killed mid-write leaves only the
    temp, which `remove_temps` clears). False if `name` exists (left as it is).
    The caller holds the store's lock, so no other host writes the same temp."""
    temp = f"{TEMP}{name}"
    try:
        write_new(dir_fd, temp, data)
    except FileExistsError:  # left by a host killed here (remove_temps clears them too)
        os.unlink(temp, dir_fd=dir_fd)
        write_new(dir_fd, temp, data)
    try:
        renameat2(dir_fd, temp, dir_fd, name, RENAME_NOREPLACE)
    except FileExistsError:
        os.unlink(temp, dir_fd=dir_fd)
        return False
    return True


def remove_temps(dir_fd: int) -> None:
    """What hosts killed in `publish` left (the caller holds the store's lock)."""
    for name in _names(dir_fd):
        if name.startswith(TEMP):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)


def hand_back(work_fd: int, done: str, spare: str) -> bool:
    """A committed record's done file, renamed to its writer's spare (Store._reuse);
    False if that writer has one already (the done file is then the caller's to
    remove). The host names it only while its sandbox lives (History.close
    removes them; a bound removes any a killed host left)."""
    try:
        renameat2(work_fd, done, work_fd, spare, RENAME_NOREPLACE)
    except FileExistsError:
        return False
    return True


def remove_spares(work_fd: int, names: Iterable[str] | None = None) -> None:
    """Spare files of a work directory: `names`, or (None) all of them. A writer
    that finds its spare gone makes a new file instead."""
    for name in _names(work_fd) if names is None else names:
        if name.startswith(SPARE):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=work_fd)


def read_small(dir_fd: int, name: str) -> bytes | None:
    """A store file's bytes, if it is a regular file (never followed) of at most
    MAX_RECORD_BYTES; None if it is not there; BadRecord if it is not a small file."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadRecord("a symlink, not a record") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadRecord("not a regular file")
        if st.st_size > MAX_RECORD_BYTES:
            raise BadRecord("a file too big to be a record")
        data = os.read(fd, st.st_size + 1)  # one byte more: the end is seen in one read
        if len(data) <= st.st_size:
            return data
        chunks = [data]  # it grew since the fstat: read on to its end, as it is now
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def blob_size(dir_fd: int, name: str) -> int | None:
    """The size of a regular-file blob (never followed); None if it is not one."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def hash_blob(dir_fd: int, name: str, size: int | None) -> str | None:
    """The content hash of a regular-file blob of `size` bytes; None if it is not
    one (gone, a symlink, another type, another size)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return None
        return chunked_version(iter(lambda: os.read(fd, _COPY_CHUNK), b""))
    finally:
        os.close(fd)


_reported: set[str] = set()
REPORTED_KEPT = 10_000  # names already reported; a worker can make many, so it is bounded


def skipped(name: str, why: object) -> None:
    """A store file that is not a valid record: skipped, and said once per name."""
    if name not in _reported:
        if len(_reported) >= REPORTED_KEPT:
            _reported.clear()
        _reported.add(name)
        # Said where logging is loaded: in the host, always. A worker (whose stderr is
        # /dev/null, and which can import nothing once confined) skips in silence: the
        # zygote template, which loads this module for it, need not load logging.
        logging = sys.modules.get("logging")
        if logging is not None:
            logging.getLogger("corral").warning(
                "corral: history: skipped %s in the store: %s", name, why)


def _names(dir_fd: int) -> list[str]:
    with os.scandir(dir_fd) as entries:
        return [entry.name for entry in entries]


def remove_tree(dir_fd: int, name: str) -> None:
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as entries:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for child, is_dir in children:
            if is_dir:
                remove_tree(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


