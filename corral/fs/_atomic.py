"""Atomic replace of one name in a directory fd: temp file, fsync, rename, fsync dir.

Temp files are named TEMP_PREFIX + "<pid>-<random>" in the target's own
directory (so the rename never crosses a filesystem). A writer killed between
create and rename leaves one behind; `stale_temp` tells which of them a
cleanup may remove (Root.remove_stale_temps), `temp_owner` whose pid made one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import re
import stat
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from corral.fs.syscalls import (
    RENAME_NOREPLACE,
    SETID,
    TEMP_PREFIX,
    Land,
    rename_into_place,
    temp_name,
    write_all,
)
from corral.fs.version import chunked_version

STALE_TEMP_AGE = 3600.0  # seconds; a live write takes milliseconds: an hour-old temp is orphaned
_READ_CHUNK = 1 << 20  # reading the current content for expected_version, a MiB at a time
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"([0-9]{1,10})-[0-9a-f]{16}")


@dataclass(frozen=True)
class Expect:
    """What must be at the target for a write to land, checked under an flock of its
    directory so that of racing writers expecting the same thing exactly one wins:
    a `version` (content_version of the current file: a caller that knows it by
    name), or `content` (the very bytes: a caller that read the file compares what
    it read, without hashing). Neither: anything (or nothing) may be there."""

    version: str | None = None
    content: bytes | None = None

    def __post_init__(self) -> None:
        if self.version is not None and self.content is not None:
            raise ValueError("expect a version or a content, not both")


ANYTHING = Expect()


class VersionMismatch(Exception):
    """The current content is not the expected version (or the file is missing)."""


def temp_owner(name: str) -> int | None:
    """The pid in a name temp_name() made; None for any other name."""
    match = _TEMP_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def stale_temp(name: str, mtime: float, *, dead_pids: Collection[int], min_age: float) -> bool:
    if not name.startswith(TEMP_PREFIX):
        return False
    pid = name[len(TEMP_PREFIX):].partition("-")[0]
    if pid.isdigit() and int(pid) in dead_pids:
        return True
    return time.time() - mtime >= min_age


def _open_regular(dir_fd: int, name: str) -> tuple[io.FileIO, os.stat_result] | None:
    """The regular file `name` opened without following, and its stat; None if missing."""
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    f = io.FileIO(fd, "rb")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.ENXIO, name)
    except BaseException:
        f.close()
        raise
    return f, st


def _current(dir_fd: int, name: str, limit: int | None) -> tuple[str | None, int] | None:
    """(content version, mode) of the regular file `name`, or None if missing; the
    version is None when the file holds more than `limit` bytes (streamed, so a huge
    file is neither held in memory nor read past the limit)."""
    opened = _open_regular(dir_fd, name)
    if opened is None:
        return None
    f, st = opened
    with f:
        size = 0

        def chunks() -> Iterator[bytes]:
            nonlocal size
            while (limit is None or size <= limit) and (chunk := f.read(_READ_CHUNK)):
                size += len(chunk)
                yield chunk

        version = chunked_version(chunks())
        over = limit is not None and (st.st_size > limit or size > limit)
        return None if over else version, stat.S_IMODE(st.st_mode)


def holding(dir_fd: int, name: str, expected: bytes) -> int | None:
    """The mode of the regular file `name` if it holds exactly `expected`, else None
    (missing, or other content; a file that grows is read a chunk past it at most)."""
    opened = _open_regular(dir_fd, name)
    if opened is None:
        return None
    f, st = opened
    with f:
        if st.st_size != len(expected):
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= len(expected) and (chunk := f.read(_READ_CHUNK)):
            size += len(chunk)
            chunks.append(chunk)
        return stat.S_IMODE(st.st_mode) if b"".join(chunks) == expected else None


def append_whole(fd: int, data: bytes) -> None:
    """write_all for an O_APPEND fd, all or nothing: when a write fails part-way (disk
    full, a size limit), the part already written is cut off again, so the file never
    ends in a piece of a record. Not if someone appended after that part meanwhile:
    cutting would take theirs too."""
    view = memoryview(data)
    start = written = 0
    try:
        while view:
            count = os.write(fd, view)
            if not written:
                start = os.lseek(fd, 0, os.SEEK_CUR) - count
            written += count
            view = view[count:]
    except OSError:
        end = os.lseek(fd, 0, os.SEEK_CUR)
        if written and end - written == start and os.fstat(fd).st_size == end:
            os.ftruncate(fd, start)
        raise


def replace(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    mode: int | None,
    expect: Expect,
    exclusive: bool,
    current_limit: int | None = None,
    lock_fd: int | None = None,
    sync: bool = True,
    land: Land = rename_into_place,
) -> None:
    """Put `data` at `name` in `dir_fd` (O_PATH), atomically. `mode`: the old
    file's permission bits, set-id bits dropped (None: new file, umask applies).
    `expect`: checked with the rename under the directory's flock (VersionMismatch);
    a current file over `current_limit` bytes never holds the expected version.
    lock_fd: an fd of this same directory the caller holds an flock on (Root's
    tree lock on its root directory): the version lock converts that one, since an
    flock through a second fd of the same directory would wait for the caller's own
    lock forever. sync=False: no fsync (still atomic: a reader sees the old or the
    new bytes, but a crash may lose them).
    land: what puts the temp file in place."""
    dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    lock = dfd if lock_fd is None else lock_fd
    try:
        if expect.version is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when its fd closes
            current = _current(dir_fd, name, current_limit)
            if current is None or current[0] != expect.version:
                raise VersionMismatch
            mode = current[1]
        elif expect.content is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when its fd closes
            mode = holding(dir_fd, name, expect.content)
            if mode is None:
                raise VersionMismatch
        tmp = temp_name()
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
            dir_fd=dir_fd,
        )
        try:
            try:
                write_all(fd, data)
                if mode is not None:
                    os.fchmod(fd, mode & ~SETID)
                if sync:
                    os.fsync(fd)  # (fdatasync measured no cheaper on ext4: a new file)
            finally:
                os.close(fd)
            flags = RENAME_NOREPLACE if exclusive else 0
            land(dir_fd, tmp, name, flags)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        if sync:
            os.fsync(dfd)  # one directory sync: the rename
    finally:
        os.close(dfd)
