"""Whole-workspace snapshots: what a checkpoint holds of every file, directory and
symlink of the workspace root (ignore rules apply), so a rewind can bring back
what something other than corral changed too.

    <store>/m-<checkpoint id>.json     the manifest, written by the host only
    <store>/k-<root>/m-<id>.json       the same file (a hard link): the root's workers
                                       read it to walk incrementally and to diff
    <store>/n-<checkpoint id>.json     a dropped snapshot's manifest, kept (and linked)
                                       while a newer one's chain needs it
    <store>/k-<root>/objects/o-<hash>  a file's bytes, content-addressed, stored once
    <store>/k-<root>/p-<id>.json       a walk's or a restore's instructions (host's)
    <store>/k-<root>/objects/t-o-<token>-<n>  the host's copy of a worker's, before
                                       it is linked
    <store>/w-.../o-<token>-<n>        a changed file a worker copied for the host

A worker walks the root and copies every file whose stat identity (device, inode,
size, mtime_ns, ctime_ns, mode) differs from the base manifest's into its work
directory; the host copies each into a file of its own (what the worker says, and
its copy, are input), hashing as it copies, links that under its hash unless that
blob is there already, and writes the manifest, then the checkpoint
(history.host.History.checkpoint): a checkpoint that exists has its whole
manifest. A manifest is checked when it is read (shape, paths plainly beneath the
root, hashes), and every blob a rewind needs is hashed again before anything is
written.

A manifest is whole, or a delta against the snapshot its walk was against (its
`base`): the items changed or added, and the paths removed. A delta rather than
chunks of a whole one: it is exactly what the walk answers (so the host checks
only the change, against a base it checked already), its size is the change's
(some 170 bytes a path), and there is no chunking to keep stable as paths come
and go. Its cost is the chain: reading composes it from the newest whole
manifest up, so a chain is bounded (a whole one is written again after
MAX_DELTAS deltas, or for a change of more than DELTA_MIN + 1/DELTA_SHARE of the
items), and a base is always older than its delta (no chain is a cycle). A
dropped snapshot's manifest that a kept chain needs stays, renamed BASE_ONLY,
until no chain does. The host keeps the last CACHED snapshots it composed, and
uses one again while every file of its chain is the same file (inode, size,
mtime, ctime): a checkpoint after a small change reads, checks and writes only
the change.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import stat
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import msgspec

from corral.errors import CorralError
from corral.fs.syscalls import write_all

try:  # hashlib's own blake2b, without hashlib loading OpenSSL into the zygote
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b
from corral.history.records import is_id
from corral.history.store import CHECKPOINT, COMMITTED, TEMP, publish, remove_temps

MANIFEST = "m-"
BASE_ONLY = "n-"  # n-<id>.json: a dropped snapshot's manifest, kept while a delta needs it
OBJECT = "o-"
# the blobs' own directory in the kept one: a worker lists the kept directory to find
# the records an undo or a rewind takes back, which 100,000 blobs beside them would
# make cost 80 ms more
OBJECTS = "objects"
PLAN = "p-"
ANSWER = ".answer"  # o-<token>.answer: a worker's walk or restore, for the host
VERSION = 1
HASH_RE = re.compile(r"[0-9a-f]{64}\Z")
TYPES = ("file", "dir", "symlink")
# why a path is not in a snapshot (its `skipped`)
REASONS = ("ignored", "denied", "too_large", "special", "name", "changing", "unreadable",
           "link")
STAGED_STALE_S = 600.0  # a worker's copy no host took (a host killed mid-checkpoint)
MAX_SKIPPED_SHOWN = 1000  # a manifest keeps at most this many skipped paths, to show them
MAX_DELTAS = 16  # a chain is a whole manifest and at most this many deltas on it
DELTA_SHARE, DELTA_MIN = 8, 64  # a delta of more than 64 + 1/8 of the items: written whole
CACHED = 2  # composed snapshots the host keeps (the newest, and a rewind's target)
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


class Item(NamedTuple):
    """One path of a snapshot. `ident`: (dev, ino, size, mtime_ns, ctime_ns) as the
    walk saw it; `hash`: a file's blake2b-256 (its blob's name); `target`: a link's."""

    path: str
    type: str
    mode: int
    size: int
    hash: str | None
    target: str | None
    ident: tuple[int, int, int, int, int]

    def wire(self) -> list[Any]:
        return [self.path, self.type, self.mode, self.size, self.hash, self.target,
                *self.ident]

    def same_as(self, other: Item) -> bool:
        """The same state (what a rewind would have to restore), whatever the identity."""
        return (self.type, self.hash, self.target) == (other.type, other.hash, other.target) \
            and (self.type != "file" or (self.mode, self.size) == (other.mode, other.size)) \
            and (self.type != "dir" or dir_mode(self.mode) == dir_mode(other.mode))


def dir_mode(mode: int) -> int:
    """What of a directory's mode a rewind brings back: not its set-id bits (no
    worker may set them)."""
    return mode & 0o1777


class Manifest(NamedTuple):
    """A snapshot. `delta`, if known: (a base's id, the paths changed, added or
    removed since it): every other path is as the base holds it."""

    id: str
    items: dict[str, Item]
    skipped: list[tuple[str, str]]
    delta: tuple[str, frozenset[str]] | None = None

    def changed_since(self, base: Manifest) -> Iterable[str]:
        """The paths that may differ from `base`'s (all of both, unless its delta
        is against it)."""
        if self.delta is not None and self.delta[0] == base.id:
            return self.delta[1]
        return self.items.keys() | base.items.keys()


Ident = tuple[int, int, int, int]  # a manifest file's (inode, size, mtime_ns, ctime_ns)


def file_identity(st: os.stat_result) -> Ident:
    """A manifest file's identity: another file, or this one changed, has another."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read_all(fd: int) -> bytes:
    """An open file's bytes from where its offset is to its end (the fd stays open)."""
    with os.fdopen(os.dup(fd), "rb") as file:
        return file.read()

Chain = tuple[tuple[str, Ident], ...]  # a snapshot's manifest and its bases', newest first


def digest_file(fd: int) -> tuple[str, int]:
    """(blake2b-256 hex, bytes read) of an open file, from its start."""
    digest, read = blake2b(digest_size=32), 0
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
        read += len(chunk)
    return digest.hexdigest(), read


def digest_bytes(data: bytes) -> str:
    return blake2b(data, digest_size=32).hexdigest()


# -- checking what comes in --------------------------------------------------------


def plain_path(path: Any) -> bool:
    """A root-relative path as a walk names it: no "", ".", ".." parts, no leading
    or doubled "/", no NUL."""
    return (type(path) is str and bool(path) and "\0" not in path
            and posixpath.normpath(path) == path and not path.startswith(("/", "../"))
            and path != ".." and path != ".")


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def item_from_wire(wire: Any, *, hashed: bool = True) -> Item:
    """An item as a manifest or a worker's walk holds it; ValueError if its shape is
    not one (`hashed`: a file must name its hash)."""
    if type(wire) is not list or len(wire) != 11:
        raise ValueError("an item is a list of 11")
    path, kind, mode, size, digest, target, *ident = wire
    if not plain_path(path) or kind not in TYPES or not _count(mode) or mode > 0o7777:
        raise ValueError(f"bad item {str(path)[:100]!r}")
    if not _count(size) or not all(_count(part) for part in ident):
        raise ValueError(f"bad sizes of {path!r}")
    if kind == "file" and hashed and (type(digest) is not str or not HASH_RE.match(digest)):
        raise ValueError(f"bad hash of {path!r}")
    if kind != "file" and digest is not None:
        raise ValueError(f"a hash for the {kind} {path!r}")
    if (kind == "symlink") != (type(target) is str):
        raise ValueError(f"bad link target of {path!r}")
    return Item(path, kind, mode, size, digest if kind == "file" else None, target,
                tuple(ident))


def check_tree(items: dict[str, Item]) -> None:
    """Every path's parent is a directory of the snapshot: a forged manifest cannot
    put a file beneath a link, or beneath a file."""
    for path in items:
        _check_parent(items, path)


def _check_parent(items: dict[str, Item], path: str) -> None:
    parent = path.rpartition("/")[0]  # a plain path's dirname
    if parent and (items.get(parent) is None or items[parent].type != "dir"):
        raise ValueError(f"{path!r} lies beneath no directory of the snapshot")


def apply_delta(items: dict[str, Item], changed: Iterable[Item],
                removed: Iterable[str]) -> dict[str, Item]:
    """A checked snapshot's `items` with `removed` gone and `changed` put in, checked
    as check_tree checks a whole one, for the cost of the change: a path left as it
    was lies beneath a directory still, unless a directory went or became something
    else (then the whole is checked). ValueError if it is not a change of `items`
    (a path removed that is not there, or removed twice, or removed and changed)."""
    new = dict(items)
    gone: set[str] = set()
    lost = False  # a directory went: what was beneath it must have gone too
    for path in removed:
        old = new.pop(path, None)
        if old is None:
            raise ValueError(f"{str(path)[:100]!r} is removed, but not in the base")
        gone.add(path)
        lost = lost or old.type == "dir"
    put: list[str] = []
    for item in changed:
        if item.path in gone:
            raise ValueError(f"{item.path!r} is both removed and changed")
        old = new.get(item.path)
        lost = lost or (old is not None and old.type == "dir" and item.type != "dir")
        new[item.path] = item
        put.append(item.path)
    if lost:
        check_tree(new)
    else:
        for path in put:
            _check_parent(new, path)
    return new


ItemWire = tuple[str, str, int, int, str | None, str | None, int, int, int, int, int]


class ManifestWire(msgspec.Struct, forbid_unknown_fields=True):
    """A manifest file's shape, checked by msgspec as it decodes (in C: a walk
    decodes its base's chain at every checkpoint). A delta names its `base`: its
    items are the ones changed or added since, `removed` the paths gone."""

    v: int
    id: str
    items: list[ItemWire]
    skipped: list[tuple[str, str]]
    base: str | None = None
    removed: list[str] = []


class _Head(msgspec.Struct):
    """A manifest's base, read without keeping the rest."""

    base: str | None = None


def decode_manifest(data: bytes, checkpoint_id: str) -> ManifestWire:
    """A manifest file's wire, checked for shape, and that a delta's base is an older
    snapshot's (so no chain is a cycle)."""
    try:
        wire = msgspec.json.decode(data, type=ManifestWire)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a manifest ({exc})") from None
    if wire.v != VERSION or wire.id != checkpoint_id:
        raise ValueError("not a manifest of this version and checkpoint")
    if wire.base is not None and not (is_id(wire.base) and wire.base < checkpoint_id):
        raise ValueError("a delta whose base is not an older snapshot")
    if wire.base is None and wire.removed:
        raise ValueError("a whole manifest that removes paths")
    return wire


def _checked(w: ItemWire) -> Item:
    path, kind, mode, size, digest, target = w[:6]
    ident = (w[6], w[7], w[8], w[9], w[10])
    if not plain_path(path) or kind not in TYPES or not 0 <= mode <= 0o7777 or size < 0 or (
            min(ident) < 0):
        raise ValueError(f"bad item {path[:100]!r}")
    if (kind == "file") != (digest is not None) or (
            digest is not None and not HASH_RE.match(digest)):
        raise ValueError(f"bad hash of {path!r}")
    if (kind == "symlink") != (target is not None):
        raise ValueError(f"bad link target of {path!r}")
    return Item(path, kind, mode, size, digest, target, ident)


def compose(base: Manifest | None, wire: ManifestWire) -> Manifest:
    """The snapshot a manifest file holds: whole, or (a delta) applied to its base's,
    which was composed and checked already. ValueError if it is not a valid one."""
    changed: dict[str, Item] = {}
    for w in wire.items:
        item = _checked(w)
        if item.path in changed:
            raise ValueError(f"{item.path!r} twice")
        changed[item.path] = item
    if wire.base is None:
        check_tree(changed)
        items = changed
    else:
        if base is None or base.id != wire.base:
            raise ValueError("a delta without its base")
        if len(set(wire.removed)) != len(wire.removed):
            raise ValueError("a path removed twice")
        if not all(plain_path(p) for p in wire.removed):
            raise ValueError("a removed path that is not plain")
        items = apply_delta(base.items, changed.values(), wire.removed)
    shown = [(p, r) for p, r in wire.skipped if plain_path(p) and r in REASONS]
    delta = None if wire.base is None else (wire.base, frozenset([*changed, *wire.removed]))
    return Manifest(wire.id, items, shown, delta)


def manifest_from_bytes(data: bytes, checkpoint_id: str) -> Manifest:
    """A whole manifest's snapshot (a delta: ValueError, it needs its base)."""
    return compose(None, decode_manifest(data, checkpoint_id))


def manifest_bytes(manifest: Manifest, base: str | None = None,
                   changed: Iterable[Item] | None = None,
                   removed: Iterable[str] = ()) -> bytes:
    """The manifest file: whole, or (with `base`) a delta of `changed` and
    `removed` against it."""
    skipped = [list(s) for s in manifest.skipped[:MAX_SKIPPED_SHOWN]]
    if base is None or changed is None:
        return msgspec.json.encode({
            "v": VERSION, "id": manifest.id,
            "items": [item.wire() for item in manifest.items.values()], "skipped": skipped})
    return msgspec.json.encode({
        "v": VERSION, "id": manifest.id, "base": base,
        "items": [item.wire() for item in changed], "removed": list(removed),
        "skipped": skipped})


# -- the store's part ------------------------------------------------------------


class Snapshots:
    """The snapshots of one workspace root in its store (`home`: the store's fd,
    `kept`: the root's kept directory's, `work`: the sandbox's work directory's).
    The host only; it holds the store's lock around everything that writes."""

    def __init__(self, home: int, kept: int, work: int) -> None:
        self.home, self.kept, self.work = home, kept, work
        self.objects = -1  # the kept directory's OBJECTS, while `kept` is open
        self._held: int | None = None  # bytes of the blobs and manifests, counted once
        # the newest snapshots composed (at most CACHED), each with its chain's files'
        # identities, newest first: used again while those files are the same
        self._cache: dict[str, tuple[Manifest, Chain]] = {}
        self._heads: dict[str, tuple[Ident, str | None]] = {}  # file name -> its base
        self._swept = False  # the kept directory's temps, removed once

    # -- reading -----------------------------------------------------------

    def has(self, checkpoint_id: str) -> bool:
        """A snapshot of a checkpoint that is still in the history."""
        return self._there(CHECKPOINT, checkpoint_id) and self._there(MANIFEST, checkpoint_id)

    def evicted(self, checkpoint_id: str) -> bool:
        """A snapshot whose checkpoint the store's bounds evicted (or a killed host
        never wrote): it is no one's, and the next collect removes it."""
        return self._there(MANIFEST, checkpoint_id) and not self._there(
            CHECKPOINT, checkpoint_id)

    def _there(self, prefix: str, checkpoint_id: str) -> bool:
        if not is_id(checkpoint_id):
            return False
        try:
            os.stat(f"{prefix}{checkpoint_id}{COMMITTED}", dir_fd=self.home,
                    follow_symlinks=False)
        except OSError:
            return False
        return True

    def load(self, checkpoint_id: str) -> Manifest | None:
        """The snapshot of a checkpoint (None: it has none, or it is gone with its
        checkpoint, or its checkpoint is: evicted); CorralError io_error if it is not
        a valid one, or a file of its chain is not."""
        if not self._there(CHECKPOINT, checkpoint_id):
            return None
        try:
            return self._composed(checkpoint_id)[0]
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorralError("io_error", f"the snapshot of {checkpoint_id} cannot be read "
                              f"({exc.strerror}).") from None
        except ValueError as exc:
            raise CorralError("io_error", f"the snapshot of {checkpoint_id} in the history "
                              f"store is damaged or was replaced ({exc}); nothing was "
                              "written.") from None

    def _composed(self, checkpoint_id: str) -> tuple[Manifest, Chain]:
        """A snapshot's manifest and the bases of its chain, read down to a whole one
        (or to one composed before, whose files are as they were), then applied from
        the oldest up, each checked. FileNotFoundError if `checkpoint_id` has no
        manifest; ValueError if it, or a file of its chain, is not a valid one."""
        read: list[tuple[str, Ident, ManifestWire]] = []
        current, found = checkpoint_id, None
        while (found := self._valid(current, top=not read)) is None:
            try:
                wire, ident = self._read(current, top=not read)
            except FileNotFoundError:
                if not read:
                    raise
                raise ValueError(f"its base {current} is gone") from None
            read.append((current, ident, wire))
            if wire.base is None:
                break
            if len(read) > MAX_DELTAS:
                raise ValueError(f"a chain of more than {MAX_DELTAS} deltas")
            current = wire.base
        manifest, chain = found if found is not None else (None, ())
        if len(read) + len(chain) > MAX_DELTAS + 1:
            raise ValueError(f"a chain of more than {MAX_DELTAS} deltas")
        for name, ident, wire in reversed(read):
            manifest = compose(manifest, wire)
            chain = ((name, ident), *chain)
        assert manifest is not None  # the loop read one at least, or found one
        self._remember(manifest, chain)
        return manifest, chain

    def _valid(self, checkpoint_id: str, *, top: bool) -> tuple[Manifest, Chain] | None:
        """A snapshot composed before, if every file of its chain is as it was."""
        entry = self._cache.get(checkpoint_id)
        if entry is not None and all(
                self._identity(name, top=top and name == checkpoint_id) == ident
                for name, ident in entry[1]):
            return entry
        return None

    def _remember(self, manifest: Manifest, chain: Chain) -> None:
        self._cache.pop(manifest.id, None)
        self._cache[manifest.id] = (manifest, chain)
        while len(self._cache) > CACHED:
            del self._cache[next(iter(self._cache))]

    def _identity(self, checkpoint_id: str, *, top: bool = False) -> Ident | None:
        """(inode, size, mtime_ns, ctime_ns) of a manifest's file (a base's may be
        one kept for its dependents only), None if there is none."""
        for prefix in (MANIFEST,) if top else (MANIFEST, BASE_ONLY):
            try:
                st = os.stat(f"{prefix}{checkpoint_id}{COMMITTED}", dir_fd=self.home,
                             follow_symlinks=False)
            except FileNotFoundError:
                continue
            return file_identity(st)
        return None

    def _read(self, checkpoint_id: str, *, top: bool) -> tuple[ManifestWire, Ident]:
        fd = self._open(self.home, checkpoint_id, top=top)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file")
            wire = decode_manifest(read_all(fd), checkpoint_id)
        finally:
            os.close(fd)
        return wire, file_identity(st)

    @staticmethod
    def _open(dir_fd: int, checkpoint_id: str, *, top: bool) -> int:
        prefixes = (MANIFEST,) if top else (MANIFEST, BASE_ONLY)
        for prefix in prefixes[:-1]:
            with contextlib.suppress(FileNotFoundError):
                return os.open(f"{prefix}{checkpoint_id}{COMMITTED}", _READ_FLAGS,
                               dir_fd=dir_fd)
        return os.open(f"{prefixes[-1]}{checkpoint_id}{COMMITTED}", _READ_FLAGS, dir_fd=dir_fd)

    def deltas(self, checkpoint_id: str) -> int:
        """How many deltas a snapshot's chain holds (one composed lately)."""
        entry = self._valid(checkpoint_id, top=False)
        return MAX_DELTAS if entry is None else len(entry[1]) - 1

    def identity(self, checkpoint_id: str) -> list[list[int]]:
        """The identity of each file of a snapshot's chain, newest first, as the host
        checked them: a worker that finds its kept links so reads what the host
        checked, and need not check it again."""
        try:
            entry = self._valid(checkpoint_id, top=True) or self._composed(checkpoint_id)
        except ValueError as exc:
            raise CorralError("io_error", f"the snapshot of {checkpoint_id} in the history "
                              f"store is damaged or was replaced ({exc}); nothing was "
                              "written.") from None
        return [list(ident) for _, ident in entry[1]]

    def newest(self) -> Manifest | None:
        """The newest manifest whose checkpoint still exists: the base of the next
        walk (a file it lists unchanged is not read again; the new manifest takes
        its items). An evicted or damaged one is passed over."""
        for checkpoint_id in sorted(self._ids(), reverse=True):
            with contextlib.suppress(CorralError):
                if (manifest := self.load(checkpoint_id)) is not None:
                    return manifest
        return None

    def _ids(self, prefix: str = MANIFEST) -> list[str]:
        return [name[len(prefix):-len(COMMITTED)] for name in os.listdir(self.home)
                if name.startswith(prefix) and name.endswith(COMMITTED)]

    def held(self) -> int:
        """The bytes the blobs and the manifests hold (a read of the kept directory
        the first time: it links every manifest of the root)."""
        if self._held is None:
            total = 0
            for fd, prefixes in ((self.objects, (OBJECT,)), (self.kept, (MANIFEST, BASE_ONLY))):
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.name.startswith(prefixes):
                            with contextlib.suppress(OSError):
                                total += entry.stat(follow_symlinks=False).st_size
            self._held = total
        return self._held

    def adopt(self) -> None:
        """The blobs a store made before OBJECTS kept beside the records, moved in
        (once: as OBJECTS is made; the caller holds the store's lock)."""
        for name in os.listdir(self.kept):
            if name.startswith(OBJECT) and HASH_RE.match(name[len(OBJECT):]):
                with contextlib.suppress(OSError):
                    os.rename(name, name, src_dir_fd=self.kept, dst_dir_fd=self.objects)

    def verify(self, item: Item) -> None:
        """io_error unless the blob of a file item is there, whole, with its hash."""
        try:
            fd = os.open(f"{OBJECT}{item.hash}", _READ_FLAGS, dir_fd=self.objects)
        except OSError as exc:
            raise CorralError("io_error", f"the snapshot's copy of {item.path} is gone "
                              f"({exc.strerror}); nothing was written.") from None
        try:
            st = os.fstat(fd)
            good = stat.S_ISREG(st.st_mode) and st.st_size == item.size and (
                digest_file(fd)[0] == item.hash)
        finally:
            os.close(fd)
        if not good:
            raise CorralError("io_error", f"the snapshot's copy of {item.path} is damaged or "
                              "was replaced (its size or hash differs from the snapshot's); "
                              "nothing was written.")

    # -- writing (under the store's lock) --------------------------------------------

    def write_plan(self, token: str, plan: dict[str, Any]) -> str:
        name = f"{PLAN}{token}{COMMITTED}"
        if not publish(self.kept, name, msgspec.json.encode(plan)):
            raise CorralError("io_error", "a snapshot plan of that name exists already.")
        return name

    def drop_plan(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.kept)

    def take(self, staged: list[tuple[Item, str]], room: int) -> int:
        """Copy each file a worker staged (item without its hash, the copy's name in
        the work directory) into a file of the host's own in the kept directory,
        hashing the bytes as they are copied, and link that under its hash: what is
        stored is exactly what was hashed, whatever the worker does to its copy
        meanwhile, and a blob there already is kept (the new copy dropped), never
        replaced. Refused (too_large, nothing taken) if the new blobs are more than
        `room` bytes. Returns the bytes added; the items come back with their hashes."""
        taken: list[tuple[int, str | None, str]] = []  # (index, host's copy to link, hash)
        new: dict[str, int] = {}
        try:
            for index, (item, name) in enumerate(staged):
                ours = f"{TEMP}{name}"
                digest = self._copy_staged(item, name, ours)
                if digest in new or self._present(digest):
                    os.unlink(ours, dir_fd=self.objects)
                    taken.append((index, None, digest))
                else:
                    new[digest] = item.size
                    taken.append((index, ours, digest))
            added = sum(new.values())
            if added > room:
                raise CorralError(
                    "too_large", f"the snapshot needs {added} bytes more in the history "
                    f"store, which has room for {max(room, 0)} within [history] max_bytes; "
                    "nothing was stored (raise max_bytes, or add what need not come back "
                    "to [history] snapshot_ignore).")
            for index, copy, digest in taken:
                staged[index] = (staged[index][0]._replace(hash=digest), staged[index][1])
                if copy is None:
                    continue
                try:
                    os.link(copy, f"{OBJECT}{digest}", src_dir_fd=self.objects,
                            dst_dir_fd=self.objects, follow_symlinks=False)
                except FileExistsError:
                    pass  # a blob of that hash is there: it stays
                except OSError as exc:
                    raise CorralError("io_error", "the history store cannot be written "
                                      f"({exc.strerror}); nothing was stored.") from None
        finally:
            for _, name in staged:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self.work)
                with contextlib.suppress(OSError):
                    os.unlink(f"{TEMP}{name}", dir_fd=self.objects)
        self._held = self.held() + added
        return added

    def _present(self, digest: str) -> bool:
        try:
            os.stat(f"{OBJECT}{digest}", dir_fd=self.objects, follow_symlinks=False)
        except OSError:
            return False
        return True

    def _copy_staged(self, item: Item, name: str, copy: str) -> str:
        """The worker's copy `name` into the host's new file `copy` (kept directory),
        of exactly the item's size: the hash of what was written."""
        try:
            src = os.open(name, _READ_FLAGS, dir_fd=self.work)
        except OSError as exc:
            raise CorralError("io_error", f"the copy of {item.path} the worker made is gone "
                              f"({exc.strerror}); nothing was stored.") from None
        try:
            if not stat.S_ISREG(os.fstat(src).st_mode):
                raise CorralError("io_error", f"the copy of {item.path} the worker made is "
                                  "not a file; nothing was stored.")
            with contextlib.suppress(FileNotFoundError):  # a killed host's (locked: no one's)
                os.unlink(copy, dir_fd=self.objects)
            dst = os.open(copy, _NEW_FLAGS, 0o600, dir_fd=self.objects)
            try:
                digest, written = blake2b(digest_size=32), 0
                while written <= item.size and (
                        chunk := os.read(src, min(_CHUNK, item.size + 1 - written))):
                    digest.update(chunk)
                    write_all(dst, chunk)
                    written += len(chunk)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        if written != item.size:
            raise CorralError("io_error", f"the copy of {item.path} the worker made is not "
                              "the size it claims; nothing was stored.")
        return digest.hexdigest()

    def publish(self, manifest: Manifest, base: Manifest | None = None,
                changed: list[Item] | None = None, removed: list[str] | None = None) -> None:
        """The manifest into the store, and linked into the kept directory: a delta
        of `changed` and `removed` against `base` (the snapshot it was walked
        against) while its chain is short and the change small, else whole."""
        name = f"{MANIFEST}{manifest.id}{COMMITTED}"
        entry = None if base is None or changed is None else self._valid(base.id, top=False)
        if entry is not None and base is not None and changed is not None and (
                base.id < manifest.id and len(entry[1]) <= MAX_DELTAS
                and len(changed) + len(removed or ()) <= DELTA_MIN + len(
                    manifest.items) // DELTA_SHARE):
            data = manifest_bytes(manifest, base.id, changed, removed or ())
            below = entry[1]
        else:
            data, below = manifest_bytes(manifest), ()
        try:
            if not publish(self.home, name, data):
                raise OSError(errno.EEXIST, "a manifest of that id exists")
            with contextlib.suppress(FileExistsError):
                os.link(name, name, src_dir_fd=self.home, dst_dir_fd=self.kept,
                        follow_symlinks=False)
            st = os.stat(name, dir_fd=self.home, follow_symlinks=False)
        except OSError as exc:
            raise CorralError("io_error", "the history store cannot be written "
                              f"({exc.strerror}); nothing was stored.") from None
        ident = file_identity(st)
        if base is not None and changed is not None:
            manifest = manifest._replace(delta=(base.id, frozenset(
                [*(item.path for item in changed), *(removed or ())])))
        self._remember(manifest, ((manifest.id, ident), *below))
        if self._held is not None:
            self._held += st.st_size

    def sweep_staged(self, now: float | None = None) -> None:
        """Copies no host took (its host was killed mid-checkpoint), once stale; and
        the host's own copies and plans a killed host left in the kept directory
        (the caller holds the store's lock: no other host is copying), the first
        time: a host removes its own as it takes them, and a listing of the blobs
        costs as much as one of the tree."""
        if not self._swept:
            remove_temps(self.kept)  # a plan's
            remove_temps(self.objects)  # a copy's
            self._swept = True
        horizon = (time.time() if now is None else now) - STAGED_STALE_S
        with os.scandir(self.work) as entries:
            for entry in entries:
                if entry.name.startswith(OBJECT):
                    with contextlib.suppress(OSError):
                        if entry.stat(follow_symlinks=False).st_mtime < horizon:
                            os.unlink(entry.name, dir_fd=self.work)

    def drop_oldest(self, spare: str | None = None) -> bool:
        """Make room: the oldest snapshot but `spare` (a rewind's target) goes (its
        checkpoint stays, as one of corral's changes only). False if there is none."""
        ids = sorted(i for i in self._ids() if i != spare)
        if not ids:
            return False
        self._unlist(ids[0], self._bases())
        return True

    def _bases(self) -> set[str]:
        """The snapshots some manifest (a snapshot's, or one kept as a base) is a
        delta of."""
        bases: set[str] = set()
        names: set[str] = set()
        for prefix in (MANIFEST, BASE_ONLY):
            for checkpoint_id in self._ids(prefix):
                names.add(f"{prefix}{checkpoint_id}{COMMITTED}")
                with contextlib.suppress(OSError, ValueError):
                    if (base := self._base_of(prefix, checkpoint_id)) is not None:
                        bases.add(base)
        self._heads = {name: head for name, head in self._heads.items() if name in names}
        return bases

    def _base_of(self, prefix: str, checkpoint_id: str) -> str | None:
        """The base a manifest file names (its last read kept while it is the same)."""
        name = f"{prefix}{checkpoint_id}{COMMITTED}"
        st = os.stat(name, dir_fd=self.home, follow_symlinks=False)
        ident = file_identity(st)
        if (known := self._heads.get(name)) is not None and known[0] == ident:
            return known[1]
        fd = os.open(name, _READ_FLAGS, dir_fd=self.home)
        try:
            base = msgspec.json.decode(read_all(fd), type=_Head).base
        except (msgspec.DecodeError, msgspec.ValidationError):
            base = None  # damaged: no one's base (its own chain is refused as read)
        finally:
            os.close(fd)
        self._heads[name] = (ident, base)
        return base

    def _unlist(self, checkpoint_id: str, bases: set[str]) -> None:
        """A snapshot gone: its manifest removed, or (a base of another's chain) kept
        under BASE_ONLY, which no rewind or diff takes for a snapshot."""
        name = f"{MANIFEST}{checkpoint_id}{COMMITTED}"
        before = self._identity(checkpoint_id, top=True)
        for fd in (self.home, self.kept):
            with contextlib.suppress(OSError):
                if checkpoint_id in bases:  # the inode stays: the same file, renamed
                    os.rename(name, f"{BASE_ONLY}{checkpoint_id}{COMMITTED}",
                              src_dir_fd=fd, dst_dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
        self._cache.pop(checkpoint_id, None)
        after = self._identity(checkpoint_id)
        for other, (manifest, chain) in list(self._cache.items()):
            # a chain through it is still the file it was (renamed here, under the lock)
            self._cache[other] = (manifest, tuple(
                (n, after if (n, i) == (checkpoint_id, before) and after else i)
                for n, i in chain))
        self._held = None

    def collect(self, keep: set[str]) -> int:
        """Manifests whose checkpoint is gone (evicted, or a host killed before it
        wrote it), and those kept as bases that no chain needs now; then blobs no
        snapshot names and not in `keep` (the snapshot being made): the bytes freed."""
        bases = self._bases()
        for checkpoint_id in self._ids():
            if not self._there(CHECKPOINT, checkpoint_id):
                self._unlist(checkpoint_id, bases)
        needed: set[str] = set()
        for checkpoint_id in self._ids():
            current: str | None = checkpoint_id
            while current is not None and current not in needed and len(needed) < 1 << 20:
                needed.add(current)
                prefix = MANIFEST if self._there(MANIFEST, current) else BASE_ONLY
                try:
                    current = self._base_of(prefix, current)
                except OSError:
                    current = None
        for checkpoint_id in self._ids(BASE_ONLY):
            if checkpoint_id not in needed:
                for fd in (self.home, self.kept):
                    with contextlib.suppress(OSError):
                        os.unlink(f"{BASE_ONLY}{checkpoint_id}{COMMITTED}", dir_fd=fd)
        self._unmirrored()
        live = set(keep)
        for checkpoint_id in sorted(self._ids()):  # oldest first: each composes on the last
            try:
                manifest = self._composed(checkpoint_id)[0]
            except (OSError, ValueError):
                continue  # damaged: its blobs are nobody's
            live.update(item.hash for item in manifest.items.values() if item.hash)
        freed = 0
        for name, size in list(self._blobs()):
            if name[len(OBJECT):] not in live:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self.objects)
                    freed += size
        self._held = None
        return freed

    def _unmirrored(self) -> None:
        """A kept link whose manifest the store no longer has (a host killed between
        the two renames or unlinks of _unlist)."""
        for name in os.listdir(self.kept):
            if name.startswith((MANIFEST, BASE_ONLY)) and name.endswith(COMMITTED):
                try:
                    os.stat(name, dir_fd=self.home, follow_symlinks=False)
                except FileNotFoundError:
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=self.kept)

    def _blobs(self) -> Iterator[tuple[str, int]]:
        with os.scandir(self.objects) as entries:
            for entry in entries:
                if entry.name.startswith(OBJECT):
                    with contextlib.suppress(OSError):
                        yield entry.name, entry.stat(follow_symlinks=False).st_size
