"""Directory listing on fds: one directory, or a depth-first walk that never
enters a symlink (each subdirectory is opened beneath its parent with O_NOFOLLOW)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator

from corral.fs.syscalls import SUBDIR_FLAGS


def entries(dir_fd: int) -> list[tuple[str, os.stat_result]]:
    """Sorted (name, lstat) of a directory opened O_RDONLY; vanished entries skipped."""
    found = []
    for name in sorted(os.listdir(dir_fd)):
        try:  # not contextlib.suppress: entering it per entry costs a fifth of the listing
            found.append((name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False)))
        except FileNotFoundError:
            continue
    return found


class Walk:
    """Iterator of (path relative to the start, lstat), depth-first and sorted,
    over an O_RDONLY directory fd it owns. The fds on its stack are closed when
    it is exhausted, closed or collected, even if it was never iterated.
    strict: a subdirectory that cannot be opened raises instead of being skipped
    (a check of every entry must not pass over what it could not see).
    prune(path): True -> that subdirectory is yielded but not entered.
    entered(path, names): told each directory's names as it is read, before any of
    them is yielded (path "" is the start)."""

    def __init__(
        self, fd: int, *, strict: bool = False, prune: Callable[[str], bool] | None = None,
        entered: Callable[[str, list[str]], None] | None = None,
    ) -> None:
        self._strict = strict
        self._prune = prune
        self._entered = entered
        self._stack: list[tuple[int, str, Iterator[tuple[str, os.stat_result]]]] = []
        try:
            self._stack.append((fd, "", iter(self._entries(fd, ""))))
        except BaseException:
            os.close(fd)
            raise

    def __iter__(self) -> Walk:
        return self

    def __next__(self) -> tuple[str, os.stat_result]:
        while self._stack:
            dir_fd, prefix, pending = self._stack[-1]
            item = next(pending, None)
            if item is None:
                self._stack.pop()
                os.close(dir_fd)
                continue
            name, st = item
            if stat.S_ISDIR(st.st_mode) and not (self._prune and self._prune(prefix + name)):
                self._descend(dir_fd, f"{prefix}{name}")
            return prefix + name, st
        raise StopIteration

    def _descend(self, dir_fd: int, path: str) -> None:
        try:
            child = os.open(path.rpartition("/")[2], SUBDIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            if self._strict:
                raise
            return  # vanished, replaced by a link or unreadable: list what can be
        try:
            self._stack.append((child, path + "/", iter(self._entries(child, path))))
        except OSError:
            os.close(child)
            if self._strict:
                raise

    def _entries(self, dir_fd: int, path: str) -> list[tuple[str, os.stat_result]]:
        found = entries(dir_fd)
        if self._entered is not None:
            self._entered(path, [name for name, _ in found])
        return found

    def close(self) -> None:
        while self._stack:
            os.close(self._stack.pop()[0])

    def __del__(self) -> None:
        self.close()
