"""A whole-workspace rewind's intent: the record that makes it all or nothing
across a crash. The host writes it into the store (which only the host writes)
once the rewind's own "before" checkpoint, with its snapshot of the whole tree,
is there, and before anything of the tree changes; it removes it once the
rewind's result is final. It names the rewind: its target checkpoint, that
"before" checkpoint and `force`.

    i-<root>.json    the intent of a rewind of that workspace root (one at a time)

Its writer holds an flock on it for the rewind's whole length (taken on the temp
file before it is renamed in, so it is never there unheld): the kernel drops it
when the writer dies. An intent nobody holds is a dead writer's, and the next
sandbox on the store finishes it (host/checkpoints.py): one whose flock another
live host holds is left alone. What it reads is checked (its shape, its ids, that
they name a rewind's pair of checkpoints); one that is not is refused, logged and
removed, and nothing of the tree changes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from typing import NamedTuple

import msgspec

from corral.errors import CorralError
from corral.fs.syscalls import RENAME_NOREPLACE, renameat2, write_all
from corral.history.records import BadRecord, is_id
from corral.history.store import TEMP, read_small

INTENT = "i-"
VERSION = 1
MAX_INTENT_BYTES = 4096  # three ids and a flag: anything bigger is not one
log = logging.getLogger("corral")
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


class Intent(NamedTuple):
    id: str  # the writer's (its pid in it), made when it was written
    target: str  # the checkpoint rewound to
    before: str  # the rewind's own checkpoint: its snapshot holds the tree as it was
    force: bool


class IntentWire(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    id: str
    target: str
    before: str
    force: bool


def intent_name(kept: str) -> str:
    """The intent of a rewind of the root whose kept directory is `kept` ("k-<hash>")."""
    return f"{INTENT}{kept[2:]}.json"


def intent_from_bytes(data: bytes) -> Intent:
    """An intent, checked; BadRecord if it is not one."""
    try:
        wire = msgspec.json.decode(data, type=IntentWire)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadRecord(f"not an intent ({exc})") from None
    if wire.v != VERSION:
        raise BadRecord(f"an intent of version {wire.v}")
    if not (is_id(wire.id) and is_id(wire.target) and is_id(wire.before)):
        raise BadRecord("an id that is not one")
    if not wire.target < wire.before <= wire.id:  # made in that order
        raise BadRecord("ids out of their order")
    return Intent(wire.id, wire.target, wire.before, wire.force)


class Held:
    """An intent written and held (its flock) by this host until `end` or `let_go`."""

    def __init__(self, home: int, name: str, fd: int, intent: Intent) -> None:
        self.home, self.name, self.fd, self.intent = home, name, fd, intent

    def end(self) -> None:
        """The rewind's result is final: the intent goes (the caller holds the store's
        lock). Removed before its flock is dropped, so no one finishes it meanwhile."""
        with contextlib.suppress(FileNotFoundError):
            if _same(self.home, self.name, self.fd):
                os.unlink(self.name, dir_fd=self.home)
        self.let_go()

    def let_go(self) -> None:
        """Leave the intent to the next settle (this host's or another's)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def begin(home: int, name: str, intent: Intent) -> Held:
    """Write the intent, held (the caller holds the store's lock); CorralError
    conflict if another rewind of the root is under way or left unfinished."""
    data = msgspec.json.encode(IntentWire(VERSION, *intent))
    temp = f"{TEMP}{name}"
    with contextlib.suppress(FileNotFoundError):  # a host killed here left it
        os.unlink(temp, dir_fd=home)
    try:
        fd = os.open(temp, _NEW_FLAGS, 0o600, dir_fd=home)
    except OSError as exc:
        raise _unwritable(exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_all(fd, data)
        renameat2(home, temp, home, name, RENAME_NOREPLACE)
    except BaseException as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=home)
        if isinstance(exc, FileExistsError):
            raise CorralError("conflict", "another rewind of this workspace is under way, "
                              "or was cut short and is not finished yet; nothing was "
                              "written.") from None
        if isinstance(exc, OSError):
            raise _unwritable(exc) from None
        raise
    return Held(home, name, fd, intent)


def claim(home: int, name: str) -> Held | None:
    """The intent of a dead writer, now held by this host; None if there is none, or
    its writer (or another host finishing it) holds it. One that is not a valid
    intent is refused: logged and removed."""
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=home)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symlink or a directory in its place: not an intent
        _refuse(home, name, f"cannot be opened ({os.strerror(exc.errno or errno.EIO)})")
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None  # its writer lives
    try:
        if not _same(home, name, fd):
            os.close(fd)  # removed (its rewind finished) or replaced since it was opened
            return None
        data = read_small(home, name)
        if data is None or len(data) > MAX_INTENT_BYTES:
            raise BadRecord("not a small file")
        return Held(home, name, fd, intent_from_bytes(data))
    except (BadRecord, OSError) as why:
        _refuse(home, name, why)
        os.close(fd)
        return None


def _same(home: int, name: str, fd: int) -> bool:
    """Does `name` still name the file `fd` holds?"""
    held = os.fstat(fd)
    try:
        there = os.stat(name, dir_fd=home, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return held.st_nlink > 0 and (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)


def _refuse(home: int, name: str, why: object) -> None:
    log.warning("corral: history: refused the rewind intent %s in the store (%s); "
                "removed, nothing of the tree changed", name, why)
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=home)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=home)


def _unwritable(exc: OSError) -> CorralError:
    return CorralError("io_error", "the history store cannot be written "
                       f"({os.strerror(exc.errno or errno.EIO)}); nothing was written.")
