"""One change of a batch (fs/batch.py stages and lands it; a Keep records it)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field


@dataclass
class Staged:
    """One change of a batch, staged: `temp` (a name in `dir_fd`, beside `name`)
    holds the new file of an add or update; a removal's file is set aside there."""

    root_path: str  # the Root's real path (Root.path)
    rel: str  # the target, resolved, root-relative
    given: str  # the path as the caller named it (messages)
    action: str  # "add" | "update" | "remove"
    dir_fd: int  # O_PATH fd of the target's directory, owned until discard()
    name: str
    temp: str
    old: bytes | None  # what an update or removal read: the target must still hold it
    mode: int | None  # the old file's permission bits (None: a new file)
    size: int = 0  # of the new file
    version: str | None = None  # of the new file
    made: list[str] = field(default_factory=list)  # directories made on the way
    staged: bool = False  # the temp exists (an add's or update's)
    landed: bool = False
    link: str | None = None  # a removed symlink's target (old is None): unlinked, last
    # a move's other end: the removal of its source, or the add at its destination
    partner: Staged | None = field(default=None, compare=False, repr=False)

    @property
    def temp_rel(self) -> str:
        """The temp's path beneath the root, as a record names it."""
        parent = posixpath.dirname(self.rel)
        return posixpath.join(parent, self.temp) if parent else self.temp


def set_aside(item: Staged) -> bool:
    """Whether the old file of a landed change waits under its temp (an update's or a
    removal's), for the Keep to put away."""
    return item.landed and item.action != "add" and item.link is None
