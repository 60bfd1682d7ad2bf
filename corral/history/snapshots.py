"""Whole-workspace snapshots: what a checkpoint holds of every file, directory and
symlink of the workspace root (ignore rules apply), so a rewind can bring back
what something other than corral changed too.

    <store>/m-<checkpoint id>.json     the manifest, written by the host only
    <store>/k-<root>/m-<id>.json       the same file (a hard link): the root's workers
                                       read it to walk incrementally and to diff
    <store>/k-<root>/o-<hash>          a file's bytes, content-addressed, stored once
    <store>/k-<root>/p-<id>.json       a walk's or a restore's instructions (host's)
    <store>/k-<root>/t-o-<token>-<n>   the host's copy of a worker's, before it is linked
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
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import stat
import time
from collections.abc import Iterator
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
OBJECT = "o-"
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
            and (self.type != "file" or (self.mode, self.size) == (other.mode, other.size))


class Manifest(NamedTuple):
    id: str
    items: dict[str, Item]
    skipped: list[tuple[str, str]]


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
        parent = posixpath.dirname(path)
        if parent and (items.get(parent) is None or items[parent].type != "dir"):
            raise ValueError(f"{path!r} lies beneath no directory of the snapshot")


ItemWire = tuple[str, str, int, int, str | None, str | None, int, int, int, int, int]


class ManifestWire(msgspec.Struct, forbid_unknown_fields=True):
    """A manifest file's shape, checked by msgspec as it decodes (in C: a walk
    decodes its base manifest at every checkpoint)."""

    v: int
    id: str
    items: list[ItemWire]
    skipped: list[tuple[str, str]]


def _decoded(data: bytes, checkpoint_id: str) -> ManifestWire:
    try:
        wire = msgspec.json.decode(data, type=ManifestWire)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a manifest ({exc})") from None
    if wire.v != VERSION or wire.id != checkpoint_id:
        raise ValueError("not a manifest of this version and checkpoint")
    return wire


def base_items(data: bytes, checkpoint_id: str) -> dict[str, Item]:
    """A manifest's items by path, checked for shape only: for a walk, whose base
    only spares reads (the host checks every manifest it restores from whole)."""
    return {w[0]: Item(w[0], w[1], w[2], w[3], w[4], w[5], (w[6], w[7], w[8], w[9], w[10]))
            for w in _decoded(data, checkpoint_id).items}


def manifest_from_bytes(data: bytes, checkpoint_id: str) -> Manifest:
    wire = _decoded(data, checkpoint_id)
    items: dict[str, Item] = {}
    for w in wire.items:
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
        if path in items:
            raise ValueError(f"{path!r} twice")
        items[path] = Item(path, kind, mode, size, digest, target, ident)
    check_tree(items)
    shown = [(p, r) for p, r in wire.skipped if plain_path(p) and r in REASONS]
    return Manifest(checkpoint_id, items, shown)


def manifest_bytes(manifest: Manifest) -> bytes:
    return msgspec.json.encode({
        "v": VERSION, "id": manifest.id,
        "items": [item.wire() for item in manifest.items.values()],
        "skipped": [list(s) for s in manifest.skipped[:MAX_SKIPPED_SHOWN]]})


# -- the store's part ------------------------------------------------------------


class Snapshots:
    """The snapshots of one workspace root in its store (`home`: the store's fd,
    `kept`: the root's kept directory's, `work`: the sandbox's work directory's).
    The host only; it holds the store's lock around everything that writes."""

    def __init__(self, home: int, kept: int, work: int) -> None:
        self.home, self.kept, self.work = home, kept, work
        self._held: int | None = None  # bytes of the blobs, counted once, then kept up
        self._last: Manifest | None = None  # the newest manifest read or written
        self._seen: tuple[int, int, int, int] | None = None  # its file's identity

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
        """The manifest of a checkpoint (None: it has none, or it is gone with its
        checkpoint, or its checkpoint is: evicted); CorralError io_error if it is not
        a valid one."""
        if not self._there(CHECKPOINT, checkpoint_id):
            return None
        try:
            fd = os.open(f"{MANIFEST}{checkpoint_id}{COMMITTED}", _READ_FLAGS, dir_fd=self.home)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorralError("io_error", f"the snapshot of {checkpoint_id} cannot be read "
                              f"({exc.strerror}).") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file")
            seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if self._last is not None and (self._last.id, self._seen) == (checkpoint_id, seen):
                return self._last  # the same file as read (or written) last
            with os.fdopen(os.dup(fd), "rb") as file:
                manifest = manifest_from_bytes(file.read(), checkpoint_id)
        except ValueError as exc:
            raise CorralError("io_error", f"the snapshot of {checkpoint_id} in the history "
                              f"store is damaged or was replaced ({exc}); nothing was "
                              "written.") from None
        finally:
            os.close(fd)
        self._last, self._seen = manifest, seen
        return manifest

    def identity(self, checkpoint_id: str) -> list[int]:
        """(inode, size, mtime_ns, ctime_ns) of a manifest's file: a worker that finds
        its kept link so reads what the host checked, and need not check it again."""
        st = os.stat(f"{MANIFEST}{checkpoint_id}{COMMITTED}", dir_fd=self.home,
                     follow_symlinks=False)
        return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]

    def newest(self) -> Manifest | None:
        """The newest manifest whose checkpoint still exists: the base of the next
        walk (a file it lists unchanged is not read again; the new manifest takes
        its items). An evicted or damaged one is passed over."""
        for checkpoint_id in sorted(self._ids(), reverse=True):
            with contextlib.suppress(CorralError):
                if (manifest := self.load(checkpoint_id)) is not None:
                    return manifest
        return None

    def _ids(self) -> list[str]:
        return [name[len(MANIFEST):-len(COMMITTED)] for name in os.listdir(self.home)
                if name.startswith(MANIFEST) and name.endswith(COMMITTED)]

    def held(self) -> int:
        """The bytes the blobs hold (a read of the kept directory the first time)."""
        if self._held is None:
            total = 0
            with os.scandir(self.kept) as entries:
                for entry in entries:
                    if entry.name.startswith(OBJECT):
                        with contextlib.suppress(OSError):
                            total += entry.stat(follow_symlinks=False).st_size
            self._held = total
        return self._held

    def verify(self, item: Item) -> None:
        """io_error unless the blob of a file item is there, whole, with its hash."""
        try:
            fd = os.open(f"{OBJECT}{item.hash}", _READ_FLAGS, dir_fd=self.kept)
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
                    os.unlink(ours, dir_fd=self.kept)
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
                    os.link(copy, f"{OBJECT}{digest}", src_dir_fd=self.kept,
                            dst_dir_fd=self.kept, follow_symlinks=False)
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
                    os.unlink(f"{TEMP}{name}", dir_fd=self.kept)
        self._held = self.held() + added
        return added

    def _present(self, digest: str) -> bool:
        try:
            os.stat(f"{OBJECT}{digest}", dir_fd=self.kept, follow_symlinks=False)
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
                os.unlink(copy, dir_fd=self.kept)
            dst = os.open(copy, _NEW_FLAGS, 0o600, dir_fd=self.kept)
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

    def publish(self, manifest: Manifest) -> None:
        """The manifest into the store, and linked into the kept directory."""
        name = f"{MANIFEST}{manifest.id}{COMMITTED}"
        try:
            if not publish(self.home, name, manifest_bytes(manifest)):
                raise OSError(errno.EEXIST, "a manifest of that id exists")
            with contextlib.suppress(FileExistsError):
                os.link(name, name, src_dir_fd=self.home, dst_dir_fd=self.kept,
                        follow_symlinks=False)
            st = os.stat(name, dir_fd=self.home, follow_symlinks=False)
        except OSError as exc:
            raise CorralError("io_error", "the history store cannot be written "
                              f"({exc.strerror}); nothing was stored.") from None
        self._last = manifest
        self._seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def sweep_staged(self, now: float | None = None) -> None:
        """Copies no host took (its host was killed mid-checkpoint), once stale; and
        the host's own copies a killed host left in the kept directory (the caller
        holds the store's lock: no other host is copying)."""
        remove_temps(self.kept)
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
        for fd in (self.home, self.kept):
            with contextlib.suppress(OSError):
                os.unlink(f"{MANIFEST}{ids[0]}{COMMITTED}", dir_fd=fd)
        if self._last is not None and self._last.id == ids[0]:
            self._last = None
        return True

    def collect(self, keep: set[str]) -> int:
        """Manifests whose checkpoint is gone (evicted, or a host killed before it
        wrote it), then blobs no manifest names and not in `keep` (the snapshot being
        made): the bytes freed."""
        live = set(keep)
        for checkpoint_id in self._ids():
            name = f"{MANIFEST}{checkpoint_id}{COMMITTED}"
            if not self._there(CHECKPOINT, checkpoint_id):
                for fd in (self.home, self.kept):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=fd)
                continue
            try:
                manifest = self.load(checkpoint_id)
            except CorralError:
                continue  # damaged: its blobs are nobody's
            if manifest is not None:
                live |= {item.hash for item in manifest.items.values() if item.hash}
        freed = 0
        for name, size in list(self._blobs()):
            if name[len(OBJECT):] not in live:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self.kept)
                    freed += size
        self._held = None
        return freed

    def _blobs(self) -> Iterator[tuple[str, int]]:
        with os.scandir(self.kept) as entries:
            for entry in entries:
                if entry.name.startswith(OBJECT):
                    with contextlib.suppress(OSError):
                        yield entry.name, entry.stat(follow_symlinks=False).st_size
