"""Several files changed as one (apply_patch), all or nothing.

1. stage (stage / stage_removal): each new file is written and fsynced beside its
   target under a temp name (as the atomic writer names them); a removal only
   picks the name its file will be set aside under.
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
recover.py finishes or undoes it. Without a history store nothing says which
temps belong together: see docs/history.md.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence

from corral.errors import CorralError
from corral.fs._atomic import holding
from corral.fs._errors import fail, from_errno, require_file
from corral.fs.root import Keep, Root
from corral.fs.staged import Staged
from corral.fs.syscalls import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    renameat2,
    temp_name,
    write_new,
)
from corral.fs.types import Guard
from corral.fs.version import content_version


@contextlib.contextmanager
def tree_locked(roots: Sequence[Root]) -> Iterator[None]:
    """The tree lock of every root of a batch, exclusively, from staging to landing.
    Every other change of corral's in those roots holds it shared (and a directory
    move exclusively), so none is between its checks and its rename meanwhile: the
    batch's own checks hold until it lands. Exclusive, not shared plus each
    directory's version lock as the atomic writer takes one: a batch would then
    hold several of those and convert a root's shared lock to exclusive, and two
    batches, or a batch and a write, could each wait for the other."""
    with roots[0].locked(*roots[1:], exclusive=True):
        yield


def stage(
    root: Root, rel: str, data: bytes, *, given: str, old: bytes | None,
    mode: int | None = None, guard: Guard = None, made: list[str],
) -> Staged:
    """One add (`old` None: the target must be missing; parents are made, into
    `made`) or update (`old`: the bytes read, which the target must still hold
    when the batch lands) of a batch: the new file written and fsynced beside the
    target. `mode`: a new file's permission bits (an update keeps the old file's).
    The caller holds tree_locked, so this never takes the tree lock (a failure's
    directories are the caller's to remove, with remove_made)."""
    with root.at("write", rel, follow=True, guard=guard, changes=True, named=True,
                 make_parents=old is None, made=made) as t:
        name = t.name()
        if old is None and t.st is not None:
            raise OSError(errno.EEXIST, "exists")
        if old is not None:
            require_file(t.st, t.trailing_slash)
            assert t.st is not None
            mode = stat.S_IMODE(t.st.st_mode)
        dir_fd = os.dup(t.dir_fd)
        try:
            temp = write_temp(dir_fd, data, mode, sync=root.durable)
        except BaseException:
            os.close(dir_fd)
            raise
        return Staged(root.path, t.rel, given, "add" if old is None else "update", dir_fd,
                      name, temp, old, mode, len(data), content_version(data), made,
                      staged=True)


def stage_removal(
    root: Root, rel: str, *, given: str, old: bytes | None, link: str | None = None,
    guard: Guard = None,
) -> Staged:
    """A removal in a batch of a regular file holding `old` (what the caller read),
    or of the symlink (the link, not its target) to `link`: nothing changes until
    the batch lands."""
    with root.at("delete", rel, follow=False, guard=guard, changes=True, named=True) as t:
        name = t.name()
        if link is None:
            require_file(t.st, t.trailing_slash)
        elif t.st is None or not stat.S_ISLNK(t.st.st_mode):
            raise fail("conflict", "patch", given, "it is no longer a symlink")
        assert t.st is not None
        return Staged(root.path, t.rel, given, "remove", os.dup(t.dir_fd), name, temp_name(),
                      old, stat.S_IMODE(t.st.st_mode), link=link)


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


def write_temp(dir_fd: int, data: bytes, mode: int | None, *, sync: bool) -> str:
    """A new temp file beside the target holding `data`; its name."""
    name = temp_name()
    write_new(dir_fd, name, data, mode=mode, sync=sync)
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
        current = holding(item.dir_fd, item.name, item.old) is not None
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
