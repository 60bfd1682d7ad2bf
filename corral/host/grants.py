"""Remembered approvals: the grants a sandbox issued when its approver answered
`Approval(True, remember="path" | "rule")`, for the life of the sandbox.

A grant is checked in the worker, on the resolved path (tools/access.py): a call
carries the grants that can apply to it, and the worker says which one let each
path through (Meta.grants). What can apply: its tool's rule grants, and its
tool's path grants whose file the call names, as the host can tell by the
arguments alone: the resolved path (root-relative, or absolute), a spelling the
grant was asked about with, or a directory above either. So the common call
carries none, and a sandbox holding many grants sends only the few that matter;
a call that reaches a granted file by another name is asked again (a grant sent
too seldom asks once more, never lets a path through). That claim comes from a
process that may have been made to misbehave, so `checked` keeps only uses of a
grant this sandbox sent with the call, on a path that grant covers; any other is
dropped (not counted, not audited under that id) and logged.

- path grant: that tool on one resolved path (its root and root-relative path).
- rule grant: that tool on every path the same supervised rule decides; rule ""
  stands for what the tool's "supervised" mode or the default action asks about
  (paths a named supervised rule covers still ask).
Either covers only the kind of stop it was given for: a stop that another tool's
mode makes too (apply_patch's Delete File and Move under delete_file's
"supervised") has that tool as its `mode`, a scope of its own, so a grant for a
patch's edits never lets its deletes through, nor the other way round.
"""

from __future__ import annotations

import itertools
import logging
import posixpath
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from corral.calls.messages import GrantRef, GrantUse, NeedsApproval
from corral.policy import Policy, RootSpec
from corral.tool_table import EVERY_PATH_ARGUMENT, PATCH_ARGUMENT, TABLE
from corral.tools.access import approval_key

if TYPE_CHECKING:
    from corral.tools.patch_format import FilePatch

log = logging.getLogger("corral")
REMEMBER = ("once", "path", "rule")
# Grants one sandbox holds at most: every call of a tool carries that tool's grants,
# so their number bounds the message. Past it an approval is not remembered (the
# person is asked again next time) rather than an older grant silently dropped.
MAX_GRANTS = 256


@dataclass
class Grant:
    id: str
    tool: str
    root: str | None  # a path grant's root; None: a rule grant holds in every root
    path: str | None  # root-relative, resolved (a path grant)
    rule: str | None  # a rule grant's rule ("": the tool's mode or default action)
    created: str  # ISO 8601, UTC
    uses: int = 0
    # a path grant's names a call may use for its file: the resolved path (absolute,
    # and root-relative in the workspace) and the spellings it was asked about with
    # (replaced, never changed in place: for_call reads it without the lock)
    names: frozenset[str] = frozenset()
    mode: str | None = None  # the other tool whose mode's stops it covers (NeedsApproval.mode)

    @property
    def ref(self) -> GrantRef:
        if self.path is not None and self.root is not None:
            return GrantRef(self.id, approval_key(self.root, self.path), None, self.mode)
        return GrantRef(self.id, None, self.rule, self.mode)

    def public(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"id": self.id, "tool": self.tool, "root": self.root}
        if self.path is not None:
            shown["path"] = self.path
        else:
            shown["rule"] = self.rule or None  # None: the tool's mode or default action
        if self.mode is not None:
            shown["mode"] = self.mode
        return {**shown, "created": self.created, "uses": self.uses}


class Grants:
    """One sandbox's grants; thread-safe. Ids are "g1", "g2", ...: short, never
    reused within the sandbox (a forgotten id stays forgotten)."""

    def __init__(self, policy: Policy, roots: Sequence[RootSpec]) -> None:
        self._policy = policy
        self._roots = {root.path: root for root in roots}
        self._workspace = roots[0].path
        self._grants: dict[str, Grant] = {}
        self._by_tool: dict[str, _ToolGrants] = {}  # each tool's grants, indexed
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def holds(self, tool: str) -> bool:
        """Whether any grant of `tool` is held (a call of it may carry one)."""
        return tool in self._by_tool

    def for_call(self, tool: str, arguments: dict[str, Any],
                 files: Sequence[FilePatch]) -> tuple[GrantRef, ...]:
        """The grants a call of `tool` with these (checked) arguments and the files
        its patch changes carries to its worker: its rule grants, and the path
        grants of files it names (usually none)."""
        held = self._by_tool.get(tool)
        if held is None:
            return ()
        named = named_paths(tool, arguments) + [
            posixpath.normpath(name) for change in files
            for name in (change.path, change.move_to) if name is not None]
        if "." in named:  # the workspace itself: everything in it
            return tuple([grant.ref for grant in held.grants])
        found = {grant.id: grant.ref for name in named for grant in held.under.get(name, ())}
        return held.rules + tuple(found.values())

    def issue(self, tool: str, needed: Sequence[NeedsApproval], remember: str) -> list[Grant]:
        """The grants an approval remembered as `remember` makes for these paths (an
        identical grant already held is given back instead of a new one)."""
        wanted: set[tuple[str | None, str | None, str | None, str | None]]
        spellings: dict[tuple[str | None, str | None], set[str]] = {}
        if remember == "path":
            wanted = {(need.root, need.resolved, None, need.mode) for need in needed}
            for need in needed:
                spellings.setdefault((need.root, need.resolved), set()).add(
                    posixpath.normpath(need.path))
        elif remember == "rule":
            wanted = {(None, None, need.rule or "", need.mode) for need in needed}
        else:
            return []
        issued = []
        with self._lock:
            for root, path, rule, mode in sorted(wanted, key=repr):
                held = next((g for g in self._grants.values() if (
                    g.tool, g.root, g.path, g.rule, g.mode) == (tool, root, path, rule, mode)),
                    None)
                if held is None:
                    if len(self._grants) >= MAX_GRANTS:
                        log.warning("corral: %d approvals remembered already; this one is "
                                    "not (forget some with Sandbox.forget)", MAX_GRANTS)
                        break
                    held = Grant(f"g{next(self._ids)}", tool, root, path, rule, _now(),
                                 mode=mode)
                    if root is not None and path is not None:
                        absolute = posixpath.join(root, path) if path != "." else root
                        held.names = frozenset(
                            (absolute, path) if root == self._workspace else (absolute,))
                    self._grants[held.id] = held
                held.names = held.names | spellings.get((root, path), set())
                issued.append(held)
            self._index(tool)
        return issued

    def checked(self, tool: str, sent: Sequence[GrantRef],
                uses: Sequence[GrantUse]) -> tuple[GrantUse, ...]:
        """The uses a worker claims that hold: a grant sent with this call, on a path
        it covers. The rest are dropped and logged."""
        refs = {ref.id: ref for ref in sent}
        kept = []
        for use in uses:
            ref = refs.get(use.id)
            if ref is not None and self._covers(tool, ref, use):
                kept.append(use)
            else:
                log.warning("corral: a worker claimed grant %r for %s on %r, which it does "
                            "not cover; ignored", use.id[:40], tool, use.resolved[:200])
        return tuple(kept)

    def used(self, uses: Sequence[GrantUse]) -> None:
        """Count a finished call's uses (of grants still held)."""
        with self._lock:
            for grant_id in dict.fromkeys(use.id for use in uses):
                if grant_id in self._grants:
                    self._grants[grant_id].uses += 1

    def listed(self) -> list[dict[str, Any]]:
        with self._lock:
            return [grant.public() for grant in self._grants.values()]

    def forget(self, grant_id: str | None = None) -> int:
        """Drop one grant (or all): how many were dropped. Calls already sent with it
        may still use it; later ones do not carry it."""
        with self._lock:
            if grant_id is None:
                dropped = list(self._grants.values())
            else:
                dropped = [self._grants[grant_id]] if grant_id in self._grants else []
            for grant in dropped:
                del self._grants[grant.id]
                self._index(grant.tool)
        return len(dropped)

    def _index(self, tool: str) -> None:
        """Rebuild the tool's index (under the lock; for_call reads it without)."""
        grants = tuple(g for g in self._grants.values() if g.tool == tool)
        if not grants:
            self._by_tool.pop(tool, None)
            return
        under: dict[str, list[Grant]] = {}
        for grant in grants:
            for name in grant.names:
                for above in _self_and_above(name):
                    under.setdefault(above, []).append(grant)
        self._by_tool[tool] = _ToolGrants(
            grants, tuple(g.ref for g in grants if g.path is None),
            {name: tuple(found) for name, found in under.items()})

    def _covers(self, tool: str, ref: GrantRef, use: GrantUse) -> bool:
        # a grant of another tool's stops: only while that tool's mode makes them
        if ref.mode is not None and self._mode(ref.mode) != "supervised":
            return False
        if ref.key is not None:
            return ref.key == approval_key(use.root, use.resolved)
        root, row = self._roots.get(use.root), TABLE.get(tool)
        if root is None or row is None:
            return False
        # A tool may touch a path to write it or only to read it (copy_file's source).
        for write in (True, False) if row.writes else (False,):
            decision = self._policy.decide(tool, root, use.resolved, write=write)
            if decision.action == "supervised" and (decision.rule or "") == ref.rule:
                return True
            if decision.action == "allow" and ref.rule == "" and "supervised" in (
                    self._mode(tool), self._mode(ref.mode)):
                return True
        return False

    def _mode(self, tool: str | None) -> str | None:
        row = TABLE.get(tool) if tool is not None else None
        return self._policy.tool_mode(row.name, writes=row.writes) if row else None


class _ToolGrants(NamedTuple):
    """One tool's grants, as for_call looks them up: a call naming a path gets the
    path grants of that file and of every file beneath it (a directory it moves)."""

    grants: tuple[Grant, ...]  # oldest first
    rules: tuple[GrantRef, ...]  # rule grants travel with every call of the tool
    under: dict[str, tuple[Grant, ...]]  # a name, or a directory above it -> path grants


def _self_and_above(name: str) -> list[str]:
    """"docs/a.md" -> ["docs/a.md", "docs"]; "/w/docs" -> ["/w/docs", "/w"]."""
    found = []
    while name not in ("", "/", "."):
        found.append(name)
        name = posixpath.dirname(name)
    return found


def named_paths(tool: str, arguments: dict[str, Any]) -> list[str]:
    """The paths a call's path arguments name (a patch's are its files: for_call),
    normalised lexically (the ledger's audit takes them too); an unknown tool's
    are those of any argument some tool takes as a path."""
    row = TABLE.get(tool)
    named: list[str] = []
    for key in row.path_arguments if row is not None else EVERY_PATH_ARGUMENT:
        value = arguments.get(key)
        if isinstance(value, str) and key != PATCH_ARGUMENT:
            named.append(value)
        elif isinstance(value, list):
            named += [path for path in value if isinstance(path, str)]
    return [posixpath.normpath(p) for p in named]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
