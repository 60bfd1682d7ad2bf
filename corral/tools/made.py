"""The directories a call made on its way to a file (write_file, append_file and
create_directory make missing parents), counted for the host's
files_created_per_hour: every such directory is created too."""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from corral.fs import Keep, Root
from corral.fs.staged import Staged
from corral.fs.tree import Tree


class CountingKeep:
    """A Keep that passes each change on to `inner` and counts the directories made
    on the way (the fs layer hands every Keep that list as the change lands)."""

    def __init__(self, inner: Keep) -> None:
        self.inner = inner
        self.made = 0

    def writing(self, root: Root, rel: str, made: list[str], version: str, size: int,
                st: os.stat_result | None) -> AbstractContextManager[Any]:
        self.made += len(made)
        return self.inner.writing(root, rel, made, version, size, st)

    def appending(self, root: Root, rel: str, made: list[str], size: int | None,
                  data: bytes) -> AbstractContextManager[None]:
        self.made += len(made)
        return self.inner.appending(root, rel, made, size, data)

    def making_dir(self, root: Root, rel: str, made: list[str]) -> AbstractContextManager[None]:
        self.made += len(made)
        return self.inner.making_dir(root, rel, made)

    def remove(self, root: Root, rel: str, dir_fd: int, name: str, st: os.stat_result) -> None:
        self.inner.remove(root, rel, dir_fd, name, st)

    def remove_tree(self, root: Root, rel: str, dir_fd: int, name: str, st: os.stat_result,
                    tree: list[Tree]) -> None:
        self.inner.remove_tree(root, rel, dir_fd, name, st, tree)

    def move(self, src: tuple[Root, str, int, str, os.stat_result],
             dst: tuple[Root, str, int, str, os.stat_result | None], flags: int) -> None:
        self.inner.move(src, dst, flags)

    def together(self) -> AbstractContextManager[None]:
        return self.inner.together()

    def batch(self, staged: Sequence[Staged]) -> AbstractContextManager[None]:
        self.made += sum(len(change.made) for change in staged)  # a patch's new parents
        return self.inner.batch(staged)
