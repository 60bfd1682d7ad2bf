"""Undo and rewind: run in a confined worker, over the roots and the store it
holds. An undo finds the newest change of a path not undone yet and reverts it
whole (revert.py); a rewind reverts every change since a checkpoint or record,
newest first. A path changed since by something other than corral is a conflict,
left alone unless `force`. Crash recovery is recover.py's.
"""

from __future__ import annotations

import os
import posixpath
import time
from collections.abc import Iterator
from typing import Any

from corral.errors import CorralError, shown_path
from corral.fs import Roots
from corral.history.records import Entry, Record
from corral.history.revert import Restorer
from corral.history.store import Store, is_id, new_id
from corral.policy import Policy


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
            if record.tool != "undo":
                continue  # a rewind's closing record (rewind, below): no change
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
    finish = [] if conflicts else [record.id for record in whole]
    if not restorer.links:  # else the host finishes it, once it has made the links
        for record_id in finish:  # the host commits them with the undo's other records
            restorer.keeper.ids.append(_finished(store, record_id))
        finish = []
    return {"restored": restored, "conflicts": conflicts, "undone": target.id,
            "removed": _removed(restorer, whole, restored),
            "reasons": reasons, "links": restorer.links, "finish": finish,
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


def _finished(store: Store, undone: str, tool: str = "undo") -> str:
    """The undo of `undone` is whole: a record without entries says so. Until it is
    written, undo of the same path resumes that undo instead of stepping back. (A
    rewind's: the tree's recorded paths are as at the checkpoint `undone`.)"""
    record_id = new_id()
    store.write_pending(Record(record_id, time.time(), tool, os.getpid(), (), undoes=undone,
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
    closed: _Closed | None = None
    for record in store.records():  # newest first, listed once: this rewind's own are not in it
        if record.id <= to:
            break
        if record.id in restorer.keeper.ids:
            continue
        if record.tool == "rewind" and record.done and record.undoes is not None:
            if closed is None and record.undoes >= to:
                closed = _Closed(record.id, record.undoes, store, restorer)
            continue
        if closed is not None and record.id <= closed.to:
            closed = None
        keys = _keys(record)
        if closed is not None and closed.passes_over(record, keys & poisoned):
            continue
        if keys & poisoned:  # older than a change left alone: left too, and said so
            poisoned |= keys
            for entry in record.entries:
                if entry.path not in conflicts:
                    conflicts.append(entry.path)
                    reasons.setdefault(entry.path, "not taken back to the checkpoint: an "
                                       "older change of it goes with a path left alone")
            continue
        if closed is not None:
            closed.taken(record)
        done, failed = _revert_one(restorer, [record], force, reasons, trusted)
        reverted.append(record)
        restored += [p for p in done if p not in restored]
        if failed:
            conflicts += [p for p in failed if p not in conflicts]
            poisoned |= keys
        else:
            trusted |= keys
    restored = [p for p in restored if p not in conflicts]
    # Whole, to a checkpoint: said so, and a later rewind to it or before skips what
    # lies between (else each rewind to an old checkpoint took back, one by one, every
    # record the rewinds before it wrote: twice as many records each time).
    closing = [_finished(store, to, "rewind")] if not conflicts and not restorer.links and (
        store.checkpoint_info(to) is not None) else []
    return {"restored": restored, "conflicts": conflicts, "checkpoint": checkpoint,
            "removed": _removed(restorer, reverted, restored),
            "reasons": reasons, "links": restorer.links, "records": restorer.keeper.ids,
            "closing": closing}


class _Closed:
    """The records between a rewind's closing record (`marker`) and the checkpoint
    it rewound to (`to`): that rewind took each back, so a rewind going further
    passes over them, net nothing, where the tree is as that rewind left it. A
    path is as it left it if it is as the newest of them left it (decided once);
    one changed since, by something other than corral, or a record of a root that
    rewind did not have (its closing record is not in that root's kept
    directory), is taken back one by one as ever, and so is each older record of
    the same paths."""

    def __init__(self, marker: str, to: str, store: Store, restorer: Restorer) -> None:
        self.marker, self.to, self._store, self._restorer = marker, to, store, restorer
        self._as_left: dict[tuple[str, str], bool] = {}

    def passes_over(self, record: Record, poisoned: set[tuple[str, str]]) -> bool:
        if poisoned or not all(self._store.mirrored(self.marker, e.root)
                               for e in record.entries):
            return False
        for entry in record.entries:
            key = (entry.root, entry.rel)
            if key not in self._as_left:
                try:
                    self._as_left[key] = self._restorer.matches(entry, entry.after)
                except (CorralError, OSError):
                    self._as_left[key] = False
        return all(self._as_left[(e.root, e.rel)] for e in record.entries)

    def taken(self, record: Record) -> None:
        """A record of the span taken back after all: its paths are no longer as the
        closing rewind left them."""
        self._as_left.update(((e.root, e.rel), False) for e in record.entries)


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
    linked = {link["path"] for link in restorer.links}
    return [e.path for e in entries if not (  # a deleted symlink: the host makes it
        e.before is not None and e.before.type == "symlink" and e.path in linked)], []
