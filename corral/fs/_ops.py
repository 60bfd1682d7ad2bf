"""What Root's methods do once a path is resolved, on the parent directory fd and
the name in it (as Go's root_unix.go beneath root.go): no resolution here, no
Root. Failures are OSError or CorralError naming the caller's path."""

from __future__ import annotations

import errno
import fcntl
import os
import stat

import corral.fs._listing as _listing
import corral.fs._resolve as _resolve
import corral.fs.tree as _tree
from corral.errors import CorralError
from corral.fs._errors import fail, require_file
from corral.fs.syscalls import SUBDIR_FLAGS
from corral.fs.types import MoveGuard
from corral.fs.version import content_version

_READ_CHUNK = 1 << 20  # reads go a MiB at a time up to the caller's limit
# A directory move guards every entry beneath it (each is renamed too); past this
# many the move is refused rather than stall the worker on one huge tree.
MAX_MOVED_ENTRIES = 100_000


def too_large(op: str, rel: str, size: int, limit: int) -> CorralError:
    return fail("too_large", op, rel, f"{size} bytes is over the {limit} byte limit")


def appendable(fd: int, rel: str, adding: int, limit: int) -> os.stat_result:
    """The file an append opened (`fd`), locked for it, and its fstat; refused when
    it is not a regular file, has other hard links, or would pass `limit`."""
    # appends of one file, and cutting a torn one back, go one at a time: the size
    # recorded before is the size this append starts at
    fcntl.flock(fd, fcntl.LOCK_EX)
    st = os.fstat(fd)
    require_file(st)
    if st.st_nlink > 1:
        raise fail("path_denied", "append", rel,
                   "the file has other hard links, which may lie outside the roots")
    if st.st_size + adding > limit:
        raise too_large("append", rel, st.st_size + adding, limit)
    return st


def read_upto(fd: int, limit: int) -> tuple[bytes, int]:
    """The file's bytes and how many were read: all of them, or at most one chunk
    past `limit` (the caller refuses that: it grew while read)."""
    chunks, size = [], 0
    while size <= limit and (chunk := os.read(fd, _READ_CHUNK)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks) if size <= limit else b"", size


def version_of(t: _resolve.Target, limit: int) -> str | None:
    """content_version of the regular file `t` names, opened without following;
    None past `limit` or when it is no longer a regular file (as read_bytes decides)."""
    try:
        fd = t.open(os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):
            return None  # removed, or now a link or a socket: not this file any more
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data, size = read_upto(fd, limit)
        return content_version(data) if size <= limit else None
    finally:
        os.close(fd)


def is_dir_there(resolver: _resolve.Resolver, t: _resolve.Target) -> bool:
    """After a mkdir found its name taken: whether that is a directory (a link to a
    directory beneath the root counts); False for anything else."""
    assert t.leaf is not None
    st = os.stat(t.leaf, dir_fd=t.dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        try:
            os.close(resolver.open_dir(t.rel)[0])
        except (NotADirectoryError, FileNotFoundError):
            return False
        return True
    return stat.S_ISDIR(st.st_mode)


def has_entries(dir_fd: int, name: str) -> bool:
    fd = os.open(name, SUBDIR_FLAGS, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as found:
            return next(found, None) is not None
    finally:
        os.close(fd)


def survey(t: _resolve.Target, rel: str, recursive: bool) -> list[_tree.Tree]:
    """Every entry beneath the directory `t` names, for remove_tree: refused (with
    the entry's path as the caller would name it) as _tree.survey refuses, and a
    non-empty directory without `recursive`."""
    assert t.st is not None
    try:
        tree = _tree.survey(t.dir_fd, t.name(), t.st)
    except _tree.TreeRefused as refused:
        where = _resolve.join(rel.rstrip("/"), refused.path) if refused.path else rel
        raise fail(refused.code, "delete", where, refused.why) from None
    if tree and not recursive:
        raise fail("invalid_arguments", "delete", rel,
                   f"the directory is not empty ({len(tree)} entries beneath it); "
                   "pass recursive: true to delete it with everything in it")
    return tree


def check_move(
    s: _resolve.Target, d: _resolve.Target, same_root: bool, src: str, dst: str
) -> None:
    """A move of what `s` names to `d` refused before it is tried: "x/" naming a
    non-directory (rename does not follow a link for it), or a directory moved
    into itself."""
    assert s.st is not None
    is_dir = stat.S_ISDIR(s.st.st_mode)
    if ((s.trailing_slash or d.trailing_slash) and not is_dir) or (
        d.trailing_slash and d.st is not None and not stat.S_ISDIR(d.st.st_mode)
    ):
        raise OSError(errno.ENOTDIR, "not a directory")
    if is_dir and same_root and (d.rel == s.rel or d.rel.startswith(s.rel + "/")):
        raise fail("invalid_arguments", "move", src, f"cannot move into itself ({dst})")


def guard_beneath(
    dir_fd: int, name: str, src: str, old: str, new: str, guard: MoveGuard
) -> None:
    """A directory move's guard on every entry beneath it, old path and new."""
    fd = os.open(name, SUBDIR_FLAGS, dir_fd=dir_fd)
    walker = _listing.Walk(fd, strict=True)
    try:
        for count, (path, _) in enumerate(walker, 1):
            if count > MAX_MOVED_ENTRIES:
                why = f"it holds over {MAX_MOVED_ENTRIES} entries, each of which a move checks"
                raise fail("too_large", "move", src, why)
            guard.entry(_resolve.join(old, path), _resolve.join(new, path))
    finally:
        walker.close()
