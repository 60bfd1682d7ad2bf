"""A directory tree beneath a parent fd: the survey a recursive delete decides on
(every entry, never following a symlink, never crossing into another file
system) and the removal of a tree through fds (unlinkat on each name beneath its
own parent's fd, so a name swapped for a symlink meanwhile is removed as a link)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Generator, Iterator
from typing import NamedTuple

import corral.fs._listing as _listing
from corral.fs.syscalls import SUBDIR_FLAGS

# delete_directory checks and records every entry beneath the directory (its history
# record lists them all); past this many it is refused rather than make a record
# the host would have to read on every undo.
MAX_TREE_ENTRIES = 10_000
# A walk holds an fd per level (a copy into the history store two): deeper trees are
# refused up front, well within the worker's MAX_OPEN_FILES, not failed with EMFILE
# part-way through a survey.
MAX_TREE_DEPTH = 256


class Tree(NamedTuple):
    """One entry beneath a directory: its path below it, its lstat, a symlink's
    target (read through its parent's fd, as it was when walked) and that parent's
    fd (open only until the walk goes on)."""

    path: str
    st: os.stat_result
    target: str | None = None
    dir_fd: int = -1


class TreeRefused(Exception):
    """A survey found what delete_directory never deletes: `code`, the entry, why."""

    def __init__(self, code: str, path: str, why: str) -> None:
        super().__init__(why)
        self.code, self.path, self.why = code, path, why


def walk(fd: int) -> Generator[Tree, None, None]:
    """Every entry beneath the directory `fd`, depth-first, sorted by name; each
    subdirectory opened beneath its parent's fd with O_NOFOLLOW (OSError if it
    cannot be: a check must not pass over what it cannot see). A stack, not
    recursion: a deep tree must not exhaust Python's recursion limit."""
    stack: list[tuple[int, str, Iterator[tuple[str, os.stat_result]]]] = [
        (fd, "", iter(_listing.entries(fd)))]
    try:
        while stack:
            dir_fd, prefix, pending = stack[-1]
            item = next(pending, None)
            if item is None:
                stack.pop()
                if stack:  # the caller's own fd stays open
                    os.close(dir_fd)
                continue
            name, st = item
            if stat.S_ISLNK(st.st_mode):
                yield Tree(prefix + name, st, os.readlink(name, dir_fd=dir_fd), dir_fd)
                continue
            yield Tree(prefix + name, st, None, dir_fd)
            if stat.S_ISDIR(st.st_mode):
                child = os.open(name, SUBDIR_FLAGS, dir_fd=dir_fd)
                try:
                    stack.append((child, f"{prefix}{name}/", iter(_listing.entries(child))))
                except BaseException:
                    os.close(child)
                    raise
    finally:
        for dir_fd, _, _ in stack[1:]:
            os.close(dir_fd)


def survey(dir_fd: int, name: str, top: os.stat_result) -> list[Tree]:
    """Every entry beneath the directory `name` of `dir_fd` (which `top` is the
    lstat of), as `walk` gives them. TreeRefused for a mount point of another file
    system (a bind mount of the same one has the same st_dev: it is not seen, as
    Root's docstring says of mounts), a FIFO, socket or device, more than
    MAX_TREE_ENTRIES, or directories nested over MAX_TREE_DEPTH deep; OSError if
    the directory is no longer `top`."""
    fd = os.open(name, SUBDIR_FLAGS, dir_fd=dir_fd)
    entries = walk(fd)
    try:
        if not _same(os.fstat(fd), top):
            raise OSError(errno.ENOENT, "replaced")
        return [_surveyed(entry, top, count) for count, entry in enumerate(entries)]
    finally:
        entries.close()
        os.close(fd)


def _surveyed(entry: Tree, top: os.stat_result, count: int) -> Tree:
    if count == MAX_TREE_ENTRIES:
        raise TreeRefused("too_large", "", f"it holds over {MAX_TREE_ENTRIES} entries")
    # checked before walk opens the directory, so the deepest fd is never opened
    if stat.S_ISDIR(entry.st.st_mode) and entry.path.count("/") + 2 > MAX_TREE_DEPTH:
        raise TreeRefused("too_large", "", f"its directories are nested over "
                          f"{MAX_TREE_DEPTH} deep")
    if entry.st.st_dev != top.st_dev:
        raise TreeRefused("path_denied", entry.path,
                          "a mount point (another file system), never deleted")
    if stat.S_IFMT(entry.st.st_mode) not in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK):
        raise TreeRefused("not_a_regular_file", entry.path,
                          "a FIFO, socket or device, which corral cannot restore")
    return entry


def remove(dir_fd: int, name: str, top_st: os.stat_result | None = None) -> None:
    """Remove the tree `name` of `dir_fd` (if `top_st` is given, only if it is still
    that directory: ENOENT otherwise): each entry by its name in its own parent's
    fd (opened O_NOFOLLOW), deepest first; a symlink is unlinked, never entered.
    A stack, not recursion, as `walk`."""
    top = os.open(name, SUBDIR_FLAGS, dir_fd=dir_fd)
    if top_st is not None and not _same(os.fstat(top), top_st):
        os.close(top)
        raise OSError(errno.ENOENT, "replaced")
    stack = [(dir_fd, name, top, _names(top))]
    try:
        while stack:
            parent, own, fd, pending = stack[-1]
            child = next(pending, None)
            if child is None:
                stack.pop()
                os.close(fd)
                os.rmdir(own, dir_fd=parent)
                continue
            try:
                os.unlink(child, dir_fd=fd)
            except IsADirectoryError:
                sub = os.open(child, SUBDIR_FLAGS, dir_fd=fd)
                stack.append((fd, child, sub, _names(sub)))
    finally:
        for _, _, fd, _ in stack:
            os.close(fd)


def _names(fd: int) -> Iterator[str]:
    return iter(os.listdir(fd))


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
