"""A deleted directory kept in the store: the list of its entries its record holds
(made from the survey the delete decided on) and the check of a kept tree
against that list. The host checks a worker's kept tree before it commits the
record (and hashes every file into the list); an undo checks it again, hashes
included, before it moves the tree back. A kept tree that is not exactly its
list (an entry more or less, another type, mode, size, target, or content) is
refused: whatever lies in a work directory was written by a worker. One
exception: a tree copied into the store (it lies on another mount) holds none of
its symlinks, since a worker can never make one; its list still names each link
and its target, which an undo shows (never makes, never follows)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from typing import NamedTuple

from corral.fs.syscalls import SUBDIR_FLAGS, temp_name, write_all
from corral.fs.tree import Tree, walk
from corral.fs.version import chunked_version
from corral.history.links import check_target
from corral.history.records import BadRecord, Kept

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


def kept_of(tree: Iterable[Tree]) -> tuple[Kept, ...]:
    """The record's list of a surveyed tree (no hashes: the host adds them)."""
    return tuple(_kept(entry) for entry in tree)


def _kept(entry: Tree) -> Kept:
    mode, kind = stat.S_IMODE(entry.st.st_mode), kind_of(entry.st.st_mode)
    if kind == "symlink":
        return Kept(entry.path, kind, mode, target=entry.target)
    return Kept(entry.path, kind, mode, entry.st.st_size if kind == "file" else 0)


def kind_of(mode: int) -> str:
    """A state's type (records.TYPES) for an lstat mode."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "file" if stat.S_ISREG(mode) else "other"


def check_listing(tree: tuple[Kept, ...]) -> None:
    """BadRecord unless the list is one a walk makes: plain relative paths, each
    once, each below a directory listed before it, no file claiming its own hash
    (the host makes those)."""
    dirs: set[str] = {""}
    seen: set[str] = set()
    for kept in tree:
        path = kept.path
        parent, _, name = path.rpartition("/")
        if (name in ("", ".", "..") or "\0" in path or path.startswith("/") or path in seen
                or parent not in dirs or kept.hash is not None):
            raise BadRecord("a kept tree whose list is not one of a directory's entries")
        if kept.type == "symlink" and (why := check_target(kept.target)) is not None:
            raise BadRecord(f"a kept symlink whose target is refused: {why}")
        seen.add(path)
        if kept.type == "dir":
            dirs.add(path)


class Checked(NamedTuple):
    """A kept tree that is its list: the list with every file's hash, and the
    symlinks the list names that the kept tree does not hold (it was copied)."""

    tree: tuple[Kept, ...]
    unkept: tuple[Kept, ...]


def check_kept(dir_fd: int, name: str, mode: int | None, tree: tuple[Kept, ...],
               *, hashed: bool, contents: bool = True) -> Checked:
    """The list of the kept tree `name` of `dir_fd`, with every file's content hash,
    if the tree is exactly `tree`, or `tree` without any of its symlinks (and its
    top directory has permission bits `mode`); with `hashed`, each hash must also
    be the one `tree` holds; without `contents`, no file is read (types, modes,
    sizes and targets only). BadRecord otherwise. Nothing is followed; only
    regular files are opened."""
    try:
        fd = os.open(name, SUBDIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        raise BadRecord("a kept tree that is missing or not a directory") from None
    entries = walk(fd)
    try:
        if mode is not None and stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            raise BadRecord("a kept tree whose directory's mode is not its record's")
        match = _Match(tree)
        for entry in entries:
            match.next(entry, hashed=hashed, contents=contents)
        return match.end()
    except OSError as exc:
        raise BadRecord(f"a kept tree that cannot be read ({exc.strerror})") from None
    finally:
        entries.close()
        os.close(fd)


class _Match:
    """A walk of a kept tree matched against its list, in the list's (a walk's)
    order. Its symlinks are all there (renamed in) or none (copied in): a listed
    link the walk does not reach next is passed over, and from then on none may
    be found."""

    def __init__(self, tree: tuple[Kept, ...]) -> None:
        self.tree, self.at = tree, 0
        self.found: list[Kept] = []
        self.unkept: list[Kept] = []
        self.links: bool | None = None  # are the links kept? (not known until one is met)

    def _pass_links(self, path: str | None) -> None:
        while (self.at < len(self.tree) and self.links is not True
               and self.tree[self.at].type == "symlink" and self.tree[self.at].path != path):
            self.links = False
            self.unkept.append(self.tree[self.at])
            self.found.append(self.tree[self.at])
            self.at += 1

    def next(self, entry: Tree, *, hashed: bool, contents: bool) -> None:
        self._pass_links(entry.path)
        if self.at >= len(self.tree):
            raise _differs(entry.path)
        kept = self.tree[self.at]
        if kept.type == "symlink":
            if self.links is False:
                raise _differs(kept.path)
            self.links = True
        self.found.append(_matched(entry, kept, hashed=hashed, contents=contents))
        self.at += 1

    def end(self) -> Checked:
        self._pass_links(None)
        if self.at != len(self.tree):
            raise _differs(self.tree[self.at].path)
        return Checked(tuple(self.found), tuple(self.unkept))


def _matched(entry: Tree, kept: Kept, *, hashed: bool, contents: bool) -> Kept:
    seen = _kept(entry)
    if seen._replace(hash=None) != kept._replace(hash=None):
        raise _differs(kept.path)
    if kept.type != "file" or not contents:
        return seen
    digest = _hash(entry)
    if digest is None or (hashed and digest != kept.hash):
        raise _differs(kept.path)
    return seen._replace(hash=digest)


def _hash(entry: Tree) -> str | None:
    """The content hash of the file `entry` names, if it is still that very file."""
    fd = os.open(entry.path.rpartition("/")[2], _READ_FLAGS, dir_fd=entry.dir_fd)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino, st.st_size) != (
                entry.st.st_dev, entry.st.st_ino, entry.st.st_size):
            return None
        return chunked_version(iter(lambda: os.read(fd, _CHUNK), b""))
    finally:
        os.close(fd)


def _differs(path: str) -> BadRecord:
    return BadRecord(f"a kept tree that is not the one its record lists (at {path!r})")


def copy_tree(src_fd: int, name: str, dst_fd: int, blob: str, tree: tuple[Kept, ...]) -> int:
    """Copy the directory `name` of `src_fd` to a new directory `blob` of `dst_fd`,
    modes kept, its symlinks left out (a worker cannot make one: `tree` names them);
    the bytes copied. Each directory gets its mode once it is filled (a 0o500 one
    could not be)."""
    os.mkdir(blob, 0o700, dir_fd=dst_fd)
    src = os.open(name, SUBDIR_FLAGS, dir_fd=src_fd)
    dst = os.open(blob, SUBDIR_FLAGS, dir_fd=dst_fd)
    copied, modes = 0, []
    try:
        for kept in tree:
            if kept.type == "dir":
                os.mkdir(kept.path, 0o700, dir_fd=dst)
                modes.append((kept.path, kept.mode))
            elif kept.type == "file":
                copied += _copy_file(src, dst, kept)
        _set_modes(dst, modes)
        os.fchmod(dst, stat.S_IMODE(os.fstat(src).st_mode))
    finally:
        os.close(src)
        os.close(dst)
    return copied


def refill(src_fd: int, blob: str, dst_fd: int, name: str,
           tree: tuple[Kept, ...]) -> list[Kept]:
    """Put back into the directory `name` of `dst_fd` every file and directory of
    `tree` it lacks, from the kept copy `blob` of `src_fd`, modes kept: a removal the
    kernel stopped part-way is undone, not left half done. The symlinks it lacks
    (the copy holds none: copy_tree) are returned."""
    src = os.open(blob, SUBDIR_FLAGS, dir_fd=src_fd)
    try:
        dst = os.open(name, SUBDIR_FLAGS, dir_fd=dst_fd)
    except BaseException:
        os.close(src)
        raise
    modes, lost = [], []
    try:
        for kept in tree:  # a walk's order: each directory before what it holds
            try:
                os.stat(kept.path, dir_fd=dst, follow_symlinks=False)
                continue
            except FileNotFoundError:
                pass
            if kept.type == "dir":
                os.mkdir(kept.path, 0o700, dir_fd=dst)
                modes.append((kept.path, kept.mode))
            elif kept.type == "file":
                _copy_file(src, dst, kept)
            else:
                lost.append(kept)
        _set_modes(dst, modes)
    finally:
        os.close(src)
        os.close(dst)
    return lost


def _set_modes(dst: int, modes: list[tuple[str, int]]) -> None:
    """Each directory made gets its mode once it is filled (a 0o500 one could not be)."""
    for path, mode in reversed(modes):  # fchmod: the worker's seccomp has no chmod
        fd = os.open(path, SUBDIR_FLAGS, dir_fd=dst)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def unshare(dir_fd: int, blob: str, tree: Iterable[tuple[Tree, Kept]]) -> None:
    """Each file of the kept tree `blob` of `dir_fd` that has other hard links
    (renamed into the store with its directory) replaced by a copy of its own, mode
    kept: written in place through a name outside the tree, it would no longer be
    what the record lists, and the whole tree could not be put back. The tree has
    left its path already, so a copy that fails (a full store) is given up and
    that file stays shared, as it was before: the delete must still commit."""
    shared = [kept for entry, kept in tree
              if stat.S_ISREG(entry.st.st_mode) and entry.st.st_nlink > 1]
    if not shared:
        return
    with contextlib.suppress(OSError):
        top = os.open(blob, SUBDIR_FLAGS, dir_fd=dir_fd)
        try:
            for kept in shared:
                temp = os.path.join(os.path.dirname(kept.path), temp_name())
                try:
                    _copy_file(top, top, kept, to=temp)
                    os.rename(temp, kept.path, src_dir_fd=top, dst_dir_fd=top)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.unlink(temp, dir_fd=top)
        finally:
            os.close(top)


def _copy_file(src: int, dst: int, kept: Kept, to: str | None = None) -> int:
    # Multi-component paths are fine here: the source tree's directories were just
    # surveyed and the tree lock is held; the copy is checked against the list after.
    fd = os.open(kept.path, _READ_FLAGS, dir_fd=src)
    try:
        out = os.open(to or kept.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                      | os.O_NOFOLLOW, 0o600, dir_fd=dst)
        try:
            copied = 0
            while chunk := os.read(fd, _CHUNK):
                write_all(out, chunk)
                copied += len(chunk)
            os.fchmod(out, kept.mode)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return copied
