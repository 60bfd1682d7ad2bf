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
import posixpath
from typing import Any

from corral.errors import CorralError
from corral.fs import TEMP_PREFIX, Root, Roots, content_version
from corral.history.keeper import Keeper
from corral.history.store import Store, id_pid, is_id
from corral.policy import Policy, RootSpec

Entry = dict[str, Any]
Record = dict[str, Any]


class Restorer:
    def __init__(
        self, roots: Roots, store: Store, policy: Policy, max_file_bytes: int, tool: str,
        undoes: str | None = None,
    ) -> None:
        self.roots, self.store, self.policy = roots, store, policy
        self.max_file_bytes = max_file_bytes
        self.keeper = Keeper(store, roots.workspace.path, tool, undoes)

    def root(self, path: str) -> Root:
        for root in self.roots.all():
            if root.path == path:
                return root
        raise CorralError("not_found", f"the root {path} of this record is not a root now.")

    # -- checking -----------------------------------------------------------

    def matches(self, entry: Entry, state: Any) -> bool:
        """Is the path of `entry` in `state` now?"""
        root = self.root(entry["root"])
        try:
            info = root.info(entry["rel"])
        except CorralError:
            return False
        if state is None or info is None:
            return state is None and info is None
        if info.type != state["type"]:
            return False
        if "ino" in state and "version" not in state:
            return info.ino == state["ino"]
        if state["type"] == "symlink":
            return info.symlink_target == state.get("target")
        if state["type"] != "file":
            return True
        if "size" in state and info.size != state["size"]:
            return False
        if "version" in state or "tail" in state:
            data = root.read_bytes(entry["rel"], max_file_bytes=self.max_file_bytes)
            if "version" in state:
                return content_version(data) == state["version"]
            before = (entry.get("before") or {}).get("size", 0)
            return content_version(data[before:]) == state["tail"]
        return True

    def check(self, record: Record, tool: str) -> None:
        """path_denied unless the policy lets `tool` write every path of the record."""
        for entry in record["entries"]:
            spec = RootSpec(entry["root"], self.root(entry["root"]).mode)
            if spec.mode != "rw":
                raise CorralError("read_only", f"{entry['path']} lies in a read-only root.")
            for rel in (entry["rel"], *entry.get("made", ())):
                decision = self.policy.decide(tool, spec, rel, write=True)
                if decision.action == "deny":
                    raise CorralError(
                        "path_denied", f"{entry['path']} is denied by the policy.",
                        rule=decision.rule,
                    )

    # -- reverting ------------------------------------------------------------

    def revert(self, record: Record) -> None:
        """Put every path of `record` back to its `before` state."""
        entries = record["entries"]
        if entries and entries[0]["kind"] == "move_from":
            self._unmove(entries[0], entries[1])
            return
        for entry in reversed(entries):
            self._put(entry, entry["before"])
            self._unmake(entry)

    def _put(self, entry: Entry, state: Any) -> None:
        root, rel, keep = self.root(entry["root"]), entry["rel"], self.keeper
        info = root.info(rel)
        if state is None:
            if info is None:
                return
            if info.type == "dir":
                root.rmdir(rel, keep=keep)
            else:
                root.unlink(rel, keep=keep)
            return
        kind = state["type"]
        if kind == "dir":
            if info is None or info.type != "dir":
                if info is not None:
                    root.unlink(rel, keep=keep)
                root.mkdir(rel, keep=keep)
            return
        if kind == "symlink":
            raise CorralError(
                "path_denied", f"{entry['path']} was a symlink, which corral cannot create."
            )
        if "blob" in state:
            data = self.store.read_blob(state)  # checked against the record's size and hash
        else:  # an append: the file as it was is the start of what is there
            data = root.read_bytes(rel, max_file_bytes=self.max_file_bytes)[: state["size"]]
        if info is not None and info.type == "dir":
            root.rmdir(rel, keep=keep)
        root.write_atomic(rel, data, mode=state.get("mode"), keep=keep)

    def _unmake(self, entry: Entry) -> None:
        """Remove the directories the change made on its way, deepest first, if empty."""
        root = self.root(entry["root"])
        for made in reversed(entry.get("made") or ()):
            with contextlib.suppress(CorralError):
                root.rmdir(made, keep=self.keeper)

    def _unmove(self, source: Entry, destination: Entry) -> None:
        src_root, dst_root = self.root(source["root"]), self.root(destination["root"])
        if src_root.info(source["rel"]) is None:
            dst_root.rename(destination["rel"], src_root, source["rel"], keep=self.keeper)
        elif destination["before"] is None:
            raise CorralError("already_exists", f"{source['path']} exists again.")
        if destination["before"] is not None:
            self._put(destination, destination["before"])

    @staticmethod
    def _temp_of(root: Root, rel: str, pid: int) -> str | None:
        """The temp file a writer `pid` left beside `rel` (an atomic write swapped in,
        the old file not yet taken into the store), if there is one."""
        parent = posixpath.dirname(rel) or "."
        prefix = f"{TEMP_PREFIX}{pid}-"
        for entry in root.scandir(parent):
            if entry.path.startswith(prefix) and entry.type == "file":
                return posixpath.join(parent, entry.path) if parent != "." else entry.path
        return None

    # -- settle -------------------------------------------------------------

    def landed(self, entry: Entry, pid: int) -> bool:
        """Did the change of a pending entry land (its writer, `pid`, died mid-call)?"""
        kind, before = entry["kind"], entry["before"]
        if kind in ("replace", "remove") and before is not None:
            if self.store.has_blob(before):  # there, and whole
                return True
            if kind == "remove":
                return self.matches(entry, None)
            root = self.root(entry["root"])
            temp = self._temp_of(root, entry["rel"], pid)
            if temp is None or not self.matches(entry, entry["after"]):
                return False
            # swapped in, the old file not yet taken: take it now (a copy)
            self.store.stash_bytes(before["blob"], root.read_bytes(
                temp, max_file_bytes=self.max_file_bytes))
            root.unlink(temp)
            return True
        if kind == "move_from":
            return self.matches(entry, None)
        return self.matches(entry, entry["after"])


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
        try:
            landed = all(restorer.landed(e, id_pid(record_id)) for e in record["entries"])
        except CorralError:
            landed = True  # cannot tell: keep it; an undo will call it a conflict
        if landed:
            restorer.store.commit(record_id)
        else:
            restorer.store.drop(record_id)
        settled += 1
    return settled


# -- undo and rewind ------------------------------------------------------------


def _keys(record: Record) -> set[tuple[str, str]]:
    return {(entry["root"], entry["rel"]) for entry in record["entries"]}


def _paths(record: Record) -> list[str]:
    return [entry["path"] for entry in record["entries"]]


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
    target = None
    # An undo's record cancels the change it reverted: undo after undo steps further
    # back. A rewind's records are changes like a tool's: undo after a rewind takes
    # back the rewind's change of that path (as it was before the rewind).
    for record in store.records():
        if record.get("undoes"):
            undone.add(record["undoes"])
            continue
        if record["id"] in undone:
            continue
        if _keys(record) & keys:
            target = record
            break
    if target is None:
        raise CorralError("not_found", f"there is no recorded change of {path} to undo.")
    restorer = Restorer(roots, store, policy, limits.max_file_bytes, "undo", target["id"])
    reasons: dict[str, str] = {}
    restored, conflicts = _revert_one(restorer, target, force, reasons)
    return {"restored": restored, "conflicts": conflicts, "undone": target["id"],
            "reasons": reasons, "records": restorer.keeper.ids}


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
    for record in store.records():  # newest first, listed once: this rewind's own are not in it
        if record["id"] <= to:
            break
        if record["id"] in restorer.keeper.ids:
            continue
        keys = _keys(record)
        if keys & poisoned:
            poisoned |= keys
            continue
        done, failed = _revert_one(restorer, record, force, reasons, trusted)
        restored += [p for p in done if p not in restored]
        if failed:
            conflicts += [p for p in failed if p not in conflicts]
            poisoned |= keys
        else:
            trusted |= keys
    restored = [p for p in restored if p not in conflicts]
    return {"restored": restored, "conflicts": conflicts, "checkpoint": checkpoint,
            "reasons": reasons, "records": restorer.keeper.ids}


def _revert_one(
    restorer: Restorer, record: Record, force: bool, reasons: dict[str, str],
    trusted: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
) -> tuple[list[str], list[str]]:
    """(restored paths, conflicting paths) of reverting one record; a path in
    `trusted` is not checked against the record's after state."""
    paths = _paths(record)
    try:
        restorer.check(record, record["tool"])
        if not force:
            changed = [
                e["path"] for e in record["entries"]
                if (e["root"], e["rel"]) not in trusted and not restorer.matches(e, e["after"])
            ]
            if changed:
                for path in changed:
                    reasons[path] = "changed since by something other than corral"
                return [], changed
        restorer.revert(record)
    except CorralError as error:
        for path in paths:
            reasons[path] = error.message
        return [], paths
    return paths, []
