"""Crash recovery: what a writer killed mid-call left, made to agree with the tree.
Run in a confined worker, over the roots and the store it holds.

A change's record lives through one lifecycle (store.py holds its files):

    pending    written before the change lands; its writer holds its flock
      -> done       the change landed (Store.commit); the host promotes it
      -> dropped    the change did not land (Store.drop)

A writer killed while its record is pending leaves it held by no one: an
orphan. `recover` settles the orphans of the dead writers it is given (did the
change land? then done, else dropped), and only then removes the temp files
they left beside their paths: a writer killed between swapping its new file in
and taking the old one into the store left the old file in its temp, the only
copy an undo has, which the settle takes first.

How a record is settled depends on its kind (records.record_kind), never on a
tool's name: SETTLERS holds one settler per kind.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from corral.errors import CorralError
from corral.fs import TEMP_PREFIX, Root, Roots, content_version, temp_owner
from corral.history.records import CHANGE, PATCH, Entry, Record, record_kind
from corral.history.revert import Restorer
from corral.history.root_changes import cut_back
from corral.history.store import Store, blob_name, id_pid
from corral.policy import Policy


class Recovered(NamedTuple):
    settled: int  # pending records committed or dropped
    removed: int  # temp files removed


def recover(
    roots: Roots, store: Store | None, policy: Policy, max_file_bytes: int,
    dead: Sequence[int], *, beside: Sequence[str] = (),
    temps: Sequence[tuple[int, str]] = (),
) -> Recovered:
    """Make the tree and the history agree after the writers `dead` (pids) were
    killed mid-call: settle their pending records, then
    remove the temp files they left beside each path of `beside` (as a call named
    it) and the temp files `temps` ((root index, path): those a sweep listed, each
    removed only if it is named as a temp). Best effort: what fails is left for a
    later recovery."""
    settled = 0
    if store is not None and dead:
        restorer = Restorer(roots, store, policy, max_file_bytes, "settle")
        with contextlib.suppress(Exception), store.settling():
            settled = settle(restorer, list(dead))
    removed = 0
    for path in beside:
        with contextlib.suppress(CorralError):
            root, rel = roots.locate(path)
            if root.mode == "rw":  # the temp sits beside the resolved target (a link's too)
                parent = posixpath.dirname(root.resolve(rel)) or "."
                removed += root.remove_stale_temps(
                    parent, dead_pids=list(dead), recursive=False)
    every = roots.all()
    for index, path in temps:
        if index < len(every) and every[index].mode == "rw" and (
                temp_owner(posixpath.basename(path)) is not None):
            with contextlib.suppress(CorralError):
                every[index].unlink(path)
                removed += 1
    return Recovered(settled, removed)


def settle(restorer: Restorer, pids: list[int] | None) -> int:
    """Commit or forget the pending records of dead writers (`pids`; None: every
    pending record whose writer is gone), under the store's `settling`. Returns how
    many were settled."""
    settled = 0
    store = restorer.store
    for record_id in store.orphans():  # pending, their writer gone
        if pids is not None and id_pid(record_id) not in pids:
            continue  # a live writer's: it may be writing that very record now
        record = store.record(record_id, pending=True)
        if record is None:  # torn: its writer died creating it, before any change
            store.drop(record_id)
            settled += 1
            continue
        try:
            landed = SETTLERS[record_kind(record.tool)](restorer, record)
        except CorralError:
            continue  # left pending: a later settle tries again
        if landed:
            store.commit(record_id)
        else:
            store.drop(record_id, len(record.entries))
        if pids is not None:  # its writer is known dead: nothing writes those temps now
            _forget_temps(restorer, record, id_pid(record_id), landed)
        settled += 1
    return settled


def _settle_change(restorer: Restorer, record: Record) -> bool:
    """A change of one or two paths landed if every entry did."""
    try:
        return all(_landed(restorer, e, record.id) for e in record.entries)
    except CorralError:
        return True  # cannot tell: keep it; an undo will call it a conflict


def _settle_patch(restorer: Restorer, record: Record) -> bool:
    return PatchSettler(restorer, record).settle()


SETTLERS: dict[str, Callable[[Restorer, Record], bool]] = {
    CHANGE: _settle_change, PATCH: _settle_patch,
}


def _landed(restorer: Restorer, entry: Entry, record_id: str) -> bool:
    """Did the change of a pending entry land (its writer died mid-call)? A torn
    append is cut back first: it did not land."""
    kind, before, pid = entry.kind, entry.before, id_pid(record_id)
    if kind == "append":
        if restorer.matches(entry, entry.after):
            return True
        _cut_back(restorer, entry, record_id)
        return False
    # Where the store is on another mount the old file is copied into its blob
    # before the change: a blob, even a whole one, does not say the change
    # landed. The tree does.
    if kind in ("remove", "move_from"):
        return restorer.matches(entry, None)
    if kind == "remove_tree":  # renamed into the store, or copied, then renamed aside
        return restorer.matches(entry, None) and before is not None and (
            restorer.store.has_blob(before))
    if kind == "replace" and before is not None:
        if not restorer.matches(entry, entry.after):
            return False
        root = restorer.root(entry.root)
        temps = _temps_of(root, entry.rel, pid)
        if not temps or before.blob is None:
            return restorer.store.has_blob(before)
        # swapped in, the old file (left in the temp) not yet wholly taken: take it
        # now, over a copy the kill cut short
        restorer.store.remove_blob(before.blob)
        restorer.store.stash_bytes(before.blob, root.read_bytes(
            temps[0], max_file_bytes=restorer.max_file_bytes))
        root.unlink(temps[0])
        return True
    return restorer.matches(entry, entry.after)


def _cut_back(restorer: Restorer, entry: Entry, record_id: str) -> None:
    """An append its writer was killed inside left part of its bytes: cut the file
    back to its size before (remove it, and the directories made for it, if the
    append created it), unless a later change of it was recorded (cutting would
    take that change's bytes too: then the torn part stays, a conflict to undo)."""
    root, rel = restorer.root(entry.root), entry.rel
    size = None if entry.before is None else entry.before.size

    def untouched_since() -> bool:
        return not any(
            (e.root, e.rel) == (entry.root, rel)
            for record in _records_after(restorer.store, record_id) for e in record.entries
        )

    if cut_back(root, rel, size, untouched_since) and size is None:
        restorer.unmake(entry, recorded=False)


def _records_after(store: Store, record_id: str) -> Iterator[Record]:
    """Every record (committed, or waiting in any work directory) written after
    `record_id`."""
    for later in store.listing().records:
        if later > record_id and (record := store.record(later)) is not None:
            yield record
    yield from store.uncommitted(after=record_id)


def _temps_of(root: Root, rel: str, pid: int, kind: str = "file") -> list[str]:
    """The temp files (or directories: `kind`) a writer `pid` left beside `rel`
    (e.g. an atomic write swapped in, the old file not yet taken into the store)."""
    parent = posixpath.dirname(rel) or "."
    prefix = f"{TEMP_PREFIX}{pid}-"
    try:
        found = root.scandir(parent)
    except CorralError:  # the directory is gone: so are they
        return []
    return [posixpath.join(parent, entry.path) if parent != "." else entry.path
            for entry in found if entry.path.startswith(prefix) and entry.type == kind]


def _forget_temps(restorer: Restorer, record: Record, pid: int, landed: bool) -> None:
    """Remove the temp files the dead writer `pid` of `record` left beside its
    paths, once the record is settled: any writer's, undo's and rewind's too;
    and, if its change landed, the directory a copied-in delete_directory had
    renamed aside and was removing (the store holds the whole tree)."""
    for entry in record.entries:
        with contextlib.suppress(CorralError):
            root = restorer.root(entry.root)
            for temp in _temps_of(root, entry.rel, pid):
                root.unlink(temp)
            if entry.kind == "remove_tree" and landed:
                for temp in _temps_of(root, entry.rel, pid, "dir"):
                    root.remove_tree(temp, recursive=True)


class PatchSettler:
    """A patch whose writer died part-way (fs/batch.py's steps): its record names
    every entry with the temp beside it. Each entry has landed (its target holds
    the new file, or is gone for a removal), is ready to (target as the patch found
    it; the new file whole in the temp), or neither (changed since by someone else).
    If some landed and every other is ready, the patch is finished: the rest land
    and every old file set aside goes into the store; otherwise what landed is put
    back from the old files set aside, and the temps go."""

    def __init__(self, restorer: Restorer, record: Record) -> None:
        self.restorer, self.record = restorer, record

    def settle(self) -> bool:
        """True: the whole patch is there (commit its record); False: none of it."""
        entries = self.record.entries
        if not all(entry.temp_is_writers(self.record.pid) for entry in entries):
            raise CorralError("io_error", "a patch record whose temps are not its writer's.")
        landed = [self._landed(entry) for entry in entries]
        if any(landed) and all(done or self._ready(e) for e, done in zip(entries, landed,
                                                                         strict=True)):
            for index, (entry, done) in enumerate(zip(entries, landed, strict=True)):
                (self._put_away if done else self._land)(entry, blob_name(self.record.id, index))
            return True
        for entry, done in reversed(list(zip(entries, landed, strict=True))):
            if done:
                self._unland(entry)
            self._forget(entry)
            self.restorer.unmake(entry, recorded=False)
        return False

    def _holds(self, entry: Entry, rel: str, version: str | None) -> bool:
        try:
            data = self.restorer.root(entry.root).read_bytes(
                rel, max_file_bytes=self.restorer.max_file_bytes)
        except CorralError:
            return False
        return content_version(data) == version

    def _landed(self, entry: Entry) -> bool:
        if entry.after is None:  # a removal
            return self.restorer.matches(entry, None)
        return self._holds(entry, entry.rel, entry.after.version)

    def _was(self, entry: Entry, rel: str) -> bool:
        """`rel` holds what the entry's path held before the patch: its bytes, or the
        same symlink (a Delete File of a link removes the link)."""
        assert entry.before is not None
        if entry.before.type != "symlink":
            return self._holds(entry, rel, entry.before.version)
        try:
            info = self.restorer.root(entry.root).info(rel)
        except CorralError:
            return False
        return info is not None and info.type == "symlink" and (
            info.symlink_target == entry.before.target)

    def _ready(self, entry: Entry) -> bool:
        before, after = entry.before, entry.after
        if before is None:
            target_as_found = self.restorer.matches(entry, None)
        else:
            target_as_found = self._was(entry, entry.rel)
        assert entry.temp is not None
        return target_as_found and (after is None or self._holds(entry, entry.temp, after.version))

    def _keep_old(self, entry: Entry, rel: str, blob: str) -> None:
        if entry.before is not None and entry.before.type == "symlink":
            return  # the store takes no links: the record holds its target
        root, store = self.restorer.root(entry.root), self.restorer.store
        store.stash_bytes(blob, root.read_bytes(rel, max_file_bytes=self.restorer.max_file_bytes))

    def _land(self, entry: Entry, blob: str) -> None:
        root, temp = self.restorer.root(entry.root), entry.temp or ""
        if entry.before is not None:
            self._keep_old(entry, entry.rel, blob)
        if entry.after is None:
            root.unlink(entry.rel)
        else:
            root.rename(temp, root, entry.rel, overwrite=entry.before is not None)

    def _put_away(self, entry: Entry, blob: str) -> None:
        """A landed entry's old file, set aside under its temp, into the store."""
        root, temp = self.restorer.root(entry.root), entry.temp or ""
        if entry.before is not None and root.info(temp) is not None:
            self._keep_old(entry, temp, blob)
            root.unlink(temp)

    def _unland(self, entry: Entry) -> None:
        root, temp = self.restorer.root(entry.root), entry.temp or ""
        if entry.before is None:
            root.unlink(entry.rel)
        elif self._was(entry, temp):
            root.rename(temp, root, entry.rel, overwrite=entry.after is not None)

    def _forget(self, entry: Entry) -> None:
        root = self.restorer.root(entry.root)
        with contextlib.suppress(CorralError):
            if root.info(entry.temp or "") is not None:
                root.unlink(entry.temp or "")
