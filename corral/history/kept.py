"""What a worker may read of its workspace's store: one kept directory per root.

    k-<root>/      (a hash of the root's path) the committed records that name the
      r-<id>.json  root and every checkpoint a sandbox writing it made (hard links of
      c-<id>.json  the store's own files), and the kept copies of the root's changes,
      b-<id>-<n>   which the host moves here from the writer's work directory as it
                   commits their record

A worker gets Landlock's read rights on the kept directories of the roots it may
write, and on nothing else of the store but its own work directory: not on the
store itself, whose committed files the kept directories mirror, and not on other
sandboxes' work directories, where what they keep waits for their host. So a
sandbox's worker reads only what an undo of its own roots needs, whoever wrote it.
Only the host writes here (a committed record is the host's), so nothing here can
be changed by a worker after the host checked it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Iterator

from corral.fs._sys import RENAME_NOREPLACE, renameat2
from corral.history.records import Record
from corral.history.store import kept_name, publish, read_small, remove_tree

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


def make(home_fd: int, roots: Iterable[str]) -> None:
    """The kept directories of `roots` (the host, as a sandbox that writes them opens)."""
    for root in roots:
        with contextlib.suppress(FileExistsError):
            os.mkdir(kept_name(root), 0o700, dir_fd=home_fd)


@contextlib.contextmanager
def taken(home_fd: int, work_fd: int, blob: str, root: str) -> Iterator[int]:
    """The kept directory of `root`, with `blob` moved into it from the work directory
    (a host killed after the move finds it there already), as an fd for the caller's
    checks. Moved before they run: from then on no worker can change it by name."""
    make(home_fd, [root])  # a record may name a root no sandbox here opened yet
    where = os.open(kept_name(root), _DIR_FLAGS, dir_fd=home_fd)
    try:
        try:
            renameat2(work_fd, blob, where, blob, RENAME_NOREPLACE)
        except FileNotFoundError:
            pass  # moved by a host killed before it committed the record; or gone
        except FileExistsError:
            pass  # the same: the work directory's name is a leftover, dropped with it
        yield where
    finally:
        os.close(where)


def forget(home_fd: int, blob_prefix: str, roots: Iterable[str]) -> None:
    """Remove what a refused record moved into the kept directories of `roots`."""
    for root in roots:
        try:
            fd = os.open(kept_name(root), _DIR_FLAGS, dir_fd=home_fd)
        except OSError:
            continue
        try:
            with os.scandir(fd) as found:
                names = [entry.name for entry in found if entry.name.startswith(blob_prefix)]
            for name in names:
                try:
                    os.unlink(name, dir_fd=fd)
                except IsADirectoryError:
                    remove_tree(fd, name)
        finally:
            os.close(fd)


def link(home_fd: int, name: str, roots: Iterable[str]) -> None:
    """Mirror the committed file `name` of the store into the kept directories of
    `roots`: a hard link (a copy where the file system has none)."""
    for root in dict.fromkeys(roots):
        where = kept_name(root)
        make(home_fd, [root])  # a record may name a root no sandbox here opened yet
        try:
            os.link(name, f"{where}/{name}", src_dir_fd=home_fd, dst_dir_fd=home_fd,
                    follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EMLINK, errno.EXDEV, errno.ENOTSUP):
                raise
            data = read_small(home_fd, name)
            fd = os.open(where, _DIR_FLAGS, dir_fd=home_fd)
            try:
                if data is not None:
                    publish(fd, name, data)
            finally:
                os.close(fd)


def roots_of(record: Record) -> list[str]:
    return list(dict.fromkeys(entry.root for entry in record.entries))
