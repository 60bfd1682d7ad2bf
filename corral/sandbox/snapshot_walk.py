"""The worker's part of whole-workspace snapshots (snapshots.py): walk the
workspace root as a checkpoint or a diff sees it, and restore what a rewind's
plan names. Runs in a confined worker, over its Root and its Store (which holds
the root's kept directory, read-only, and its work directory). Instructions come
as a plan file the host wrote into the kept directory; what this hands back is
input to the host, which hashes every copy itself.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
import time
from collections.abc import Callable, Iterator
from stat import S_IMODE, S_ISREG
from typing import Any, NamedTuple

import msgspec

from corral.errors import CorralError
from corral.fs import Root, Roots
from corral.fs.syscalls import write_all
from corral.history.records import Entry
from corral.history.restore import Restorer
from corral.history.snapshot_answers import MAX_ANSWER_BYTES
from corral.history.snapshots import (
    ANSWER,
    BASE_ONLY,
    MANIFEST,
    MAX_DELTAS,
    OBJECT,
    OBJECTS,
    PLAN,
    Item,
    ItemWire,
    ManifestWire,
    decode_manifest,
    digest_bytes,
    digest_file,
    dir_mode,
    file_identity,
    read_all,
)
from corral.history.store import COMMITTED, Store, kept_name
from corral.policy import Policy, RootSpec
from corral.sandbox.snapshot_watch import Rewalk, Watch, exclude_identity, rules_of
from corral.tools.ignore import IGNORE_FILES, Ignores

OPS = ("snapshot_walk", "snapshot_restore")
_SUBDIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
_CHUNK = 1 << 20
_TRIES = 3  # a file that keeps changing while it is copied is skipped after this many


def run(op: str, plan_name: str | None, roots: Roots, store: Store, policy: Policy,
        max_file_bytes: int) -> dict[str, Any]:
    root = roots.workspace
    kept = (store.kept or {}).get(kept_name(root.path))
    if kept is None or root.mode != "rw":
        raise CorralError("invalid_arguments", "snapshots need a writable workspace root.")
    if plan_name is None or not (plan_name.startswith(PLAN) and plan_name.endswith(COMMITTED)
                                 and "/" not in plan_name):
        raise CorralError("invalid_arguments", "no snapshot plan named.")
    plan = _read(kept, plan_name)
    if op == "snapshot_walk":
        result = _walk(root, roots, store, kept, policy, plan, max_file_bytes)
    else:
        result = _restore(roots, store, kept, policy, plan, max_file_bytes)
    # A whole tree's listing is more than an answer may hold (the pool bounds its JSON
    # values by what a tool's answer needs): it goes to the host as a file of the work
    # directory, which the host reads as it reads every answer, as input.
    name = f"{OBJECT}{plan.get('token', '')}{ANSWER}"
    data = msgspec.json.encode(result)
    if len(data) > MAX_ANSWER_BYTES:  # the host would refuse it
        raise CorralError("too_large", f"the workspace lists more entries than a snapshot "
                          f"holds (its walk's answer is over {MAX_ANSWER_BYTES} bytes); add "
                          "what need not come back to [history] snapshot_ignore.")
    fd = os.open(name, _NEW, 0o600, dir_fd=store.fd)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    return {"answer": name}


def _read(dir_fd: int, name: str) -> Any:
    return msgspec.json.decode(_whole(dir_fd, name))


# -- walking -------------------------------------------------------------------


class _Walk:
    """One walk of the root, against a base manifest (by stat identity)."""

    def __init__(self, root: Root, store: Store, base: dict[str, ItemWire], plan: dict[str, Any],
                 ignores: Ignores, max_file_bytes: int,
                 denied: Callable[[str], bool] = lambda path: False) -> None:
        self.root, self.store, self.base, self.ignores = root, store, base, ignores
        # a path the policy denies reading: never copied into the store, never
        # compared or removed by a rewind (as an ignored one)
        self.denied = denied
        self.stage: bool = bool(plan.get("stage"))
        self.token = str(plan.get("token", ""))
        offset, budget = plan.get("offset", 0), plan.get("budget_s")
        self.offset = offset if type(offset) is int else 0  # the copies' numbers start here
        # past this, changed files are listed, not copied: the host asks for them again
        # (a request must end within the call timeout; a first snapshot copies the tree)
        self.deadline = time.monotonic() + (
            budget if isinstance(budget, int | float) else float("inf"))
        self.pending: list[str] = []
        self.against: str | None = None  # the id of `base`, if it was read (_walked)
        self.copied = 0
        self.max_file_bytes = max_file_bytes
        self.changed: list[list[Any]] = []  # [item wire, staged name or None]
        self.seen: set[str] = set()
        self.skipped: list[list[str]] = []
        self.read = 0  # file bytes read
        self.walked = 0
        # the root's watch, kept up as this walk lists; `incremental`: a directory it
        # holds unchanged is not entered (what it held stands, from the base)
        self.watch: Watch | None = None
        self.incremental = False
        self.listed: set[str] = set()  # the directories this walk listed
        self.more: list[str] = []  # the directories an incremental walk lists
        self.gone: set[str] = set()  # paths an incremental walk found again or not

    def run(self) -> None:
        self._descend([(os.open(".", _SUBDIR, dir_fd=self.root.fd), "")])

    def _descend(self, stack: list[tuple[int, str]]) -> None:
        """Each directory of the stack listed, and those its listing adds (each fd
        closed)."""
        try:
            while stack:
                dir_fd, prefix = stack.pop()
                try:
                    self._directory(dir_fd, prefix, stack)
                finally:
                    os.close(dir_fd)
        finally:
            for dir_fd, _ in stack:
                os.close(dir_fd)

    def run_dirty(self, dirty: list[str]) -> list[str]:
        """List again the directories `dirty` names (and walk whole those new to the
        watch); every other path stands as the base holds it. The paths removed."""
        assert self.watch is not None
        self.more = list(dirty)
        for directory in self.more:  # (the listings may add: a new link's other names)
            if directory in self.listed:
                continue  # walked whole already, beneath one listed before it
            try:
                fd = _open_dir(self.root.fd, directory)
            except OSError:
                raise Rewalk(f"{directory!r} is gone beneath its watch") from None
            if not self.watch.holds(directory, os.fstat(fd)):
                os.close(fd)
                raise Rewalk(f"{directory!r} was replaced beneath its watch")
            prefix = f"{directory}/" if directory else ""
            self.gone.update(prefix + name for name in self.watch.names.get(directory, ()))
            self._descend([(fd, prefix)])
        base, seen = self.base, self.seen
        removed = [p for p in self.gone if p not in seen and p in base]
        for path in list(removed):  # and what was beneath a directory that went
            removed += [p for p in self.watch.beneath(path) if p in base]
            self.watch.drop(path)
        return sorted(set(removed))

    def _directory(self, dir_fd: int, prefix: str, stack: list[tuple[int, str]]) -> None:
        directory = prefix[:-1]
        watch = self.watch
        if watch is not None:  # before the listing: what changes after it is queued
            try:
                watch.watch(dir_fd, directory, os.fstat(dir_fd))
            except Rewalk:
                if self.incremental:
                    raise
                watch.close()
                self.watch = watch = None  # the rest of this walk unwatched: kept by none
            self.listed.add(directory)
        with os.scandir(dir_fd) as listing:
            found = list(listing)
        names = [entry.name for entry in found]
        self.ignores.entered(directory, names)
        rules, linked = ((), False) if watch is None or not any(
            n in names for n in IGNORE_FILES) else rules_of(dir_fd, names)
        known = watch if self.incremental else None  # what stands from before, if any
        if known is not None and rules != known.rules.get(directory, ()):
            raise Rewalk(f"an ignore file of {directory or '.'!r} changed")
        first_skip = len(self.skipped)
        base, seen, ignored = self.base, self.seen, self.ignores.ignored
        for entry in found:
            path = prefix + entry.name
            if not entry.name.isascii():
                try:
                    path.encode()
                except UnicodeEncodeError:  # not UTF-8: a manifest (JSON) cannot name it
                    self.skipped.append([path.encode("utf-8", "replace").decode(), "name"])
                    continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            mode = st.st_mode
            if known is not None and path in known.names and not (
                    stat.S_ISDIR(mode) and known.holds(path, st)):
                self.gone.update(known.beneath(path))  # a directory replaced: what it held
                if not stat.S_ISDIR(mode):
                    known.drop(path)  # by a file or a link: its listings go now
            if S_ISREG(mode):  # the common case first, without an Item: ~1 us an entry
                if watch is not None:
                    if st.st_nlink > 1:
                        linked = True
                        other = watch.inodes.get(st.st_ino)
                        if known is not None and other is not None and other != directory:
                            self.more.append(other)  # a name of it there: listed too
                    watch.inodes[st.st_ino] = directory
                old = base.get(path)
                if old is not None and old[6:] == (
                        st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
                ) and old[2] == S_IMODE(mode) and old[1] == "file" and not ignored(
                        path, False):
                    self.walked += 1
                    seen.add(path)  # the same file, unchanged: not read again
                    continue
            is_dir = stat.S_ISDIR(mode)
            if self.ignores.ignored(path, is_dir):
                self.skipped.append([path, "ignored"])
                continue
            if self.denied(path):
                self.skipped.append([path, "denied"])
                continue
            self.walked += 1
            if is_dir:
                item = _item(path, "dir", st)
                if known is None or not known.holds(path, st):
                    self._enter(dir_fd, entry.name, path, stack)
            elif stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(entry.name, dir_fd=dir_fd)
                    target.encode()
                except (OSError, UnicodeEncodeError):
                    self.skipped.append([path, "unreadable"])
                    continue
                item = _item(path, "symlink", st, target)
            elif stat.S_ISREG(st.st_mode):
                if st.st_size > self.max_file_bytes:
                    self.skipped.append([path, "too_large"])
                    continue
                self._file(dir_fd, entry.name, path, st)
                continue
            else:
                self.skipped.append([path, "special"])
                continue
            self.seen.add(path)
            old = self.base.get(path)
            if old is None or old[1] != item.type or old[5] != item.target or (
                    item.type == "dir" and old[2] != item.mode):
                self.changed.append([item.wire(), None])
        if watch is not None:
            watch.listed(directory, names, self.skipped[first_skip:], rules, linked)

    @staticmethod
    def _enter(dir_fd: int, name: str, path: str, stack: list[tuple[int, str]]) -> None:
        with contextlib.suppress(OSError):  # vanished, or replaced by a link
            stack.append((os.open(name, _SUBDIR, dir_fd=dir_fd), path + "/"))

    def _file(self, dir_fd: int, name: str, path: str, st: os.stat_result) -> None:
        item = _item(path, "file", st)
        old = self.base.get(path)
        if old is not None and old[1] == "file" and old[6:] == item.ident and (
                old[2] == item.mode):
            self.seen.add(path)  # the same file, unchanged: not read again
            return
        if not self.stage:
            if old is not None and old[1] == "file" and (old[3], old[2]) == (
                    item.size, item.mode) and self._digest(dir_fd, name) == old[4]:
                self.seen.add(path)  # touched, not changed
                return
            self.seen.add(path)
            self.changed.append([item.wire(), None])
            return
        self.seen.add(path)
        if self.copied and time.monotonic() > self.deadline:
            self.pending.append(path)
            return
        for _ in range(_TRIES):
            staged = self._copy(dir_fd, name, path)
            if staged is not None:
                self.copied += 1
                self.changed.append([staged[0].wire(), staged[1]])
                return
        self.skipped.append([path, "changing"])

    def copy(self, path: str) -> bool:
        """A file the last request left pending, copied (False: it is gone)."""
        parent, _, name = path.rpartition("/")
        try:
            dir_fd = _open_dir(self.root.fd, parent)
        except OSError:
            return False
        try:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                return False
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_file_bytes:
                self.skipped.append([path, "changing"])
                return True
            self._file(dir_fd, name, path, st)
            return True
        finally:
            os.close(dir_fd)

    def _digest(self, dir_fd: int, name: str) -> str | None:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            digest, read = digest_file(fd)
            self.read += read
            return digest
        finally:
            os.close(fd)

    def _copy(self, dir_fd: int, name: str, path: str) -> tuple[Item, str] | None:
        """The file copied into the work directory, with the identity it had all the
        while (None: it changed as it was copied, or is gone or not a file now)."""
        try:
            src = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None
        staged = f"{OBJECT}{self.token}-{self.offset + len(self.changed)}"
        try:
            before = os.fstat(src)
            if not stat.S_ISREG(before.st_mode) or before.st_size > self.max_file_bytes:
                return None
            dst = os.open(staged, _NEW, 0o600, dir_fd=self.store.fd)
            try:
                copied = _copy_fd(src, dst)
            finally:
                os.close(dst)
            self.read += copied
            after = os.fstat(src)
            if copied != after.st_size or _ident(before) != _ident(after):
                os.unlink(staged, dir_fd=self.store.fd)
                return None
            return _item(path, "file", after), staged
        finally:
            os.close(src)


def _open_dir(root_fd: int, path: str) -> int:
    """The directory `path` beneath the root, each part opened without following."""
    fd = os.open(".", _SUBDIR, dir_fd=root_fd)
    for part in path.split("/") if path else ():
        try:
            child = os.open(part, _SUBDIR, dir_fd=fd) if part not in ("", ".", "..") else -1
        finally:
            os.close(fd)
        if child < 0:
            raise FileNotFoundError(path)
        fd = child
    return fd


def _copy_fd(src: int, dst: int) -> int:
    """copy_file_range where the kernel can (no bytes through this process), else
    reads and writes: the copy and the tree may be separate mounts."""
    total = 0
    try:
        while n := os.copy_file_range(src, dst, _CHUNK * 16):
            total += n
        return total
    except OSError:
        os.lseek(src, 0, os.SEEK_SET)
        os.lseek(dst, 0, os.SEEK_SET)
        os.ftruncate(dst, 0)
    total = 0
    while chunk := os.read(src, _CHUNK):
        os.write(dst, chunk)
        total += len(chunk)
    return total


def _ident(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _item(path: str, kind: str, st: os.stat_result, target: str | None = None) -> Item:
    return Item(path, kind, stat.S_IMODE(st.st_mode), st.st_size if kind == "file" else 0,
                None, target, _ident(st))


def _walked(root: Root, store: Store, kept: int, policy: Policy, plan: dict[str, Any],
            base_id: Any, max_file_bytes: int, *, checked: Any = None,
            watch: Callable[[Ignores], Watch | None] = lambda ignores: None) -> _Walk:
    """A walk against the manifest `base_id` (none, or a damaged one: every file is
    new to it), or, with `checked` (the identity of the file the host checked), one
    that must be that file, whole."""
    base: dict[str, ItemWire] = {}
    against = None
    if isinstance(base_id, str):
        try:
            base, against = _chain(kept, base_id, checked), base_id
        except (OSError, ValueError) as exc:
            if checked is not None:
                raise CorralError("io_error", f"the snapshot {base_id} cannot be read "
                                  f"({exc}); nothing was written.") from None
    ignores, denied = _rules(root, policy, plan)
    walk = _Walk(root, store, base, plan, ignores, max_file_bytes, denied)
    walk.against = against
    walk.watch = watch(ignores)
    try:
        walk.run()
    except BaseException:
        if walk.watch is not None:
            walk.watch.close()
        raise
    return walk


def _rules(root: Root, policy: Policy, plan: dict[str, Any]) -> tuple[
        Ignores, Callable[[str], bool]]:
    """What a walk of the root leaves out: its ignore rules (the plan's globs, and
    the directories the policy does not let it list), and the files the policy
    denies reading."""
    spec = RootSpec(root.path, root.mode)

    def readable(resolved: str) -> bool:
        return policy.decide("list_directory", spec, resolved, write=False).action == "allow"

    extra = tuple(g for g in plan.get("ignore", ()) if isinstance(g, str))
    return Ignores(root, readable, extra), _denied(root, policy)


def _denied(root: Root, policy: Policy) -> Callable[[str], bool]:
    """The files of the root the policy denies reading."""
    spec = RootSpec(root.path, root.mode)

    def denied(path: str) -> bool:
        return policy.decide("read_file", spec, path, write=False).action == "deny"

    return denied


def _walk(root: Root, roots: Roots, store: Store, kept: int, policy: Policy,
          plan: dict[str, Any], max_file_bytes: int) -> dict[str, Any]:
    copy = plan.get("copy")
    if isinstance(copy, list):  # the files a walk left pending
        walk = _Walk(root, store, {}, {**plan, "stage": True}, Ignores(root, bool, ()),
                     max_file_bytes)
        gone = [p for p in copy if isinstance(p, str) and not walk.copy(p)]
        return {"items": walk.changed, "removed": gone, "skipped": walk.skipped,
                "read_bytes": walk.read, "walked": 0, "pending": walk.pending}
    walk, removed = _checkpoint_walk(root, store, kept, policy, plan, max_file_bytes)
    result: dict[str, Any] = {"items": walk.changed, "removed": removed,
                              "skipped": walk.skipped, "read_bytes": walk.read,
                              "walked": walk.walked, "pending": walk.pending,
                              "base": walk.against}
    since = plan.get("since")
    if isinstance(since, str):
        paths = [wire[0] for wire, _ in walk.changed] + removed
        result["by"] = _who(roots, store, policy, max_file_bytes, since, paths, root.path)
    return result


# The root's watch since this worker's last checkpoint walk (snapshot_watch.py): it
# lives as long as the worker, and stands for the tree against one snapshot only.
_WATCH: Watch | None = None


def _checkpoint_walk(root: Root, store: Store, kept: int, policy: Policy,
                     plan: dict[str, Any], max_file_bytes: int) -> tuple[_Walk, list[str]]:
    """A checkpoint's walk (or a diff's), and the paths of its base it found gone.
    A checkpoint's plan says `watch`: "use" (of the directories the watch says
    changed, if it is clean against the base; else whole), or "renew" (whole);
    either watches anew when it walks whole. A diff's, or one without, walks whole
    and leaves the watch as it is. Whatever fails, the watch is dropped."""
    global _WATCH
    base_id, token, asked = plan.get("base"), plan.get("token"), plan.get("watch")
    if asked not in ("use", "renew") or not plan.get("stage") or not isinstance(token, str):
        walk = _walked(root, store, kept, policy, plan, base_id, max_file_bytes)
        return walk, sorted(walk.base.keys() - walk.seen)  # (a set difference, in C)
    watch, _WATCH = _WATCH, None
    key = (tuple(plan.get("ignore", ())), max_file_bytes)
    if watch is not None:
        found = None
        try:
            if asked == "use" and isinstance(base_id, str) and (
                    watch.clean == base_id and watch.key == key):
                found = _incremental(root, store, kept, policy, plan, max_file_bytes, watch,
                                     base_id)
        except BaseException:
            watch.close()
            raise
        if found is not None:
            watch.clean, _WATCH = token, watch
            return found
        watch.close()
    exclude = exclude_identity(root)  # before the walk's rules read it

    def fresh(ignores: Ignores) -> Watch | None:
        with contextlib.suppress(OSError):  # no inotify here: every walk is whole
            return Watch(key, ignores, exclude)
        return None

    walk = _walked(root, store, kept, policy, plan, base_id, max_file_bytes, watch=fresh)
    if walk.watch is not None:  # (None too if the kernel refused one of its watches)
        walk.watch.clean, _WATCH = token, walk.watch
    return walk, sorted(walk.base.keys() - walk.seen)  # (a set difference, in C)


def _incremental(root: Root, store: Store, kept: int, policy: Policy, plan: dict[str, Any],
                 max_file_bytes: int, watch: Watch, base_id: str
                 ) -> tuple[_Walk, list[str]] | None:
    """The walk of what the watch says changed since `base_id` (which it is clean
    against), and the paths gone; None if it cannot stand for the tree (what it
    copied is removed: a whole walk comes next)."""
    try:
        base = _chain(kept, base_id)
    except (OSError, ValueError):
        return None
    walk = _Walk(root, store, base, plan, watch.ignores, max_file_bytes, _denied(root, policy))
    walk.against, walk.watch, walk.incremental = base_id, watch, True
    try:
        removed = walk.run_dirty(watch.dirty(root))
    except BaseException as error:
        for _, staged in walk.changed:
            if staged is not None:
                with contextlib.suppress(OSError):
                    os.unlink(staged, dir_fd=store.fd)
        if isinstance(error, Rewalk | OSError):
            return None
        raise
    walk.skipped = watch.all_skipped()
    return walk, removed


# The files of the last chain this worker read, by name, with the identity each had:
# a worker walks at every checkpoint against a chain whose whole manifest (some 170
# bytes a path) it most likely read for the last one. Used again only while the
# file is that same file (its inode, size, mtime and ctime).
_DECODED: dict[str, tuple[list[int], ManifestWire]] = {}


def _chain(kept: int, base_id: str, checked: Any = None) -> dict[str, ItemWire]:
    """The items of a snapshot by path, as wires: its manifest and, of a delta, its
    bases' down to a whole one, composed (checked for shape only: the host checks
    every manifest it restores from, and with `checked`, the identity of each file
    of the chain the host checked, newest first, each must be that file)."""
    wires: list[ManifestWire] = []
    read: dict[str, tuple[list[int], ManifestWire]] = {}
    current: str | None = base_id
    while current is not None:
        if len(wires) > MAX_DELTAS or (checked is not None and len(wires) >= len(checked)):
            raise ValueError("a longer chain than the host checked")
        want = None if checked is None else checked[len(wires)]
        try:
            name, ident, wire = _manifest(kept, MANIFEST, current, want)
        except FileNotFoundError:
            if not wires:
                raise
            name, ident, wire = _manifest(kept, BASE_ONLY, current, want)
        read[name] = (ident, wire)
        wires.append(wire)
        current = wire.base
    if checked is not None and len(wires) != len(checked):
        raise ValueError("a shorter chain than the host checked")
    _DECODED.clear()
    _DECODED.update(read)
    items = {w[0]: w for w in wires[-1].items}
    for wire in reversed(wires[:-1]):
        for path in wire.removed:
            items.pop(path, None)
        items.update((w[0], w) for w in wire.items)
    return items


def _manifest(kept: int, prefix: str, checkpoint_id: str,
              checked: Any) -> tuple[str, list[int], ManifestWire]:
    """A manifest file of the kept directory, decoded (or as decoded last, if it is
    the same file), with its identity: which must be `checked`, if given."""
    name = f"{prefix}{checkpoint_id}{COMMITTED}"
    fd = os.open(name, _READ_FLAGS, dir_fd=kept)
    try:
        ident = list(file_identity(os.fstat(fd)))
        if checked is not None and checked != ident:
            raise ValueError("not the file the host checked")
        known = _DECODED.get(name)
        if known is not None and known[0] == ident:
            return name, ident, known[1]
        data = read_all(fd)
    finally:
        os.close(fd)
    return name, ident, decode_manifest(data, checkpoint_id)


def _whole(dir_fd: int, name: str) -> bytes:
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        return read_all(fd)
    finally:
        os.close(fd)


def _who(roots: Roots, store: Store, policy: Policy, max_file_bytes: int, since: str,
         paths: list[str], root: str) -> dict[str, str]:
    """Whose change each path is: "corral" if the newest change recorded of it since
    `since` left it as it is now (or it went with a directory corral deleted), else
    "other"."""
    newest: dict[str, Entry] = {}
    made: set[str] = set()  # directories a change made on its way
    for record in store.records():
        if record.id <= since:
            break
        for entry in record.entries:
            if entry.root == root:
                newest.setdefault(entry.rel, entry)
                made.update(entry.made)
    restorer = Restorer(roots, store, policy, max_file_bytes, "rewind")
    by: dict[str, str] = {}
    for path in paths:
        found = newest.get(path)
        try:
            if found is not None:
                ours = restorer.matches(found, found.after)
            elif path in made:
                ours = root_dir_is(roots.workspace, path)
            else:  # beneath a directory a change of corral's removed?
                gone = next((newest[up] for up in _ancestors(path) if up in newest), None)
                ours = gone is not None and gone.after is None and restorer.matches(gone, None)
        except CorralError:
            ours = False
        by[path] = "corral" if ours else "other"
    return by


def root_dir_is(root: Root, path: str) -> bool:
    info = root.info(path)
    return info is not None and info.type == "dir"


def _ancestors(path: str) -> Iterator[str]:
    while (path := posixpath.dirname(path)):
        yield path


# -- restoring -------------------------------------------------------------------


def _restore(roots: Roots, store: Store, kept: int, policy: Policy, plan: dict[str, Any],
             max_file_bytes: int) -> dict[str, Any]:
    """Every path that differs from the snapshot `target` now (a walk against it:
    after the record pass, which may have changed any of them) back to its state
    there: removals deepest first, then what comes back, parents first; through the
    Root calls a tool uses and a Keeper, so each change is recorded (and can be
    rewound) and a kill leaves each old or new. Without `force`, a conflict."""
    force = bool(plan.get("force"))
    root = roots.workspace
    listed = plan.get("paths")
    if isinstance(listed, list):  # the record pass wrote nothing: no walk again
        target, added, back, left_out = _listed(root, policy, plan, listed, max_file_bytes)
    else:
        walk = _walked(root, store, kept, policy, {"ignore": plan.get("ignore", ())},
                       plan.get("target"), max_file_bytes, checked=plan.get("checked") or [])
        target = walk.base
        added = sorted((wire[0] for wire, _ in walk.changed if wire[0] not in target),
                       reverse=True)
        back = sorted([wire[0] for wire, _ in walk.changed if wire[0] in target]
                      + [path for path in target if path not in walk.seen])
        left_out = {skip[0] for skip in walk.skipped}  # ignored, denied: not the snapshot's
    restorer = Restorer(roots, store, policy, max_file_bytes, "rewind")
    restored: list[str] = []
    removed: list[str] = []
    conflicts: list[str] = []
    reasons: dict[str, str] = {}
    skipped: list[dict[str, str]] = []
    back = [path for path in back if path not in left_out]
    for path, want in [(p, None) for p in added] + [(p, _as_item(target[p])) for p in back]:
        try:
            if _holds(root, path, want, max_file_bytes):
                continue
            if want is None and any(other.startswith(f"{path}/") for other in left_out):
                conflicts.append(path)
                reasons[path] = "holds entries the snapshot leaves out (ignored or denied)"
                continue
            if want is not None and want.type == "symlink":
                if force:  # what took its name goes (recorded): the host makes the link
                    _put(restorer, root, kept, path, None)
                skipped.append({"path": path, "reason": "link", "target": want.target or ""})
                continue
            if not force:
                conflicts.append(path)
                reasons[path] = "changed since by something other than corral"
                continue
            _put(restorer, root, kept, path, want)
        except CorralError as error:
            conflicts.append(path)
            reasons[path] = error.message
            continue
        (removed if want is None else restored).append(path)
    return {"restored": restored, "removed": removed, "conflicts": conflicts,
            "reasons": reasons, "skipped": skipped, "records": restorer.keeper.ids}


def _listed(root: Root, policy: Policy, plan: dict[str, Any], listed: list[Any],
            max_file_bytes: int) -> tuple[dict[str, ItemWire], list[str], list[str], set[str]]:
    """The restore's paths as the host listed them: where the snapshot it took first
    (its walk saw the tree as it is: the record pass wrote nothing since) differs
    from the target, [path, the target's item or None]. As (target items, paths to
    remove deepest first, paths to bring back parents first, paths left out): each
    left out as a walk would leave it out (ignored or denied, or beneath such a
    directory, a special file, one over max_file_bytes), and so is each such entry
    beneath a directory that goes."""
    leaves = _Leaves(root, policy, plan, max_file_bytes)
    target: dict[str, ItemWire] = {}
    added: list[str] = []
    for path, wire in listed:
        if wire is None:
            added.append(path)
        else:
            target[path] = tuple(wire)  # the host's own items
    left_out = {path for path in [*added, *target] if leaves.left_out(path, target.get(path))}
    added = [path for path in added if path not in left_out]
    for path in added:
        left_out.update(leaves.beneath(path))
    return target, sorted(added, reverse=True), sorted(target), left_out


class _Leaves:
    """What a walk of the root would leave out, asked of single paths."""

    def __init__(self, root: Root, policy: Policy, plan: dict[str, Any],
                 max_file_bytes: int) -> None:
        self.ignores, self.denied = _rules(root, policy, plan)
        self.root, self.max_file_bytes = root, max_file_bytes
        self._dirs: dict[str, bool] = {}  # a directory: a walk does not enter it

    def left_out(self, path: str, want: ItemWire | None) -> bool:
        parent = path.rpartition("/")[0]
        if parent and self._unentered(parent):
            return True
        try:
            st = _now(self.root, path).st
        except CorralError:
            return False  # a link above it: the restore's to refuse, as after a walk
        is_dir = stat.S_ISDIR(st.st_mode) if st is not None else (
            want is not None and want[1] == "dir")
        return self._skips(path, is_dir, st)

    def _skips(self, path: str, is_dir: bool, st: os.stat_result | None) -> bool:
        if self.ignores.ignored(path, is_dir) or self.denied(path):
            return True
        if st is None or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            return False
        return not stat.S_ISREG(st.st_mode) or st.st_size > self.max_file_bytes

    def _unentered(self, directory: str) -> bool:
        if directory not in self._dirs:
            parent = directory.rpartition("/")[0]
            self._dirs[directory] = (bool(parent) and self._unentered(parent)) or (
                self.ignores.ignored(directory, True) or self.denied(directory))
        return self._dirs[directory]

    def beneath(self, directory: str) -> list[str]:
        """The entries beneath a directory (if it is one now) that a walk leaves out."""
        found: list[str] = []
        stack = [directory]
        while stack:
            current = stack.pop()
            try:
                fd = _open_dir(self.root.fd, current)
            except OSError:
                continue
            try:
                with os.scandir(fd) as listing:
                    entries = list(listing)
                self.ignores.entered(current, [entry.name for entry in entries])
                for entry in entries:  # (each stat is of the open directory fd)
                    self._beneath(f"{current}/{entry.name}", entry, found, stack)
            finally:
                os.close(fd)
        return found

    def _beneath(self, path: str, entry: os.DirEntry[str], found: list[str],
                 stack: list[str]) -> None:
        try:
            path.encode()
            st = entry.stat(follow_symlinks=False)
        except UnicodeEncodeError:
            found.append(path)  # a name no manifest holds
            return
        except OSError:
            return  # gone since the listing
        if self._skips(path, stat.S_ISDIR(st.st_mode), st):
            found.append(path)
        elif stat.S_ISDIR(st.st_mode):
            stack.append(path)


def _as_item(w: ItemWire) -> Item:
    return Item(w[0], w[1], w[2], w[3], w[4], w[5], (w[6], w[7], w[8], w[9], w[10]))


class _Now(NamedTuple):
    st: os.stat_result | None  # None: missing
    target: str | None  # a symlink's text


def _now(root: Root, path: str) -> _Now:
    """`path` as it is, looked at through its parent opened beneath the root (its
    lstat, a link's text): no name of it is looked up again from the root, so a
    directory above it swapped for a symlink meanwhile is never followed.
    conflict: a directory above it is a symlink now; not_found: one is missing."""
    with root.at("stat", path, follow=False, guard=None) as t:
        if t.rel != path:
            raise CorralError("conflict", f"a directory above {path} is a symlink now.")
        target = None
        if t.st is not None and stat.S_ISLNK(t.st.st_mode):
            with contextlib.suppress(OSError):  # replaced since the lstat: no text
                target = os.readlink(t.name(), dir_fd=t.dir_fd)
        return _Now(t.st, target)


def _holds(root: Root, path: str, want: Item | None, max_file_bytes: int) -> bool:
    """Is `path` in the snapshot's state now?"""
    try:
        st, target = _now(root, path)
    except CorralError as error:
        if error.code == "not_found":
            return want is None
        raise
    if st is None or want is None:
        return st is None and want is None
    if want.type == "dir":
        return stat.S_ISDIR(st.st_mode) and dir_mode(st.st_mode) == dir_mode(want.mode)
    if want.type == "symlink":
        return stat.S_ISLNK(st.st_mode) and target == want.target
    if not stat.S_ISREG(st.st_mode) or st.st_size != want.size or (
            stat.S_IMODE(st.st_mode) != want.mode):
        return False
    return digest_bytes(root.read_bytes(path, max_file_bytes=max_file_bytes)) == want.hash


def _put(restorer: Restorer, root: Root, kept: int, path: str, want: Item | None) -> None:
    keep = restorer.keeper
    write, delete = restorer.guard("write_file", root), restorer.guard("delete_file", root)
    info = root.info(path)
    if info is not None and (want is None or info.type != want.type):
        # (a file is written over in place; a link is removed, never written through)
        if info.type == "dir":
            root.remove_tree(path, recursive=True, guard=delete, beneath=delete, keep=keep)
        else:
            root.unlink(path, guard=delete, keep=keep)
        info = None
    if want is None:
        return
    if want.type == "dir":
        if info is None or info.type != "dir":
            root.mkdir(path, guard=write, keep=keep)
        # its permission bits, unrecorded: nothing is lost (the snapshot the rewind
        # takes first holds the old ones), and no tool changes a mode to record
        if info is None or info.type != "dir" or dir_mode(info.mode) != dir_mode(want.mode):
            root.set_dir_mode(path, want.mode, guard=write)
        return
    root.write_atomic(path, _blob(kept, want), mode=want.mode, guard=write, keep=keep)


def _blob(kept: int, want: Item) -> bytes:
    """The file's bytes from the kept directory, checked against the host's plan."""
    try:
        objects = os.open(OBJECTS, _SUBDIR, dir_fd=kept)
        try:
            data = _whole(objects, f"{OBJECT}{want.hash}")
        finally:
            os.close(objects)
    except OSError as exc:
        raise CorralError("io_error", f"the snapshot's copy is gone ({exc.strerror}).") from None
    if len(data) != want.size or digest_bytes(data) != want.hash:
        raise CorralError("io_error", "the snapshot's copy is damaged or was replaced; "
                          "nothing was written.")
    return data
