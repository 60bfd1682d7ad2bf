"""What a worker knows of the root between two checkpoints: an inotify watch on every
directory its last whole walk listed, and what each listing held, so the next
checkpoint's walk lists again only the directories something changed since (as
git's fsmonitor and watchman do) and takes every other entry from the snapshot
it walked then.

A watch is put on a directory before it is listed: a change made while or after
it is listed is queued by the kernel, whoever makes it, while the worker is idle.
What is known is clean against one snapshot only: the one the walk that built it
answered for (`clean`); against any other base, after a queue overflow, or when
an ignore file or .git/info/exclude changed (the rules of every path beneath),
the walk is whole again, and builds it anew. Directories holding a file with more
than one link, or an ignore file that is a symlink, are listed every time: a
write through a link outside them is not reported to them; a listing that finds
a file's new link lists the directory it knew the file in too. What no watch
reports (a write through a shared mmap, a link made from outside the root to a
file in it, a change on a network file system made by another machine) is
caught by the next whole walk: the host asks for one when
the snapshot will be written whole (snapshots.MAX_DELTAS), and `[history]
snapshot_watch = false` asks for every one.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable

from corral.errors import CorralError
from corral.fs import Root
from corral.sandbox import _inotify
from corral.tools.ignore import EXCLUDE_FILE, IGNORE_FILES, MAX_IGNORE_BYTES, Ignores

Rules = tuple[tuple[str, int, int, int, int], ...]  # a directory's ignore files' identities
Exclude = tuple[str, int, str | None] | None  # .git/info/exclude's type, size and version


class Rewalk(Exception):
    """What is known cannot stand for the tree: walk it whole."""


def rules_of(dir_fd: int, names: Iterable[str]) -> tuple[Rules, bool]:
    """The identity of each ignore file among a directory's `names` (of the file a
    symlink leads to: the rules are read through it), and whether one is a link
    (whose target's change no watch of this directory reports)."""
    found, linked = [], False
    for name in IGNORE_FILES:
        if name in names:
            try:
                linked = linked or stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
                st = os.stat(name, dir_fd=dir_fd)
            except OSError:
                continue
            found.append((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(found), linked


def exclude_identity(root: Root) -> Exclude:
    """What .git/info/exclude holds now (resolved beneath the root as the walk's
    rules read it; its bytes' version: .git is never watched)."""
    try:
        info = root.info(EXCLUDE_FILE, follow=True, version_limit=MAX_IGNORE_BYTES)
    except (CorralError, OSError):
        return None
    return None if info is None else (info.type, info.size, info.version)


class Watch:
    """The watches and listings of one whole walk of the root, kept up by the
    incremental walks after it. `key`: what the walks' rules were made of (a walk
    with other rules is whole)."""

    def __init__(self, key: object, ignores: Ignores, exclude: Exclude) -> None:
        self.fd = _inotify.init()
        self.key, self.ignores, self.exclude = key, ignores, exclude
        self.clean: str | None = None  # the snapshot all this is clean against
        self._wds: dict[int, str] = {}
        self._dirs: dict[str, tuple[int, int, int]] = {}  # path -> (wd, dev, ino)
        self.names: dict[str, list[str]] = {}  # a directory's entries, as last listed
        self.skipped: dict[str, list[list[str]]] = {}  # and those it left out, and why
        self.rules: dict[str, Rules] = {}  # and its ignore files
        self.linked: set[str] = set()  # directories listed every time (hard links)
        # a file's inode -> a directory it was listed in: a new link to it, made in
        # another directory, is reported there only (the other is listed then too)
        self.inodes: dict[int, str] = {}
        self._stale = False  # a directory with ignore files went: the rules cached

    def close(self) -> None:
        os.close(self.fd)

    def watch(self, dir_fd: int, path: str, st: os.stat_result) -> None:
        """A watch on the directory `path`, open as `dir_fd`, before it is listed
        (Rewalk if the kernel refuses one: ENOSPC past max_user_watches)."""
        try:
            wd = _inotify.add_watch(self.fd, dir_fd, _inotify.CHANGES)
        except OSError as error:
            raise Rewalk(f"no watch ({error.strerror})") from None
        old = self._wds.get(wd)
        if old is not None and old != path and self._stands(old, wd):
            del self._dirs[old]  # the same directory, moved here
        before = self._dirs.get(path)
        if before is not None and before[0] != wd:  # another directory had this name:
            self._lose(before[0], path)  # its watch says nothing of this one
        self._wds[wd] = path
        self._dirs[path] = (wd, st.st_dev, st.st_ino)

    def listed(self, path: str, names: list[str], skipped: list[list[str]], rules: Rules,
               linked: bool) -> None:
        self.names[path], self.skipped[path], self.rules[path] = names, skipped, rules
        if linked:
            self.linked.add(path)
        else:
            self.linked.discard(path)

    def holds(self, path: str, st: os.stat_result) -> bool:
        """`path` is a directory watched as this same one (nothing it holds changed
        unless its watch said so)."""
        known = self._dirs.get(path)
        return known is not None and known[1:] == (st.st_dev, st.st_ino)

    def dirty(self, root: Root) -> list[str]:
        """The directories to list again, shallowest first: those whose watch
        reported a change since the last drain, the parent of each that went, and
        those holding hard links. Rewalk if the queue overflowed, the root itself
        went, or .git/info/exclude changed."""
        dirty = set(self.linked)
        for wd, mask in _inotify.events(self.fd):
            if mask & _inotify.IN_Q_OVERFLOW:
                raise Rewalk("the watch's queue overflowed")
            path = self._wds.get(wd)
            if path is None:
                continue  # a watch forgotten (its directory went, or moved away)
            if mask & _inotify.GONE:
                if not path:
                    raise Rewalk("the root itself moved or went")
                if self._stands(path, wd):  # it stood for `path`: the
                    # watches beneath went with it (or stand for other paths now)
                    for below in [p for p in self._dirs if p.startswith(f"{path}/")]:
                        self._lose(self._dirs[below][0], below)
                self._lose(wd, path)
                dirty.add(path.rpartition("/")[0])
            else:
                dirty.add(path)
        if exclude_identity(root) != self.exclude:
            raise Rewalk(f"{EXCLUDE_FILE} changed")
        if self._stale:  # (the Ignores caches each directory's rules by its path)
            raise Rewalk("a directory holding ignore files went")
        return sorted((p for p in dirty if p in self._dirs), key=lambda p: p.count("/"))

    def _lose(self, wd: int, path: str) -> None:
        """A directory's watch is gone, or stands for it no longer (it moved): it is
        listed whole again if it is still there (its listings stay, to say what
        went with it)."""
        self._wds.pop(wd, None)
        if self._stands(path, wd):
            del self._dirs[path]
        with contextlib.suppress(OSError):
            _inotify.rm_watch(self.fd, wd)

    def _stands(self, path: str, wd: int) -> bool:
        """The watch `wd` is the one of the directory named `path` now."""
        known = self._dirs.get(path)
        return known is not None and known[0] == wd

    def beneath(self, path: str) -> list[str]:
        """Every path the listings hold beneath the directory `path`."""
        found: list[str] = []
        stack = [path]
        while stack:
            directory = stack.pop()
            for name in self.names.get(directory, ()):
                child = f"{directory}/{name}" if directory else name
                found.append(child)
                if child in self.names:
                    stack.append(child)
        return found

    def drop(self, path: str) -> None:
        """A directory that is gone, and what the listings held beneath it."""
        for directory in [path, *self.beneath(path)]:
            if directory in self.names:
                del self.names[directory]
                self.skipped.pop(directory, None)
                self._stale = self._stale or bool(self.rules.pop(directory, None))
                self.linked.discard(directory)
                if (known := self._dirs.get(directory)) is not None:
                    self._lose(known[0], directory)

    def all_skipped(self) -> list[list[str]]:
        return [skip for skips in self.skipped.values() for skip in skips]
