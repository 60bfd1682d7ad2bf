"""Several files changed as one (apply_patch), all or nothing.

1. stage (Root.stage / Root.stage_removal): each new file is written and fsynced
   beside its target under a temp name (as the atomic writer names them); a
   removal only picks the name its file will be set aside under.
2. land: every target is checked to still hold what the caller read (or to be
   missing, for a new file); the Keep is entered
   (a history keeper writes one record naming every entry and its temp), then
   the renames land one after another: a new file by RENAME_NOREPLACE, an
   update by RENAME_EXCHANGE (the old file stays under the temp name), a
   removal by renaming the file aside. A failure part-way swaps back what
   landed, so within the call the tree shows the whole batch or none of it. Once
   all landed the Keep puts the old files away (into the history store, or
   unlinks them).

What a kill part-way leaves is the record and the temps; corral/history/
restore.py finishes or undoes it. Without a history store nothing says which
temps belong together: see docs/history.md.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.errors import CorralError
from corral.fs import _atomic, _treelock
from corral.fs._errors import fail, from_errno
from corral.fs._sys import RENAME_EXCHANGE, RENAME_NOREPLACE, renameat2

if TYPE_CHECKING:
    from corral.fs.root import Keep, Root

ACTIONS = ("add", "update", "remove")


@dataclass
class Staged:
    """One change of a batch, staged: `temp` (a name in `dir_fd`, beside `name`)
    holds the new file of an add or update; a removal's file is set aside there."""

    root: Root
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


@contextlib.contextmanager
def tree_locked(roots: Sequence[Root]) -> Iterator[None]:
    """The tree lock of every root of a batch, exclusively, from staging to landing.
    Every other change of corral's in those roots holds it shared (and a directory
    move exclusively), so none is between its checks and its rename meanwhile: the
    batch's own checks hold until it lands. Exclusive, not shared plus each
    directory's version lock as the atomic writer takes one: a batch would then
    hold several of those and convert a root's shared lock to exclusive, and two
    batches, or a batch and a write, could each wait for the other."""
    pairs = [(root._identity, root.fd) for root in roots]  # as Root._locked: known at open
    with _treelock.held(pairs, exclusive=True):
        yield


def land(staged: Sequence[Staged], keep: Keep, *, durable: bool) -> None:
    """Check, then land every staged change, all or none (see the module docstring);
    the caller holds tree_locked."""
    for item in staged:
        _check_current(item)
    # A worker cannot make a symlink (Landlock), so it cannot set a link aside under
    # a temp name nor put one back: a link's removal is an unlink, after every rename
    # landed (only a refused unlink of a second link could then leave the first gone).
    order = [item for item in staged if item.link is None]
    order += [item for item in staged if item.link is not None]
    with keep.batch(staged):
        at = order[0] if order else None
        try:
            for at in order:
                _rename(at)
                at.landed = True
        except BaseException as exc:
            for item in reversed(order):
                if item.landed and item.link is None:
                    with contextlib.suppress(OSError):
                        _rename(item, undo=True)
                        item.landed = False
            if isinstance(exc, OSError) and at is not None:  # say which file, not just why
                raise from_errno(exc.errno, "patch", at.given) from None
            raise
    if durable:
        for fd in {_identity(item.dir_fd): item.dir_fd for item in staged}.values():
            _fsync_dir(fd)


def discard(staged: Sequence[Staged]) -> None:
    """After a batch that did not land (or did): remove the temps still there and
    close the directory fds. Directories made on the way are the caller's (it
    removes them once it holds no tree lock)."""
    for item in staged:
        if item.staged and not item.landed:
            with contextlib.suppress(OSError):
                os.unlink(item.temp, dir_fd=item.dir_fd)
        with contextlib.suppress(OSError):
            os.close(item.dir_fd)


def set_aside(item: Staged) -> bool:
    """Whether the old file of a landed change waits under its temp (an update's or a
    removal's), for the Keep to put away."""
    return item.landed and item.action != "add" and item.link is None


def write_temp(dir_fd: int, data: bytes, mode: int | None, *, sync: bool) -> str:
    """A new temp file beside the target holding `data`; its name."""
    name = _atomic.temp_name()
    _atomic.write_new(dir_fd, name, data, mode=mode, sync=sync)
    return name


def _rename(item: Staged, *, undo: bool = False) -> None:
    """Land `item` (an add's or update's temp in at the target, a removal's target out
    to the temp), or undo that: the same rename the other way (an update's exchange
    is its own inverse)."""
    if item.link is not None:  # see land: never undone
        os.unlink(item.name, dir_fd=item.dir_fd)
        return
    src, dst = (item.name, item.temp) if item.action == "remove" else (item.temp, item.name)
    if undo:
        src, dst = dst, src
    flags = RENAME_EXCHANGE if item.action == "update" else RENAME_NOREPLACE
    renameat2(item.dir_fd, src, item.dir_fd, dst, flags)


def _check_current(item: Staged) -> None:
    """The target is still what the caller decided on: missing for an add, the same
    symlink for a link's removal, else the very bytes it read (a change made
    meanwhile by anyone is a conflict)."""
    if item.action == "add":
        try:
            os.stat(item.name, dir_fd=item.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        raise fail("already_exists", "patch", item.given, "it was created meanwhile")
    if item.link is not None:
        current = _link_at(item.dir_fd, item.name) == item.link
    else:
        assert item.old is not None
        current = _atomic.holding(item.dir_fd, item.name, item.old) is not None
    if not current:
        raise CorralError(
            "conflict", f"{item.given} changed while the patch was being applied; read it "
            "again and retry the patch.")


def _link_at(dir_fd: int, name: str) -> str | None:
    """The target of the symlink `name`; None when it is anything else or missing."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:  # EINVAL: not a link
        return None


def _fsync_dir(dir_fd: int) -> None:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # a file system without directory fsync
            raise
    finally:
        os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino
