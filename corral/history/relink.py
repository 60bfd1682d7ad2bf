"""The host making again the symlinks an undo or a rewind could not (a worker can
never make a link: links.py). The worker's answer is input: it only names which
deleted link of which committed record to make (record id, root, path below
it); the target comes from that committed record, read by the host. Each link
is recorded as the undo's or the rewind's change before it is made, as a
worker records its changes (a kill in between leaves a pending record the next
settle decides by the tree); a link that cannot be made is a conflict.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import time
from collections.abc import Iterator, Sequence
from typing import Any

from corral.errors import CorralError, shown_path
from corral.fs import Root
from corral.history.links import make_link
from corral.history.records import Entry, Record, State
from corral.history.store import Store, is_id, new_id
from corral.policy import Policy, RootSpec

MAX_LINKS_ASKED = 10_000  # a deleted directory's entries are at most MAX_TREE_ENTRIES


def remake_links(work_path: str | None, result: dict[str, Any], tool: str,
                 roots: Sequence[RootSpec], policy: Policy) -> list[str]:
    """Make again the deleted links a worker's undo or rewind asked for (a worker
    cannot make one: links.py), each recorded as this `tool`'s change in the
    store whose work directory is `work_path` (None: none is made), then, if
    every one was made, finish the undo (its "done" records). A request names a
    committed record and the link's path in it: the target comes from that
    record, never from the worker. A link that cannot be made (its name taken,
    the policy, a record that holds no such link) is a conflict. `result` is
    updated in place; the ids of the records made, to promote with the rest."""
    asked, finish = result.pop("links", None), result.pop("finish", None)
    if work_path is None or not isinstance(asked, list) or not asked:
        return []
    restored, conflicts = result.setdefault("restored", []), result.setdefault(
        "conflicts", [])
    reasons = result.setdefault("reasons", {})
    undoes = result.get("undone") if tool == "undo" else None
    with _making(work_path, result) as (store, opened, ids):
        for ask in asked[:MAX_LINKS_ASKED]:
            try:
                root, rel, path, target = _recorded_link(store, ask)
            except CorralError as error:
                conflicts.append(shown_path(str(ask.get("path", "?") if isinstance(
                    ask, dict) else "?")))
                reasons[conflicts[-1]] = error.message
                continue
            try:
                ids.append(_remake(store, opened, roots, policy, tool, undoes,
                                   (root, rel, path, target)))
                if not any(path.startswith(f"{done}/") for done in restored):
                    restored.append(path)  # (a restored directory's links go unnamed)
            except CorralError as error:
                conflicts.append(path)
                reasons[path] = error.message
        if not conflicts and isinstance(finish, list) and undoes is not None:
            for undone in finish:
                if is_id(undone):
                    ids.append(_finish(store, tool, undone))
    return ids


def remake_snapshot_links(work_path: str | None, result: dict[str, Any], root: str,
                          links: Sequence[tuple[str, str]], roots: Sequence[RootSpec],
                          policy: Policy) -> list[str]:
    """Make again, as a rewind's changes, the symlinks of a snapshot that were
    removed behind corral's back: (path below `root`, target) each, the target
    taken from the host's manifest, never from a worker. A link made moves from
    the result's `links_not_restored` and link `skipped` to `restored`; one that
    cannot be made (its name taken, the policy) is a conflict. The ids of the
    records made, to promote with the rest."""
    if work_path is None or not links:
        return []
    restored, conflicts = result.setdefault("restored", []), result.setdefault(
        "conflicts", [])
    reasons = result.setdefault("reasons", {})
    made: set[str] = set()
    with _making(work_path, result) as (store, opened, ids):
        # each was lost when the snapshot pass walked, after the record pass's links
        # were made: one that pass took back (an earlier rewind's making of it) too
        for rel, target in links[:MAX_LINKS_ASKED]:
            try:
                ids.append(_remake(store, opened, roots, policy, "rewind", None,
                                   (root, rel, rel, target)))
                if rel not in restored:
                    restored.append(rel)
                made.add(rel)
            except CorralError as error:
                conflicts.append(rel)
                reasons[rel] = error.message
    settled = made | set(conflicts)
    result["links_not_restored"] = [
        link for link in result.get("links_not_restored") or []
        if not (isinstance(link, dict) and link.get("path") in settled)]
    result["skipped"] = [
        skip for skip in result.get("skipped") or []
        if not (isinstance(skip, dict) and skip.get("reason") == "link"
                and skip.get("path") in settled)]
    return ids


@contextlib.contextmanager
def _making(work_path: str, result: dict[str, Any]) -> Iterator[
        tuple[Store, dict[str, Root], list[str]]]:
    """The store (fds of its own: History.store is its threads' and locked), the
    roots opened on the way and the ids of the records made, for one run of links
    made again; the ids go into the result's `records` however the run ends."""
    ids: list[str] = []
    opened: dict[str, Root] = {}
    store = Store.open(work_path)
    try:
        yield store, opened, ids
    finally:
        store.close()
        result.setdefault("records", []).extend(ids)
        for handle in opened.values():
            handle.close()


def _recorded_link(store: Store, ask: object) -> tuple[str, str, str, str]:
    """(root, rel, path as shown, target) of the deleted link `ask` names, as the
    committed record it names holds it; not_found if it holds no such link."""
    if not isinstance(ask, dict) or not all(
            isinstance(ask.get(key), str) for key in ("record", "root", "rel")):
        raise CorralError("invalid_arguments", "a link asked for without its record.")
    record = store.record(ask["record"]) if is_id(ask["record"]) else None
    root, rel = ask["root"], ask["rel"]
    for entry in record.entries if record is not None else ():
        before = entry.before
        if entry.root != root or before is None:
            continue
        if entry.rel == rel and before.type == "symlink" and before.target is not None:
            return root, rel, entry.path, before.target
        beneath = entry.rel.rstrip("/") + "/"
        if entry.kind == "remove_tree" and before.tree and rel.startswith(beneath):
            for kept in before.tree:
                if kept.type == "symlink" and kept.path == rel[len(beneath):] and (
                        kept.target is not None):
                    return root, rel, posixpath.join(entry.path, kept.path), kept.target
    raise CorralError("not_found", f"the history holds no deleted link {shown_path(rel)}.")


def _remake(store: Store, opened: dict[str, Root], roots: Sequence[RootSpec], policy: Policy,
            tool: str, undoes: str | None, link: tuple[str, str, str, str]) -> str:
    """Make one link again, recorded first as any change is (a kill in between
    leaves a pending record the next settle decides by the tree); its record id."""
    root_path, rel, path, target = link
    spec = next((spec for spec in roots if spec.path == root_path), None)
    if spec is None or spec.mode != "rw":
        raise CorralError("read_only", f"{shown_path(path)} lies in no root this sandbox writes.")
    if root_path not in opened:
        opened[root_path] = Root(root_path, mode="rw")

    def allowed(resolved: str) -> None:  # as the worker decides: deny refuses, the rest goes
        for name in dict.fromkeys((rel, resolved)):
            decision = policy.decide(tool, spec, name, write=True)
            if decision.action == "deny":
                raise CorralError("path_denied", f"{shown_path(path)} is denied by the policy "
                                  f"(rule {decision.rule}).", rule=decision.rule)

    record = Record(new_id(), time.time(), tool, os.getpid(), (Entry(
        root_path, rel, path, "replace", "create", None, State("symlink", target=target)),),
        undoes=undoes)
    store.write_pending(record)
    try:
        make_link(opened[root_path], rel, target, guard=allowed)
    except BaseException:
        store.drop(record.id, blobs=0)
        raise
    store.commit(record.id)
    return record.id


def _finish(store: Store, tool: str, undone: str) -> str:
    """The undo of `undone` is whole (restore._finished, once its links are made)."""
    record = Record(new_id(), time.time(), tool, os.getpid(), (), undoes=undone, done=True)
    store.write_pending(record)
    store.commit(record.id)
    return record.id
