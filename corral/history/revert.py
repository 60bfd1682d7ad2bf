"""Putting one record's paths back: run in a confined worker, over the roots and
the store it holds. Every restoring change goes through the same Root calls as a
tool's, with a Keeper, so what it does is itself recorded (an undo can be undone,
a rewind rewound); each is checked by the policy as the tool that made the change.

A record is reverted only if each path it names is still as the record left
it (its `after` state); otherwise that path was changed by something other
than corral since, and it is a conflict left alone unless `force` (restore.py
decides; `matches` says).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Callable

from corral.errors import CorralError
from corral.fs import NO_KEEP, MoveGuard, Root, Roots, content_version
from corral.history.keeper import Keeper, shown
from corral.history.records import BadRecord, Entry, Kept, Record, State
from corral.history.root_changes import restore_tree
from corral.history.store import Store
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
        # deleted symlinks to make again, which a worker cannot: the host does
        # (links.py), taking each target from the committed record named here
        self.links: list[dict[str, str]] = []
        self._record = ""  # the record being reverted

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
        entries, self._record = record.entries, record.id
        if entries and entries[0].kind == "move_from":
            self._unmove(entries[0], entries[1], tool)
            return
        if entries and entries[0].kind == "remove_tree":
            self._put_tree(entries[0], tool)
            return
        for entry in reversed(entries):
            self._put(entry, entry.before, tool)
            self.unmake(entry, guard=self.guard(tool, self.root(entry.root)))

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
        if kind == "symlink":
            if info is None:
                self._link(entry.root, rel, entry.path)
                return
            if info.type == "symlink" and info.symlink_target == state.target:
                return  # made again already (by an undo a kill cut short)
            raise CorralError("already_exists", f"{entry.path} was a symlink, and its name is "
                              "taken now: the link was not made again.")
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
        directory, or on another file system). Its symlinks come back with a move
        of a tree that holds them; the others are asked of the host (`links`)."""
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
        for kept in links:
            self._link(entry.root, posixpath.join(entry.rel, kept.path),
                       posixpath.join(entry.path, kept.path))

    def _link(self, root: str, rel: str, path: str) -> None:
        """A deleted link of the record being reverted, for the host to make again."""
        self.links.append({"record": self._record, "root": root, "rel": rel, "path": path})

    def unmake(self, entry: Entry, *, recorded: bool = True,
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
