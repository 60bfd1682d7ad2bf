"""Workspace checkpoints, the host's side: a checkpoint that snapshots the whole
workspace root (snapshots.py), the diff against one, and a rewind that, after
taking back corral's own changes (restore.rewind), brings back from the snapshot
what something else changed. Every walk and every change of the tree runs in a
confined worker (sandbox/snapshot_walk.py), handed its instructions as a plan file in the
root's kept directory; what it answers is checked here before it is stored.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Set
from typing import Any, NamedTuple

from corral.calls.messages import Answer, HistoryRequest, Meta, error_answer
from corral.errors import CorralError
from corral.history.host import History
from corral.history.intent import Held, Intent, begin, claim, intent_name
from corral.history.snapshot_answers import Answer as Shape
from corral.history.snapshot_answers import RestoreAnswer, WalkAnswer, read_answer
from corral.history.snapshots import (
    MAX_DELTAS,
    OBJECT,
    OBJECTS,
    REASONS,
    Item,
    Manifest,
    Snapshots,
    apply_delta,
    item_from_wire,
    plain_path,
)
from corral.history.store import kept_name, new_id

Submit = Callable[[HistoryRequest], Answer]
log = logging.getLogger("corral")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


class Around(NamedTuple):
    """What the sandbox does around a rewind's passes: the symlinks no worker can
    make, made by the host (history/relink.py), and a killed worker's records."""

    settle: Callable[[], None]  # the records of a killed worker, settled
    relinked: Callable[[Answer], Answer]  # the record pass's deleted links made again
    linked: Callable[[Answer, str], Answer]  # (answer, target): the snapshot's lost links


class Checkpoints:
    """The snapshots of one sandbox's workspace root (a writable one, history on)."""

    def __init__(self, history: History, root: str, ignore: tuple[str, ...],
                 budget_s: float, watch: bool = True) -> None:
        """`budget_s`: how long one walk may copy before it leaves the rest to the next
        request (each must end within the call timeout). `watch`: a checkpoint's walk
        may list only the directories the worker's watch saw change."""
        self.history, self.ignore, self.budget_s = history, ignore, budget_s
        self.watch = watch
        self._kept_name = kept_name(root)
        self._intent = intent_name(self._kept_name)
        self.snaps = Snapshots(history.store.home, -1, history.store.fd)
        self.last: dict[str, Any] | None = None  # what the last checkpoint's snapshot cost

    def close(self) -> None:
        """Nothing is held between calls (a sandbox's fds are counted)."""

    @contextlib.contextmanager
    def _kept(self) -> Iterator[None]:
        """The root's kept directory, open for one call (and the calls it makes)."""
        if self.snaps.kept >= 0:
            yield
            return
        self.snaps.kept = os.open(self._kept_name, _DIR_FLAGS, dir_fd=self.history.store.home)
        try:
            self.snaps.objects = self._objects()
            try:
                yield
            finally:
                os.close(self.snaps.objects)
                self.snaps.objects = -1
        finally:
            os.close(self.snaps.kept)
            self.snaps.kept = -1

    def _objects(self) -> int:
        """The kept directory's OBJECTS, open; made the first time, and the blobs a
        store made before it moved in."""
        try:
            return os.open(OBJECTS, _DIR_FLAGS, dir_fd=self.snaps.kept)
        except FileNotFoundError:
            pass
        with contextlib.suppress(FileExistsError):
            os.mkdir(OBJECTS, 0o700, dir_fd=self.snaps.kept)
        self.snaps.objects = os.open(OBJECTS, _DIR_FLAGS, dir_fd=self.snaps.kept)
        try:
            with self.history.locked():
                self.snaps.adopt()
        except BaseException:
            os.close(self.snaps.objects)
            self.snaps.objects = -1
            raise
        return self.snaps.objects

    def has(self, checkpoint_id: str) -> bool:
        """A snapshot of that checkpoint is there: a rewind to it is this class's (of
        one the store's bounds evicted too: it refuses it, clearly)."""
        return self.snaps.has(checkpoint_id) or self.snaps.evicted(checkpoint_id)

    # -- checkpoint ------------------------------------------------------------

    def checkpoint(self, submit: Submit, label: str | None) -> str:
        with self._kept():
            return self._checkpoint(submit, label)

    def _checkpoint(self, submit: Submit, label: str | None, spare: str | None = None) -> str:
        """Snapshot the root, then the checkpoint that names it: a checkpoint that
        exists has its whole snapshot (a kill before leaves only what the next
        checkpoint sweeps). Room is made by dropping the oldest snapshots, never
        `spare`'s (the rewind this snapshot comes before needs it)."""
        checkpoint_id = new_id()
        with self.history.locked():
            self.snaps.sweep_staged()
            base = self.snaps.newest()
        # the tree walked whole when this snapshot will be written whole: what no
        # watch reports (a write through a shared mmap) is caught every MAX_DELTAS
        watched = base is not None and self.snaps.deltas(base.id) < MAX_DELTAS
        result = self._walk(submit, checkpoint_id, {
            "base": base.id if base else None, "stage": True, "ignore": list(self.ignore),
            "token": checkpoint_id, "budget_s": self.budget_s,
            **({"watch": "use" if watched else "renew"} if self.watch else {})})
        if base is not None and result.base != base.id:
            # the worker read no base (its kept link gone or damaged): every file it
            # walked is in its answer, none it did not, so this snapshot is whole,
            # this walk's alone (the base's paths would keep what is gone)
            base = None
        staged: list[tuple[Item, str]] = []
        try:
            changed, removed, skipped = _changes(result, checkpoint_id)
            read = result.read_bytes
            pending = _pending(result, None)
            while pending:  # what the walk listed but had no time to copy
                more = self._walk(submit, checkpoint_id, {
                    "copy": pending, "token": checkpoint_id, "offset": len(changed),
                    "budget_s": self.budget_s})
                got, gone, left = _changes(more, checkpoint_id)
                asked = set(pending)
                if not {i.path for i, _ in got} | set(gone) <= asked:
                    raise ValueError("a copy of a file that was not asked for")
                # a file gone before its copy: gone from the snapshot, if its base had it
                removed = removed + [p for p in gone if base and p in base.items]
                changed, skipped = changed + got, skipped + left
                read += more.read_bytes
                pending = _pending(more, asked)
            others: list[Item] = []
            for item, name in changed:
                if item.type == "file":
                    if name is None:
                        raise ValueError(f"no copy of the changed file {item.path!r}")
                    staged.append((item, name))
                else:
                    others.append(item)
            # the base with the change, checked for the cost of the change
            items = apply_delta(base.items if base else {},
                                others + [item for item, _ in staged], removed)
        except ValueError as exc:
            _drop(self.snaps, checkpoint_id)
            raise CorralError("io_error", f"the worker's snapshot was refused ({exc}); "
                              "nothing was stored.") from None
        with self.history.locked():
            need = sum(item.size for item, _ in staged)
            if self._room() < need:
                keep = {i.hash for i in items.values() if i.hash}
                self.snaps.collect(keep)
                while self._room() < need and self.snaps.drop_oldest(spare):
                    self.snaps.collect(keep)
            stored = self.snaps.take(staged, self._room())
            for item, _ in staged:  # now with the hashes the host took
                items[item.path] = item
            self.snaps.publish(Manifest(checkpoint_id, items, skipped), base,
                               others + [item for item, _ in staged], removed)
        made = self.history.checkpoint(label, checkpoint_id)
        self.last = {"checkpoint": made, "entries": len(items), "walked": result.walked,
                     "read_bytes": read, "stored_bytes": stored}
        return made

    def _room(self) -> int:
        return self.history.options.max_bytes - self.history.held - self.snaps.held()

    def _walk(self, submit: Submit, token: str, plan: dict[str, Any]) -> WalkAnswer:
        return self._ask(submit, token, plan, "snapshot_walk", WalkAnswer)

    def _restore(self, submit: Submit, token: str, plan: dict[str, Any]) -> RestoreAnswer:
        return self._ask(submit, token, plan, "snapshot_restore", RestoreAnswer)

    def _ask(self, submit: Submit, token: str, plan: dict[str, Any], op: str,
             shape: type[Shape]) -> Shape:
        with self.history.locked():
            name = self.snaps.write_plan(token, plan)
        try:
            answer = submit(HistoryRequest(op, to=name))
        finally:
            with self.history.locked():
                self.snaps.drop_plan(name)
        if not answer.ok or not isinstance(answer.result, dict):
            _drop(self.snaps, token)
            error = answer.error or {}
            raise CorralError(str(error.get("code", "io_error")),
                              f"the snapshot failed: {error.get('message', 'no answer')}")
        try:
            return read_answer(self.snaps.work, token, answer.result, shape)
        except ValueError as exc:
            _drop(self.snaps, token)
            raise CorralError("io_error", f"the worker's snapshot was refused ({exc}); "
                              "nothing was stored.") from None

    # -- diff -------------------------------------------------------------------

    def diff(self, submit: Submit, checkpoint_id: str) -> dict[str, list[dict[str, str]]]:
        with self._kept():
            return self._diff(submit, checkpoint_id)

    def _diff(self, submit: Submit, checkpoint_id: str) -> dict[str, list[dict[str, str]]]:
        manifest = self._snapshot(checkpoint_id)
        token = new_id()
        result = self._walk(submit, token, {
            "base": checkpoint_id, "stage": False, "ignore": list(self.ignore),
            "since": checkpoint_id, "token": token})
        if result.base != checkpoint_id:
            raise CorralError("io_error", f"the snapshot of {checkpoint_id!r} cannot be read "
                              "by the root's workers (its copy in their kept directory is "
                              "gone or damaged); nothing is known of what changed since.")
        try:
            changed, removed, _ = _changes(result, None)
        except ValueError as exc:
            raise CorralError("io_error", f"the worker's diff was refused ({exc}).") from None
        by = result.by or {}

        def shown(path: str) -> dict[str, str]:
            return {"path": path, "by": "corral" if by.get(path) == "corral" else "other"}

        return {"changed": [shown(i.path) for i, _ in changed if i.path in manifest.items],
                "added": [shown(i.path) for i, _ in changed if i.path not in manifest.items],
                "removed": [shown(path) for path in removed if path in manifest.items]}

    def links_of(self, checkpoint_id: str, paths: Iterable[object]) -> list[tuple[str, str]]:
        """(path, target) of each of `paths` that the snapshot holds as a symlink:
        the target as the host's manifest holds it."""
        items = self._snapshot(checkpoint_id).items
        return [(path, item.target) for path in dict.fromkeys(paths)
                if isinstance(path, str) and (item := items.get(path)) is not None
                and item.type == "symlink" and item.target is not None]

    def _snapshot(self, checkpoint_id: str) -> Manifest:
        manifest = self.snaps.load(checkpoint_id)
        if manifest is None and self.snaps.evicted(checkpoint_id):
            raise CorralError("not_found", f"the checkpoint {checkpoint_id!r} was evicted "
                              "from the history (its max_bytes or max_age_days), and its "
                              "snapshot with it; nothing was written.")
        if manifest is None:
            raise CorralError("not_found", f"there is no snapshot of {checkpoint_id!r} in the "
                              "history (a checkpoint made with [history] snapshots = true).")
        return manifest

    # -- rewind -----------------------------------------------------------------

    def rewind(self, submit: Submit, checkpoint_id: str, force: bool, around: Around) -> Answer:
        with self._kept():
            return self._rewind(submit, checkpoint_id, force, around)

    def _rewind(self, submit: Submit, checkpoint_id: str, force: bool,
                around: Around) -> Answer:
        """corral's changes since the checkpoint taken back (restore.rewind), then every
        other difference from its snapshot: a conflict, or with `force` brought back.
        A snapshot of the tree as it is comes first (its id is the result's
        `checkpoint`), then the intent that names the two (history/intent.py):
        from there on a kill of the worker or the host leaves the rewind to be
        finished, whole, by this sandbox or the next one opened."""
        target = self._snapshot(checkpoint_id)
        before = self._snapshot(self._checkpoint(
            submit, f"before rewind to {checkpoint_id}", spare=checkpoint_id))
        with self.history.locked():
            held = begin(self.history.store.home, self._intent,
                         Intent(new_id(), checkpoint_id, before.id, force))
        return self._finish(submit, held, target, before, force, around, fresh=True)

    def settle(self, submit: Submit, around: Around) -> tuple[Answer, str] | None:
        """Finish the rewind a dead writer's intent names, if there is one: rolled
        forward (run again to its target, as its caller asked), or, if the target's
        snapshot is gone since, rolled back (to the tree its "before" snapshot
        holds). Either leaves the whole tree as one of the two. (its answer, the
        checkpoint rewound to); None: no intent to finish (none, its writer lives,
        or it was refused)."""
        held = claim(self.history.store.home, self._intent)
        if held is None:
            return None
        with self._kept():
            try:
                target, before, force = self._pair(held.intent)
            except CorralError as error:
                log.warning("corral: history: refused the rewind intent %s (%s); removed, "
                            "nothing of the tree changed", held.name, error.message)
                with self.history.locked():
                    held.end()
                return None
            log.warning("corral: history: finishing a rewind to %s cut short by a crash",
                        target.id)
            return self._finish(submit, held, target, before, force, around), target.id

    def _pair(self, intent: Intent) -> tuple[Manifest, Manifest, bool]:
        """(the snapshot to rewind to, the "before" one, force) of an intent, checked:
        its "before" is the checkpoint a rewind to its target made."""
        info = self.history.store.checkpoint_info(intent.before)
        if info is None or info.label != f"before rewind to {intent.target}":
            raise CorralError("not_found", "its checkpoints are not a rewind's")
        before = self._snapshot(intent.before)
        if not self.snaps.has(intent.target):  # evicted since: all before instead
            return before, before, True
        return self._snapshot(intent.target), before, intent.force

    def _finish(self, submit: Submit, held: Held, target: Manifest, before: Manifest,
                force: bool, around: Around, *, fresh: bool = False) -> Answer:
        """Run a rewind whose intent `held` is written to its end. A worker killed on
        the way: its records settled, the rewind runs again (from where the kill
        left the tree, it gives the same tree), once; killed again, the intent is
        left for the next settle. Any other end is final: the intent goes.
        `fresh`: `before` was just walked (not a crashed rewind's, finished)."""
        final = False
        try:
            for attempt in range(2):
                if attempt:
                    around.settle()
                try:
                    answer = self._passes(submit, target, before, force, around,
                                          fresh=fresh and not attempt)
                except CorralError as error:
                    answer = error_answer("rewind", error)
                if not _crashed(answer):
                    break
            final = not _crashed(answer)
        finally:
            if final:
                with self.history.locked():
                    held.end()
            else:
                held.let_go()
        return answer

    def _passes(self, submit: Submit, target: Manifest, before: Manifest,
                force: bool, around: Around, *, fresh: bool = False) -> Answer:
        """The record pass (the links it took back made by the host), then the
        snapshot pass, which sees them (with `force`, the links it finds lost made
        after it); every blob the rewind may write hashed before anything changes.
        `fresh` (the tree is as `before`'s walk saw it, unless the record pass
        writes): the snapshot pass may take its paths from the two snapshots."""
        for item in _differing(before, target):  # what it will write, checked first
            self.snaps.verify(item)
        first = around.relinked(submit(HistoryRequest("rewind", to=target.id, force=force)))
        if not first.ok or not isinstance(first.result, dict):
            return first
        token = new_id()
        ids = tuple(first.meta.history_ids)
        try:
            second = self._restore(submit, token, {
                "force": force, "target": target.id, "ignore": list(self.ignore),
                "token": token, "checked": self.snaps.identity(target.id),
                **(_listed(first, before, target) if fresh else {})})
        except (CorralError, OSError) as error:
            code, message = (error.code, error.message) if isinstance(error, CorralError) else (
                "io_error", f"the snapshot is gone ({error.strerror})")
            return Answer(False, "rewind", None, None, {
                "code": code, "message": "corral's changes were taken back; the rest "
                f"failed: {message}"}, Meta(history_ids=ids))
        domain = target.items.keys() | before.items.keys()
        result = _merged(first.result, second, target, before.id, domain)
        ids += tuple(second.records)
        answer = Answer(True, "rewind", result, "", meta=Meta(history_ids=ids))
        return around.linked(answer, target.id) if force else answer


def _crashed(answer: Answer) -> bool:
    """Its worker was killed (or outlived its timeout): the rewind may be part-way."""
    return not answer.ok and (answer.error or {}).get("code") in ("worker_crashed", "timeout")


def _differing(now: Manifest, then: Manifest) -> list[Item]:
    """The files of `then` that `now` does not hold as they were."""
    held, had = now.items, then.items
    return [item for path in now.changed_since(then) if (item := had.get(path)) is not None
            and item.type == "file" and _unlike(held, path, item)]


def _unlike(held: dict[str, Item], path: str, item: Item) -> bool:
    """`held` does not hold `path` as `item` (an item a chain of snapshots carried
    over unchanged is the same object in both: no compare)."""
    return held.get(path) is not item and (path not in held or not held[path].same_as(item))


MAX_LISTED = 10_000  # a restore of more paths walks the tree (a plan of them is as long)


def _listed(first: Answer, before: Manifest, target: Manifest) -> dict[str, Any]:
    """The restore pass's paths, if the record pass wrote nothing: the tree is then
    as the walk of the snapshot taken first saw it (a change made since, by anyone,
    is one made while the rewind ran, which no walk orders before it or after), so
    what differs from the target is what differs between the two snapshots, and the
    restore need not walk the tree again. Else ({}) it walks: the record pass wrote
    paths its answer need not list (the directories it made on its way)."""
    result = first.result if isinstance(first.result, dict) else {}
    if any(result.get(key) for key in ("records", "restored", "removed", "conflicts", "links")):
        return {}
    held, had = before.items, target.items
    paths: list[list[Any]] = []
    for path in before.changed_since(target):
        if (item := had.get(path)) is None:
            paths += [[path, None]] if path in held else []
        elif _unlike(held, path, item):
            paths.append([path, item.wire()])
    return {"paths": paths} if len(paths) <= MAX_LISTED else {}


def _merged(first: dict[str, Any], second: RestoreAnswer, target: Manifest,
            before: str, domain: Set[str]) -> dict[str, Any]:
    """One result of the two passes. A path of the snapshots (`domain`) that the
    record pass left alone is the snapshot pass's to decide: it walked the tree after
    the record pass and brought back, removed or found as it was each path there. So
    is a path in neither that the snapshot pass brought back or removed: one the
    record pass made again on its way back through older changes (an older rewind's
    removed directory, put back as a newer one's change is taken back) and then
    could not take further. Any other conflict of the record pass stays (a move back
    the policy refused, a path of another root)."""
    acted = {*second.restored, *second.removed}

    def decided(path: str) -> bool:
        return path in domain or path in acted

    def strings(key: str) -> list[str]:
        value = first.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    removed = list(dict.fromkeys(strings("removed") + second.removed))
    restored = list(dict.fromkeys(strings("restored") + second.restored + second.removed))
    conflicts = list(dict.fromkeys(
        [p for p in strings("conflicts") if not decided(p)] + second.conflicts))
    reasons = {**second.reasons, **(first.get("reasons") or {})}
    links = list(first.get("links_not_restored") or [])
    skipped: list[dict[str, str]] = []
    for shown in second.skipped:
        if not any(isinstance(link, dict) and link.get("path") == shown.path
                   for link in links):  # the record pass may have listed it
            links.append({"path": shown.path, "target": shown.target})
        skipped.append({"path": shown.path, "reason": "link"})
    skipped += [{"path": path, "reason": reason} for path, reason in target.skipped]
    return {"restored": [p for p in restored if p not in conflicts], "conflicts": conflicts,
            "checkpoint": before, "removed": [p for p in removed if p not in conflicts],
            "reasons": {p: reasons[p] for p in conflicts if p in reasons},
            "links_not_restored": links, "skipped": skipped,
            "records": strings("records") + second.records}


def _changes(result: WalkAnswer, token: str | None) -> tuple[
        list[tuple[Item, str | None]], list[str], list[tuple[str, str]]]:
    """A walk's answer, checked: its changed items (a file's copy named as this walk
    names them), removed paths and skipped ones. ValueError if it is not one."""
    pattern = None if token is None else re.compile(rf"{OBJECT}{token}-[0-9]+\Z")
    changed: list[tuple[Item, str | None]] = []
    seen: set[str] = set()
    for wire, name in result.items:
        item = item_from_wire(list(wire), hashed=False)
        if item.path in seen:
            raise ValueError(f"{item.path!r} twice")
        seen.add(item.path)
        if name is not None and (pattern is None or not pattern.match(name)
                                 or item.type != "file"):
            raise ValueError(f"a copy named {name[:80]!r}")
        changed.append((item, name))
    if not all(plain_path(p) for p in result.removed):
        raise ValueError("a removed path that is not plain")
    if not all(plain_path(p) and r in REASONS for p, r in result.skipped):
        raise ValueError("a skipped path that is not plain, or no reason")
    return changed, result.removed, result.skipped


def _pending(result: WalkAnswer, asked: set[str] | None) -> list[str]:
    """The files a walk left for the next request: plain paths, and (of a request
    for pending files) fewer than it was asked for, so the rounds end."""
    pending = result.pending
    if not all(plain_path(p) for p in pending):
        raise ValueError("pending paths that are not plain")
    if asked is not None and (not set(pending) <= asked or len(set(pending)) >= len(asked)):
        raise ValueError("pending files that were not asked for, or no progress")
    return list(dict.fromkeys(pending))


def _drop(snaps: Snapshots, token: str) -> None:
    """Every copy a refused walk made (whatever it says it made), and its result."""
    prefix = f"{OBJECT}{token}"
    with os.scandir(snaps.work) as entries:
        names = [entry.name for entry in entries if entry.name.startswith(prefix)]
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=snaps.work)
