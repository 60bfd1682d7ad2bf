"""Undo, rewind and settle: run in a confined worker, over the roots and the
store it holds. Every restoring change goes through the same Root calls as a
tool's, with a Keeper, so an undo is itself recorded (and a rewind can be
rewound); each is checked by the policy as the tool that made the change.

A record is reverted only if each path it names is still as the record left
it (its `after` state); otherwise that path was changed by something other
than corral since, and it is a conflict left alone unless `force`.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import time
from collections.abc import Callable, Iterator
from typing import Any

from corral.errors import CorralError, shown_path
from corral.fs import NO_KEEP, TEMP_PREFIX, MoveGuard, Root, Roots, content_version
from corral.history.keeper import Keeper, shown
from corral.history.records import PATCH_TOOL, BadRecord, Entry, Kept, Record, State
from corral.history.root_changes import cut_back, restore_tree
from corral.history.store import Store, blob_name, id_pid, is_id, new_id
from corral.history.trees import check_kept, copy_tree
from corral.policy import Policy, RootSpec


class Restorer:
    def __init__(
        self, roots: Roots, store: Store, policy: Policy, max_file_bytes: int, tool: str,
        undoes: str | None = None,
    ) -> None:
        self.roots, self.store, self.policy = roots, store, policy
        self.max_file_bytes = max_file_bytes
        self.keeper = Keeper(store, roots.workspace.path, tool, undoes)
        # deleted symlinks this could not put back (a worker cannot make one): path
        # and target, for a person to make again
        self.unkept_links: list[dict[str, str]] = []

    def root(self, path: str) -> Root:
        for root in self.roots.all():
            if root.path == path:
                return root
        raise CorralError("not_found", f"the root {path} of this record is not a root now.")

    # -- checking -----------------------------------------------------------

    def matches(self, entry: Entry, state: State | None) -> bool:
        """Is the path of `entry` in `state` now?"""
        root = self.root(entry.root)
        try:
            info = root.info(entry.rel)
        except CorralError:
            return False
        if state is None or info is None:
            return state is None and info is None
        if info.type != state.type:
            return False
        if state.ino is not None and state.version is None:
            return info.ino == state.ino
        if state.type == "symlink":
            return info.symlink_target == state.target
        if state.type != "file":
            return True
        if state.size is not None and info.size != state.size:
            return False
        if state.version is not None or state.tail is not None:
            data = root.read_bytes(entry.rel, max_file_bytes=self.max_file_bytes)
            if state.version is not None:
                return content_version(data) == state.version
            before = (entry.before.size or 0) if entry.before is not None else 0
            return content_version(data[before:]) == state.tail
        return True

    def check(self, entries: list[Entry], tool: str) -> None:
        """path_denied unless the policy lets `tool` write every path of `entries`, as
        recorded and as it resolves now (a directory on its way may have become a
        symlink since): before anything changes. Each Root call decides again on
        the path it opened (`guard`), race-free."""
        for entry in entries:
            root = self.root(entry.root)
            if root.mode != "rw":
                raise CorralError("read_only", f"{entry.path} lies in a read-only root.")
            for rel in (entry.rel, *entry.made):
                for path in self._spellings(root, rel):
                    self._allowed(tool, root, path)
            if entry.before is not None and entry.before.tree is not None:
                for path in self._spellings(root, entry.rel):
                    self._tree_allowed(tool, root, path, entry.before.tree)

    @staticmethod
    def _spellings(root: Root, rel: str) -> list[str]:
        """`rel` as recorded, and where it resolves now (its parents followed)."""
        try:
            resolved = root.resolve(rel, follow=False)
        except CorralError as error:
            if error.code == "outside_workspace":
                raise
            return [rel]  # a parent is missing: the guard decides what gets made
        return [rel] if resolved == rel else [rel, resolved]

    def _tree_allowed(self, tool: str, root: Root, rel: str, tree: tuple[Kept, ...]) -> None:
        """A deleted directory comes back whole: it and every entry beneath it."""
        self._allowed(tool, root, rel)
        for kept in tree:
            self._allowed(tool, root, posixpath.join(rel, kept.path))

    def guard(self, tool: str, root: Root) -> Callable[[str], None]:
        """The Root calls' guard: the policy on the resolved path each one opened."""
        return lambda rel: self._allowed(tool, root, rel)

    def _allowed(self, tool: str, root: Root, rel: str) -> None:
        """path_denied, naming the path and the rule, if the policy denies `tool`
        writing `rel` (supervised is allowed: undo is the host's, not the model's)."""
        decision = self.policy.decide(tool, RootSpec(root.path, root.mode), rel, write=True)
        if decision.action == "deny":
            path = shown(self.keeper.workspace, root.path, rel)
            raise CorralError(
                "path_denied", f"{path} is denied by the policy (rule {decision.rule}).",
                rule=decision.rule,
            )

    def _moving(self, tool: str, src: Root, dst: Root) -> MoveGuard:
        """Moving back decides both ends where they resolve and, for a directory,
        every entry beneath it at its old and its new name, as move_file does
        (Root.rename walks it under the tree lock): what was written into it since
        must not land at a name no tool may write."""

        def entry(old: str, new: str) -> None:
            self._allowed(tool, src, old)
            self._allowed(tool, dst, new)

        return MoveGuard(self.guard(tool, src), self.guard(tool, dst), entry)

    # -- reverting ------------------------------------------------------------

    def revert(self, record: Record, tool: str) -> None:
        """Put every path of `record` back to its `before` state, each change decided
        by the policy as `tool`'s on the path it resolves to."""
        entries = record.entries
        if entries and entries[0].kind == "move_from":
            self._unmove(entries[0], entries[1], tool)
            return
        if entries and entries[0].kind == "remove_tree":
            self._put_tree(entries[0], tool)
            return
        for entry in reversed(entries):
            self._put(entry, entry.before, tool)
            self._unmake(entry, guard=self.guard(tool, self.root(entry.root)))

    def _put(self, entry: Entry, state: State | None, tool: str) -> None:
        root, rel, keep = self.root(entry.root), entry.rel, self.keeper
        guard = self.guard(tool, root)
        info = root.info(rel)
        if state is None:
            if info is None:
                return
            if info.type == "dir":
                root.rmdir(rel, guard=guard, keep=keep)
            else:
                root.unlink(rel, guard=guard, keep=keep)
            return
        kind = state.type
        if kind == "dir":
            if info is None or info.type != "dir":
                if info is not None:
                    root.unlink(rel, guard=guard, keep=keep)
                root.mkdir(rel, guard=guard, keep=keep)
            return
        if kind == "symlink":  # a worker cannot make one: listed, for a person to make
            if info is None:
                self.unkept_links.append({"path": entry.path, "target": state.target or ""})
                return
            raise CorralError(
                "path_denied", f"{entry.path} was a symlink, which corral cannot create."
            )
        if state.blob is not None:
            data = self.store.read_blob(state)  # checked against the record's size and hash
        else:  # an append: the file as it was is the start of what is there
            data = root.read_bytes(rel, max_file_bytes=self.max_file_bytes)[: state.size]
        if info is not None and info.type == "dir":
            root.rmdir(rel, guard=guard, keep=keep)
        root.write_atomic(rel, data, mode=state.mode, guard=guard, keep=keep)

    def _put_tree(self, entry: Entry, tool: str) -> None:
        """A deleted directory back, whole: its kept tree, checked against the list
        its record holds (every file's hash too), moved back from the store, or
        copied where a move cannot reach (the blob lies in another sandbox's work
        directory, or on another file system). Its symlinks come back only with a
        move of a tree that holds them; the others are listed in `unkept_links`
        (their targets are only shown: never followed, never made)."""
        before = entry.before
        if before is None or before.tree is None or before.blob is None:
            raise CorralError("io_error", f"the record of {entry.path} keeps no tree.")
        tree = before.tree
        where, _, name = before.blob.rpartition("/")
        try:
            work = self.store.open_dir(where)
        except OSError as exc:
            raise CorralError("io_error", f"the kept tree is gone ({exc.strerror}).") from None
        try:
            try:
                unkept = check_kept(work, name, before.mode, tree, hashed=True).unkept
            except BadRecord:
                raise CorralError(
                    "io_error", f"the kept tree of {entry.path} is damaged or was replaced "
                    "(it is not what its record lists); nothing was written.") from None

            copied = False

            def copy(dir_fd: int, temp: str) -> None:
                nonlocal copied
                copied = True
                copy_tree(work, name, dir_fd, temp, tree)

            root = self.root(entry.root)
            restore_tree(root, entry.rel, work, name, copy=copy, keep=self.keeper,
                         guard=lambda rel: self._tree_allowed(tool, root, rel, tree))
        finally:
            os.close(work)
        links = [kept for kept in tree if kept.type == "symlink"] if copied else unkept
        self.unkept_links += [{"path": posixpath.join(entry.path, kept.path),
                               "target": kept.target or ""} for kept in links]

    def _unmake(self, entry: Entry, *, recorded: bool = True,
                guard: Callable[[str], None] | None = None) -> None:
        """Remove the directories the change made on its way, deepest first, if empty
        (`recorded`: as changes of their own; not when the change itself never landed)."""
        root = self.root(entry.root)
        for made in reversed(entry.made):
            with contextlib.suppress(CorralError):
                root.rmdir(made, guard=guard, keep=self.keeper if recorded else NO_KEEP)

    def _unmove(self, source: Entry, destination: Entry, tool: str) -> None:
        src_root, dst_root = self.root(source.root), self.root(destination.root)
        if src_root.info(source.rel) is None:
            dst_root.rename(destination.rel, src_root, source.rel, keep=self.keeper,
                            guard=self._moving(tool, dst_root, src_root))
        elif destination.before is None and dst_root.info(destination.rel) is not None:
            raise CorralError("already_exists", f"{source.path} exists again.")
        # (else moved back already, by an undo a kill cut short: it passed the checks)
        if destination.before is not None:
            self._put(destination, destination.before, tool)

    def _cut_back(self, entry: Entry, record_id: str) -> None:
        """An append its writer was killed inside left part of its bytes: cut the file
        back to its size before (remove it, and the directories made for it, if the
        append created it), unless a later change of it was recorded (cutting would
        take that change's bytes too: then the torn part stays, a conflict to undo)."""
        root, rel = self.root(entry.root), entry.rel
        size = None if entry.before is None else entry.before.size

        def untouched_since() -> bool:
            return not any(
                (e.root, e.rel) == (entry.root, rel)
                for record in self._records_after(record_id) for e in record.entries
            )

        if cut_back(root, rel, size, untouched_since) and size is None:
            self._unmake(entry, recorded=False)

    def _records_after(self, record_id: str) -> Iterator[Record]:
        """Every record (committed, or waiting in any work directory) written after
        `record_id`."""
        for later in self.store.listing().records:
            if later > record_id and (record := self.store.record(later)) is not None:
                yield record
        yield from self.store.uncommitted(after=record_id)

    @staticmethod
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

    def _temp_of(self, root: Root, rel: str, pid: int) -> str | None:
        temps = self._temps_of(root, rel, pid)
        return temps[0] if temps else None

    def forget_temps(self, record: Record, pid: int, landed: bool) -> None:
        """Remove the temp files the dead writer `pid` of `record` left beside its
        paths, once the record is settled: any writer's, undo's and rewind's too;
        and, if its change landed, the directory a copied-in delete_directory had
        renamed aside and was removing (the store holds the whole tree)."""
        for entry in record.entries:
            with contextlib.suppress(CorralError):
                root = self.root(entry.root)
                for temp in self._temps_of(root, entry.rel, pid):
                    root.unlink(temp)
                if entry.kind == "remove_tree" and landed:
                    for temp in self._temps_of(root, entry.rel, pid, "dir"):
                        root.remove_tree(temp, recursive=True)

    # -- settle -------------------------------------------------------------

    def landed(self, entry: Entry, record_id: str) -> bool:
        """Did the change of a pending entry land (its writer died mid-call)? A torn
        append is cut back first: it did not land."""
        kind, before, pid = entry.kind, entry.before, id_pid(record_id)
        if kind == "append":
            if self.matches(entry, entry.after):
                return True
            self._cut_back(entry, record_id)
            return False
        # Where the store is on another mount the old file is copied into its blob
        # before the change: a blob, even a whole one, does not say the change
        # landed. The tree does.
        if kind == "remove":
            return self.matches(entry, None)
        if kind == "remove_tree":  # renamed into the store, or copied, then renamed aside
            return self.matches(entry, None) and before is not None and (
                self.store.has_blob(before))
        if kind == "replace" and before is not None:
            if not self.matches(entry, entry.after):
                return False
            root = self.root(entry.root)
            temp = self._temp_of(root, entry.rel, pid)
            if temp is None or before.blob is None:
                return self.store.has_blob(before)
            # swapped in, the old file (left in the temp) not yet wholly taken: take it
            # now, over a copy the kill cut short
            self.store.remove_blob(before.blob)
            self.store.stash_bytes(before.blob, root.read_bytes(
                temp, max_file_bytes=self.max_file_bytes))
            root.unlink(temp)
            return True
        if kind == "move_from":
            return self.matches(entry, None)
        return self.matches(entry, entry.after)


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
            self.restorer._unmake(entry, recorded=False)
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


def settle(restorer: Restorer, pids: list[int] | None) -> int:
    """Commit or forget the pending records of dead writers (`pids`; None: every
    pending record). Returns how many were settled."""
    settled = 0
    for record_id in restorer.store.orphans():  # pending, their writer gone
        if pids is not None and id_pid(record_id) not in pids:
            continue  # a live writer's: it may be writing that very record now
        record = restorer.store.record(record_id, pending=True)
        if record is None:  # torn: its writer died creating it, before any change
            restorer.store.drop(record_id)
            settled += 1
            continue
        if record.tool == PATCH_TOOL:
            try:
                landed = PatchSettler(restorer, record).settle()
            except CorralError:
                continue  # left pending: a later settle tries again
        else:
            try:
                landed = all(restorer.landed(e, record_id) for e in record.entries)
            except CorralError:
                landed = True  # cannot tell: keep it; an undo will call it a conflict
        if landed:
            restorer.store.commit(record_id)
        else:
            restorer.store.drop(record_id, len(record.entries))
        if pids is not None:  # its writer is known dead: nothing writes those temps now
            restorer.forget_temps(record, id_pid(record_id), landed)
        settled += 1
    return settled


# -- undo and rewind ------------------------------------------------------------


def _keys(record: Record) -> set[tuple[str, str]]:
    """The (root, path) keys a record changed: a deleted directory's, every entry
    beneath it too (an undo of any of them puts the whole tree back)."""
    keys = {(entry.root, entry.rel) for entry in record.entries}
    for entry in record.entries:
        if entry.kind == "remove_tree" and entry.before is not None and entry.before.tree:
            keys |= {(entry.root, posixpath.join(entry.rel, kept.path))
                     for kept in entry.before.tree}
    return keys


def _key_of(roots: Roots, path: str) -> set[tuple[str, str]]:
    """The (root, resolved path) keys `path` may have been recorded under."""
    root, rel = roots.locate(path)
    keys = {(root.path, posixpath.normpath(rel))}
    for follow in (False, True):
        try:
            keys.add((root.path, root.resolve(rel, follow=follow)))
        except CorralError as error:
            # "../x" names nothing any record could hold: say so, as every tool does
            # (a final symlink leading out is fine: the link itself may be recorded)
            if error.code == "outside_workspace" and not follow:
                raise
    return keys


def undo(roots: Roots, store: Store, policy: Policy, limits: Any, path: str,
         force: bool) -> dict[str, Any]:
    keys = _key_of(roots, path)
    undone = set()
    # the changes of an undo killed before it finished, by the change it was undoing:
    # (root, rel) -> its newest entry there
    begun: dict[str, dict[tuple[str, str], Entry]] = {}
    target = None
    # An undo cancels the change it reverted once it has finished (its last record
    # says so: DONE): undo after undo steps further back. A rewind's records are
    # changes like a tool's: undo after a rewind takes back the rewind's change of
    # that path (as it was before the rewind).
    seen: list[Record] = []
    records = store.records()
    for record in records:
        seen.append(record)
        if record.undoes is not None:
            if record.done:
                undone.add(record.undoes)
            elif record.undoes not in undone:
                steps = begun.setdefault(record.undoes, {})
                for entry in record.entries:
                    steps.setdefault((entry.root, entry.rel), entry)
            continue
        if record.id in undone:
            continue
        if _keys(record) & keys:
            target = record
            break
    if target is None:
        raise CorralError(
            "not_found", f"there is no recorded change of {shown_path(path)} to undo."
        )
    whole = _group_of(target, seen, records, undone)
    restorer = Restorer(roots, store, policy, limits.max_file_bytes, "undo", target.id)
    # resuming an undo a kill cut short: a path it already put back is as it left it
    resumed = {key for key, step in begun.get(target.id, {}).items()
               if restorer.matches(step, step.after)}
    reasons: dict[str, str] = {}
    restored, conflicts = _revert_one(restorer, whole, force, reasons, resumed)
    if not conflicts:  # (a deleted symlink's undo restores nothing, and lists it)
        for record in whole:  # the host commits them with the undo's other records
            restorer.keeper.ids.append(_finished(store, record.id))
    return {"restored": restored, "conflicts": conflicts, "undone": target.id,
            "removed": _removed(restorer, whole, restored),
            "reasons": reasons, "links_not_restored": restorer.unkept_links,
            "records": restorer.keeper.ids}


def _group_of(target: Record, seen: list[Record], older: Iterator[Record],
              undone: set[str]) -> list[Record]:
    """A change recorded as several (a move between roots: a copy, then a delete) is
    undone whole: the records of `target`'s group not undone yet, newest first. Their
    ids all follow the group's own; `older` goes on from where the search stopped."""
    group = target.group
    if group is None:
        return [target]
    for record in older:
        if record.id < group:
            break
        seen.append(record)
    return [r for r in seen if r.group == group and r.id not in undone and r.undoes is None]


def _finished(store: Store, undone: str) -> str:
    """The undo of `undone` is whole: a record without entries says so. Until it is
    written, undo of the same path resumes that undo instead of stepping back."""
    record_id = new_id()
    store.write_pending(Record(record_id, time.time(), "undo", os.getpid(), (), undoes=undone,
                               done=True))
    store.commit(record_id)
    return record_id


def rewind(roots: Roots, store: Store, policy: Policy, limits: Any, to: str,
           force: bool) -> dict[str, Any]:
    if not is_id(to) or (store.checkpoint_info(to) is None and store.record(to) is None):
        raise CorralError("not_found", f"there is no checkpoint or record {to!r} in the history.")
    checkpoint = store.checkpoint("before rewind to " + to)
    restorer = Restorer(roots, store, policy, limits.max_file_bytes, "rewind")
    restored: list[str] = []
    conflicts: list[str] = []
    reasons: dict[str, str] = {}
    poisoned: set[tuple[str, str]] = set()
    # a path this rewind has put back is as corral found it then: not a conflict
    trusted: set[tuple[str, str]] = set()
    reverted: list[Record] = []
    for record in store.records():  # newest first, listed once: this rewind's own are not in it
        if record.id <= to:
            break
        if record.id in restorer.keeper.ids:
            continue
        keys = _keys(record)
        if keys & poisoned:  # older than a change left alone: left too, and said so
            poisoned |= keys
            for entry in record.entries:
                if entry.path not in conflicts:
                    conflicts.append(entry.path)
                    reasons.setdefault(entry.path, "not taken back to the checkpoint: an "
                                       "older change of it goes with a path left alone")
            continue
        done, failed = _revert_one(restorer, [record], force, reasons, trusted)
        reverted.append(record)
        restored += [p for p in done if p not in restored]
        if failed:
            conflicts += [p for p in failed if p not in conflicts]
            poisoned |= keys
        else:
            trusted |= keys
    restored = [p for p in restored if p not in conflicts]
    return {"restored": restored, "conflicts": conflicts, "checkpoint": checkpoint,
            "removed": _removed(restorer, reverted, restored),
            "reasons": reasons, "links_not_restored": restorer.unkept_links,
            "records": restorer.keeper.ids}


def _left_with(paths: list[str], left: list[str], reasons: dict[str, str]) -> None:
    """A change is reverted whole or not at all: each of its other paths is left too,
    and says for which."""
    unique = list(dict.fromkeys(left))
    named = ", ".join(shown_path(path) for path in unique[:3])
    if len(unique) > 3:
        named += f" and {len(unique) - 3} more"
    for path in paths:
        reasons.setdefault(path, f"left with the rest of its change ({named} could not be "
                                 "restored)")


def _removed(restorer: Restorer, records: list[Record], restored: list[str]) -> list[str]:
    """The restored paths that are gone now: the changes taken back had made them."""
    entries = {e.path: e for record in records for e in record.entries}
    return [p for p in restored if p in entries and restorer.matches(entries[p], None)]


def _revert_one(
    restorer: Restorer, records: list[Record], force: bool, reasons: dict[str, str],
    trusted: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
) -> tuple[list[str], list[str]]:
    """(restored paths, conflicting paths) of reverting one change: `records`, newest
    first (a group's several: checked together as the oldest's tool, reverted newest
    first); a path in `trusted` is not checked against the record's after state."""
    entries = [e for r in reversed(records) for e in r.entries]
    paths = [e.path for e in entries]
    try:
        restorer.check(entries, records[-1].tool)
        if not force:
            changed = [
                e.path for e in entries
                if (e.root, e.rel) not in trusted and not restorer.matches(e, e.after)
            ]
            if changed:
                for path in changed:
                    reasons[path] = "changed since by something other than corral"
                _left_with(paths, changed, reasons)
                return [], paths
        for record in records:
            restorer.revert(record, records[-1].tool)
    except CorralError as error:
        for path in paths:
            reasons[path] = error.message
        return [], paths
    unmade = {link["path"] for link in restorer.unkept_links}
    return [e.path for e in entries if not (  # a deleted symlink: listed, not restored
        e.before is not None and e.before.type == "symlink" and e.path in unmade)], []
