"""The values Root's methods take and give (as Go's os/types.go): what a guard is,
a move's guards, what info() and a listing answer, what a write did."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import NamedTuple

Guard = Callable[[str], None] | None


class MoveGuard(NamedTuple):
    """The checks of a move, each given a resolved root-relative path: `source` and
    `destination` on the two paths it names; for a directory, every entry beneath
    it too, old and new path: `moved(old, new)` if given (one decision per entry),
    else `source(old)` and `destination(new)`."""

    source: Guard = None
    destination: Guard = None
    moved: Callable[[str, str], None] | None = None

    @property
    def checks(self) -> bool:
        return not (self.source is None and self.destination is None and self.moved is None)

    def entry(self, old: str, new: str) -> None:
        if self.moved is not None:
            self.moved(old, new)
        else:
            if self.source is not None:
                self.source(old)
            if self.destination is not None:
                self.destination(new)


UNGUARDED = MoveGuard()


class FileInfo(NamedTuple):
    type: str  # "file" | "dir" | "symlink" | "other"
    size: int
    modified: float  # st_mtime
    mode: int  # permission bits only (st_mode & 0o7777)
    nlink: int
    symlink_target: str | None = None  # readlink text when type == "symlink"
    version: str | None = None  # content_version, when info() was asked for it
    ino: int = 0  # st_ino: which file it is (history tells a moved file by it)


class Entry(NamedTuple):
    """A NamedTuple, not a frozen dataclass: a listing makes one per entry, and a
    frozen dataclass's __init__ (four object.__setattr__) cost a tenth of a listing."""

    path: str  # relative to the directory listed/walked ("a/b.txt")
    type: str  # "file" | "dir" | "symlink" | "other" (never follows symlinks)
    size: int
    modified: float


class WriteOutcome(NamedTuple):
    created: bool
    version: str  # content_version of the bytes now in the file


# One lookup by file type: a listing asks once per entry.
_KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink"}


def kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "other")


def entry_of(path: str, st: os.stat_result) -> Entry:
    return Entry(path, kind(st.st_mode), st.st_size, st.st_mtime)
