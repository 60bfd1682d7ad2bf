"""A deleted directory kept in the store: the list of its entries its record holds
(made from the survey the delete decided on) and the check of a kept tree
against that list. The host checks a worker's kept tree before it commits the
record (and hashes every file into the list); an undo checks it again, hashes
included, before it moves the tree back. A kept tree that is not exactly its
list (an entry more or less, another type, mode, size, target, or content) is
refused: whatever lies in a work directory was written by a worker."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterable

from corral.fs._listing import SUBDIR_FLAGS
from corral.fs._tree import Tree, walk
from corral.fs.version import chunked_version
from corral.history.records import BadRecord, Kept

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


def kept_of(tree: Iterable[Tree]) -> tuple[Kept, ...]:
    """The record's list of a surveyed tree (no hashes: the host adds them)."""
    return tuple(_kept(entry) for entry in tree)


def _kept(entry: Tree) -> Kept:
    mode, kind = stat.S_IMODE(entry.st.st_mode), _type(entry.st.st_mode)
    if kind == "symlink":
        return Kept(entry.path, kind, mode, target=entry.target)
    return Kept(entry.path, kind, mode, entry.st.st_size if kind == "file" else 0)


def _type(mode: int) -> str:
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
        seen.add(path)
        if kept.type == "dir":
            dirs.add(path)


def check_kept(dir_fd: int, name: str, mode: int | None, tree: tuple[Kept, ...],
               *, hashed: bool, contents: bool = True) -> tuple[Kept, ...]:
    """The list of the kept tree `name` of `dir_fd`, with every file's content hash,
    if the tree is exactly `tree` (and its top directory has permission bits
    `mode`); with `hashed`, each hash must also be the one `tree` holds; without
    `contents`, no file is read (types, modes, sizes and targets only). BadRecord
    otherwise. Nothing is followed; only regular files are opened."""
    try:
        fd = os.open(name, SUBDIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        raise BadRecord("a kept tree that is missing or not a directory") from None
    entries = walk(fd)
    try:
        if mode is not None and stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            raise BadRecord("a kept tree whose directory's mode is not its record's")
        found = []
        for count, entry in enumerate(entries):
            if count >= len(tree):
                raise _differs(entry.path)
            found.append(_matched(entry, tree[count], hashed=hashed, contents=contents))
        if len(found) != len(tree):
            raise _differs(tree[len(found)].path)
        return tuple(found)
    except OSError as exc:
        raise BadRecord(f"a kept tree that cannot be read ({exc.strerror})") from None
    finally:
        entries.close()
        os.close(fd)


def _matched(entry: Tree, kept: Kept, *, hashed: bool, contents: bool) -> Kept:
    seen = _kept(entry)
    if dataclasses.replace(seen, hash=None) != dataclasses.replace(kept, hash=None):
        raise _differs(kept.path)
    if kept.type != "file" or not contents:
        return seen
    digest = _hash(entry)
    if digest is None or (hashed and digest != kept.hash):
        raise _differs(kept.path)
    return dataclasses.replace(seen, hash=digest)


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
    """Copy the directory `name` of `src_fd` (no symlinks in it: the caller refused
    those) to a new directory `blob` of `dst_fd`, modes kept; the bytes copied.
    Each directory gets its mode once it is filled (a 0o500 one could not be)."""
    os.mkdir(blob, 0o700, dir_fd=dst_fd)
    src = os.open(name, SUBDIR_FLAGS, dir_fd=src_fd)
    dst = os.open(blob, SUBDIR_FLAGS, dir_fd=dst_fd)
    copied, modes = 0, []
    try:
        for kept in tree:
            if kept.type == "dir":
                os.mkdir(kept.path, 0o700, dir_fd=dst)
                modes.append((kept.path, kept.mode))
            else:
                copied += _copy_file(src, dst, kept)
        for path, mode in reversed(modes):  # fchmod: the worker's seccomp has no chmod
            fd = os.open(path, SUBDIR_FLAGS, dir_fd=dst)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        os.fchmod(dst, stat.S_IMODE(os.fstat(src).st_mode))
    finally:
        os.close(src)
        os.close(dst)
    return copied


def _copy_file(src: int, dst: int, kept: Kept) -> int:
    # Multi-component paths are fine here: the source tree's directories were just
    # surveyed and the tree lock is held; the copy is checked against the list after.
    fd = os.open(kept.path, _READ_FLAGS, dir_fd=src)
    try:
        out = os.open(kept.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                      | os.O_NOFOLLOW, 0o600, dir_fd=dst)
        try:
            copied = 0
            while chunk := os.read(fd, _CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
                copied += len(chunk)
            os.fchmod(out, kept.mode)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return copied
