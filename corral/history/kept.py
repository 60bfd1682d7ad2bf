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

from msgspec.structs import replace

from corral.fs.syscalls import RENAME_NOREPLACE, renameat2, write_new
from corral.history.records import BadRecord, Record, dump, record_from_bytes
from corral.history.store import (
    CHECKPOINT,
    COMMITTED,
    KEPT,
    RECORD,
    TEMP,
    WORK,
    kept_name,
    publish,
    read_small,
    remove_tree,
)

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
    try:
        where = os.open(kept_name(root), _DIR_FLAGS, dir_fd=home_fd)
    except FileNotFoundError:  # a record may name a root no sandbox here opened yet
        make(home_fd, [root])
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
        try:
            _hard_link(home_fd, name, root)
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


def _hard_link(home_fd: int, name: str, root: str) -> None:
    mirror = f"{kept_name(root)}/{name}"
    try:
        os.link(name, mirror, src_dir_fd=home_fd, dst_dir_fd=home_fd, follow_symlinks=False)
    except FileNotFoundError:  # a record may name a root no sandbox here opened yet
        make(home_fd, [root])
        os.link(name, mirror, src_dir_fd=home_fd, dst_dir_fd=home_fd, follow_symlinks=False)


def roots_of(record: Record) -> list[str]:
    return list(dict.fromkeys(entry.root for entry in record.entries))


MIGRATED = "kept-dirs"  # in the store: its records are mirrored into kept directories


def migrate(home_fd: int) -> None:
    """Once per store written before kept directories (the caller holds the store's
    lock): each committed record's kept copies moved into its roots' kept
    directories (the record rewritten to name them) and the record mirrored there;
    checkpoints, and records that name no path, into every kept directory."""
    try:
        os.stat(MIGRATED, dir_fd=home_fd, follow_symlinks=False)
        return
    except FileNotFoundError:
        pass
    with os.scandir(home_fd) as found:
        names = sorted(entry.name for entry in found)
    pathless: list[str] = [n for n in names if n.startswith(CHECKPOINT) and n.endswith(COMMITTED)]
    for name in names:
        if not (name.startswith(RECORD) and name.endswith(COMMITTED)):
            continue
        try:
            data = read_small(home_fd, name)
            record = record_from_bytes(data) if data is not None else None
        except (BadRecord, OSError):
            continue  # skipped and reported where it is read
        if record is None:
            continue
        moved = _moved_into_kept(home_fd, record)
        if moved != record:
            temp = f"{TEMP}{name}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=home_fd)
            write_new(home_fd, temp, dump(moved), perms=0o600)
            os.replace(temp, name, src_dir_fd=home_fd, dst_dir_fd=home_fd)
        if record.entries:
            link(home_fd, name, roots_of(record))
        else:
            pathless.append(name)
    with os.scandir(home_fd) as found:
        kept = [entry.name for entry in found if entry.name.startswith(KEPT)]
    for name in pathless:
        for where in kept:
            with contextlib.suppress(FileExistsError):
                os.link(name, f"{where}/{name}", src_dir_fd=home_fd, dst_dir_fd=home_fd,
                        follow_symlinks=False)
    with contextlib.suppress(FileExistsError):
        write_new(home_fd, MIGRATED, b"", perms=0o600)


def _moved_into_kept(home_fd: int, record: Record) -> Record:
    """`record` with each kept copy that lies in a work directory moved to the kept
    directory of its root (a directory's empty blob stays: no undo reads it)."""
    entries = []
    for entry in record.entries:
        before = entry.before
        if before is not None and before.blob is not None and before.type != "dir" and (
                before.blob.startswith(WORK)):
            where, _, blob = before.blob.partition("/")
            with contextlib.suppress(OSError):
                work = os.open(where, _DIR_FLAGS, dir_fd=home_fd)
                try:
                    with taken(home_fd, work, blob, entry.root):
                        pass
                finally:
                    os.close(work)
                entry = replace(entry, before=replace(before,
                    blob=f"{kept_name(entry.root)}/{blob}"))
        entries.append(entry)
    return replace(record, entries=tuple(entries))
