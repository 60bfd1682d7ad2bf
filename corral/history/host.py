"""The host side of history: where a workspace's store lives, what it shows
(history, checkpoints), keeping it within its bounds, and the only way a record
enters it (promote.py: a worker's finished record, checked). The host reads and
writes the store directly (it lies outside every root); every change to the
tree, undo and rewind included, happens in a confined worker, but the symlinks
an undo or a rewind makes again, which no worker can make (relink.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import posixpath
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from corral.config import HistoryOptions
from corral.errors import CorralError
from corral.history import kept, leftovers, promote
from corral.history.bounds import evict, read_bound, write_bound
from corral.history.location import make_work, prepare
from corral.history.promote import Expect
from corral.history.records import PATCH, Checkpoint, Entry, Record, State, dump, record_kind
from corral.history.store import (
    CHECKPOINT,
    COMMITTED,
    LOCK,
    RECORD,
    Store,
    StoreError,
    id_pid,
    id_time,
    new_id,
    publish,
    remove_spares,
    remove_temps,
    work_name,
)

DAY_S = 86_400.0
log = logging.getLogger("corral")
PUBLIC_STATE = ("type", "size", "mode", "version")  # what history() shows of a state
_LOCK_FLAGS = os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW


def public(state: State | None) -> dict[str, Any] | None:
    """A before/after state as a user sees it (None: the path did not exist)."""
    if state is None:
        return None
    shown = {key: getattr(state, key) for key in PUBLIC_STATE if getattr(state, key) is not None}
    if state.type != "file":
        shown.pop("size", None)  # a directory's or a link's st_size says nothing useful
    if state.tree is not None:  # a deleted directory: how many entries went with it
        shown["entries"] = len(state.tree)
    return shown


EVICT_TO = 0.9  # of max_bytes: what an over-full store is brought back to
# A sandbox's start bounds the store only if no host has for this long: bounding reads
# all of it (~10 us a file: ~35 ms of every `corral call` once a workspace has ~3,000
# changes, on a 2-core VM). Each bound notes the bytes it found, each sandbox adds
# what it stores as its records are committed (and at its close), and a start within
# the interval counts from the note (bounding at once if that is over the bound);
# sandboxes open side by side count each other's changes only as they commit, so
# the store may pass its bound by what they store meanwhile.
BOUND_EVERY_S = 600
NOTE_EVERY_S = 1.0  # the note is brought up to date at most this often, and at the close
INLINE_BYTES = 1 << 20  # a call that kept more commits off its path (see History.__init__)
REFUSED_KEPT = 100  # a worker may send many bad records: the host keeps only the last
MAX_CALLS_TRACKED = 10_000  # calls in flight the sweep waits for (a flow never finished stays)
_Job = tuple[tuple[str, ...], Expect, tuple[Any, ...]]  # one call's records: History.promote


class History:
    """One sandbox's view of its workspace's store. `writable`: the roots the
    sandbox may write; none, and its workers get no store at all."""

    def __init__(
        self, options: HistoryOptions, workspace: str, roots: Sequence[str],
        writable: Sequence[str] = (),
    ) -> None:
        self.options = options
        self.workspace = workspace
        self.path = prepare(options.path, workspace, list(roots))
        self.writable = frozenset(writable)
        self._lock = threading.Lock()
        self.work_path: str | None = None
        self.work = ""
        self.refused: dict[str, str] = {}  # the last REFUSED_KEPT records refused, and why
        self._calls: dict[object, float] = {}  # calls in flight: when each began (wall clock)
        self._retry: dict[str, Expect] = {}  # ids whose commit failed, with their checks
        self._spares: set[str] = set()  # done files handed back to their writers
        # A call's records are committed on a call's own thread, but not at once: they
        # wait (pending) until the next request has gone to a worker, and are
        # committed while that worker runs it (meanwhile), in time the thread would
        # otherwise spend waiting. Committed at once, they cost their ~200 us twice
        # over: the idle worker polls for its next request all that time
        # (calls/waiting.py), and the host then polls for its answer. Another thread
        # would cost more than the commit (~20 futex calls a call, and a wake-up).
        # A call that stored more than INLINE_BYTES may need its kept copy hashed
        # (~1 ms a MiB): that goes to one thread, with what is pending before it,
        # and so does every call while that thread has work (the records are
        # committed in order). Whatever reads the history commits them all first
        # (flush), and so does the close; a host killed first leaves them done in
        # the work directory, for the next sweep.
        self._pending: list[_Job] = []
        self._committing = threading.Lock()  # one thread commits what is pending
        self._later = ThreadPoolExecutor(1, thread_name_prefix="corral-history")
        self._queued: Future[None] | None = None  # the thread's last job
        home = _open_dir(self.path)
        try:
            self._lock_fd = os.open(LOCK, _LOCK_FLAGS, 0o600, dir_fd=home)
            work = -1
            if self.writable:
                self.work = work_name(sorted(self.writable))
                make_work(home, self.work)
                kept.make(home, self.writable)
                work = os.open(self.work, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
                               | os.O_NOFOLLOW, dir_fd=home)
                self.work_path = os.path.join(self.path, self.work)
        except OSError as exc:
            os.close(home)
            raise StoreError(exc) from None
        self.store = Store(work, home)
        self._added = 0  # bytes stored since the note was last brought up to date
        self._noted = -NOTE_EVERY_S  # monotonic time of that: the first commit notes
        with self._locked():
            kept.migrate(home)  # a store an earlier version wrote: once
            bound = read_bound(home)
            if (bound is not None and time.time() - bound[1] < BOUND_EVERY_S
                    and bound[0] <= options.max_bytes):
                self._usage = bound[0]
            else:
                remove_temps(home)
                self._bound(options.max_bytes)

    def close(self) -> None:
        self.flush()  # every answered call's records committed first
        self._later.shutdown(wait=True)
        if self._added:
            with self._locked():
                self._note_added(at_close=True)
        if self._spares:  # its workers are gone: no one will reuse them
            remove_spares(self.store.fd, self._spares)
        self.store.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This host's threads, and every other host on the store, one at a time."""
        with self._lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- records entering the history -----------------------------------------

    def dead_writers(self) -> list[int]:
        """Pids of the pending records whose writer is gone (killed mid-call): no
        process holds their lock, whatever `kill(pid, 0)` would say of the pid."""
        if self.work_path is None:
            return []
        with self._locked():
            try:
                return sorted({id_pid(record_id) for record_id in self.store.orphans()})
            finally:
                self.store.release()

    def promote(
        self, ids: Sequence[str], tool: str, since: float | None,
        done: Sequence[Any] = (), stored: int = 0,
    ) -> None:
        """A call's answer named these records (`done`: those it carried, and `stored`:
        the bytes it kept): commit those that check out, while the next request
        runs (meanwhile), or, for a call that kept more than INLINE_BYTES, soon."""
        if self.work_path is None or not ids:
            return
        job = (tuple(ids), Expect(self.writable, tool, since), tuple(done))
        with self._lock:
            busy = self._queued is not None and not self._queued.done()
            if busy or stored > INLINE_BYTES:
                jobs, self._pending = [*self._pending, job], []
                self._queued = self._later.submit(self._commit, jobs)
                return
            self._pending.append(job)

    def meanwhile(self) -> None:
        """A worker runs a request: commit what earlier calls left pending (unless
        another thread is at it: its call waits for none of them)."""
        if self._pending and self._committing.acquire(blocking=False):
            try:
                self._commit_pending()
            finally:
                self._committing.release()

    def _commit_pending(self) -> None:
        while True:
            with self._lock:
                jobs, self._pending = self._pending, []
            if not jobs:
                return
            self._commit(jobs)

    def _commit(self, jobs: Sequence[_Job]) -> None:
        """Commit each job's records, under the store's lock once for them all."""
        try:
            with self._locked():
                for ids, expect, done in jobs:
                    try:
                        self._refused(promote.promote(self.store, self.work, ids, expect,
                                                      done, self._spares))
                    except OSError as exc:  # left done: the next sweep commits it
                        log.warning("corral: history: committing records failed (%s)",
                                    exc.strerror)
                        for item in ids[:REFUSED_KEPT]:
                            self._retry[item] = expect
                self._note_added()
        except Exception:  # the calls' changes have landed: their answers said so
            log.exception("corral: history: committing records failed")

    def calling(self, call: object) -> None:
        """A call began: the sweep leaves the records it may make to its answer."""
        with self._lock:
            if len(self._calls) < MAX_CALLS_TRACKED:  # (more: the sweep waits for none)
                self._calls[call] = time.time()

    def answered(self, call: object) -> None:
        with self._lock:
            self._calls.pop(call, None)

    def flush(self) -> None:
        """Wait until every record promote() was given is committed or refused."""
        queued = self._queued
        if queued is not None:
            queued.result()
        with self._committing:
            self._commit_pending()

    def sweep(self, dead: Sequence[int] = (), tools: frozenset[str] | None = None) -> None:
        """Commit what was promoted, then the done records no answer will name (a
        settle's: of the writers `dead`; a dead host's), each of a tool in `tools`
        (those that record changes) and no older than the history keeps. A record
        dated after a call in flight began may be that call's: it waits for the
        answer, which checks it as that call's (unless its writer is dead); one
        whose commit failed is tried again with its call's checks."""
        if self.work_path is None:
            return
        with self._lock:  # before the flush: a call answered since has its commit queued
            flying = min(self._calls.values(), default=None)
        self.flush()
        since = time.time() - self.options.max_age_days * DAY_S
        with self._locked():
            ids = promote.done(self.store)
            retried = [i for i in ids if i in self._retry]
            for item in retried:
                self._refused(promote.promote(self.store, self.work, [item],
                                              self._retry.pop(item)))
            orphaned = [i for i in ids if i not in retried and (
                flying is None or id_time(i) < flying - promote.CLOCK_SLACK_S
                or id_pid(i) in dead)]
            if orphaned:
                self._refused(promote.promote(self.store, self.work, orphaned, Expect(
                    self.writable, since=since, tools=tools)))

    def _refused(self, refused: dict[str, str]) -> None:
        self.refused.update(refused)
        for name in list(self.refused)[:-REFUSED_KEPT]:
            del self.refused[name]

    def stored(self, size: int) -> None:
        """A call put `size` bytes into the store: once it is over its bound, evict down
        to EVICT_TO of it. Eviction reads the whole store; evicting only back under
        the bound made every later write read it again (~3-5 ms a call on a full
        store of ~1,000 changes), now one write in many does. The records being
        committed go in first: eviction leaves a record it cannot see whole alone."""
        with self._lock:
            self._usage += size
            self._added += size
            if self._usage <= self.options.max_bytes:
                return
        self.flush()
        with self._locked():
            self._bound(int(self.options.max_bytes * EVICT_TO))

    def _note_added(self, at_close: bool = False) -> None:
        """Add what this sandbox stored since to the store's note, which the next
        start counts from: at a commit once NOTE_EVERY_S has passed since the last
        (the first commit always), and at the close, so a process killed before its
        close leaves at most its last second's calls uncounted (a loop of one-shot
        calls: none). Rewriting the note is a rename over it (~130 us on ext4) and
        reading it a few more calls: at every commit it was half a small write's
        cost. The caller holds the store's lock. No note, or a broken one: the next
        start reads the store through anyway."""
        now = time.monotonic()
        if self._added and (at_close or now - self._noted >= NOTE_EVERY_S):
            with contextlib.suppress(OSError):
                if (bound := read_bound(self.store.home)) is not None:
                    write_bound(self.store.home, bound[0] + self._added, bound[1])
            self._added = 0
            self._noted = now

    def _bound(self, max_bytes: int) -> None:
        """Evict down to `max_bytes` (and the age bound), and leave the note a start
        reads instead (the caller holds the store's lock)."""
        self._usage = evict(self.store, max_bytes, self.options.max_age_days * DAY_S)
        self._usage = leftovers.evict(self.store, self._usage, max_bytes)
        self._added = 0  # the read found what this sandbox stored
        with contextlib.suppress(OSError):  # without the note, the next start bounds
            write_bound(self.store.home, self._usage, int(time.time()))

    def checkpoint(self, label: str | None, checkpoint_id: str | None = None) -> str:
        """A checkpoint now (`checkpoint_id`: one a snapshot's manifest already names)."""
        checkpoint = Checkpoint(checkpoint_id or new_id(), time.time(), label)
        with self._locked():
            try:
                name = f"{CHECKPOINT}{checkpoint.id}{COMMITTED}"
                publish(self.store.home, name, dump(checkpoint))
                kept.link(self.store.home, name, self.writable)
            except OSError as exc:
                raise StoreError(exc) from None
        return checkpoint.id

    @property
    def held(self) -> int:
        """The bytes the records and their copies hold, as last counted."""
        return self._usage

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The store's lock, for the snapshots written beside its records."""
        with self._locked():
            yield

    # -- what it shows --------------------------------------------------------------

    def entries(self, path: str | None, limit: int) -> list[dict[str, Any]]:
        """Newest first: one entry per path a change touched, and the checkpoints (as
        committed: the caller sweeps first). A store file that is not a valid record
        is skipped (and logged)."""
        wanted = None if path is None else self._normal(path)
        listing = self.store.listing()
        checkpoints = set() if wanted is not None else set(listing.checkpoints)
        found: list[dict[str, Any]] = []
        for item_id in sorted([*listing.records, *checkpoints], reverse=True):
            if len(found) >= limit:
                break
            if item_id in checkpoints:
                info = self.store.checkpoint_info(item_id)
                if info is not None:
                    found.append({"id": item_id, "time": info.time, "tool": None,
                                  "path": None, "action": "checkpoint", "before": None,
                                  "after": None, "checkpoint": info.label})
                continue
            record = self.store.load_record(self.store.home, f"{RECORD}{item_id}{COMMITTED}")
            if record is None:
                continue
            if wanted is None and record_kind(record.tool) == PATCH:
                found.append(_patch_entry(record))  # a patch is one change
                continue
            for entry in record.entries:
                if wanted is None or entry.path == wanted or _beneath(entry, wanted):
                    found.append(_entry(record, entry))
        return found[:limit]

    def _normal(self, path: str) -> str:
        """The path as records name it: relative to the workspace, or absolute."""
        normal = posixpath.normpath(path)
        if normal.startswith(self.workspace + "/"):
            return normal[len(self.workspace) + 1:]
        return normal


def _beneath(entry: Entry, path: str) -> bool:
    """Is `path` one of the entries of a directory the change deleted?"""
    tree = entry.before.tree if entry.before is not None else None
    if not tree or not path.startswith(entry.path.rstrip("/") + "/"):
        return False
    rest = path[len(entry.path.rstrip("/")) + 1:]
    return any(kept.path == rest for kept in tree)


def _entry(record: Record, entry: Entry) -> dict[str, Any]:
    shown = {"id": record.id, "time": record.time, "tool": record.tool,
             "path": entry.path, "action": entry.action,
             "before": public(entry.before), "after": public(entry.after)}
    if entry.to is not None:
        shown["destination"] = entry.to
    if entry.source is not None:
        shown["source"] = entry.source
    if record.undoes is not None:
        shown["undoes"] = record.undoes
    return shown


def _patch_entry(record: Record) -> dict[str, Any]:
    """A patch as one history entry: its files, each with what the patch did to it
    (a move's two ends as one file)."""
    files = [{"path": e.path, "action": e.action, **({"destination": e.to} if e.to else {})}
             for e in record.entries if e.source is None]
    return {"id": record.id, "time": record.time, "tool": record.tool,
            "path": record.entries[0].path, "action": "patch", "before": None, "after": None,
            "files": files}


def _open_dir(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise CorralError(
            "io_error", f"the history store {path} cannot be opened ({exc.strerror}).") from None
