"""What a snapshot worker hands the host (sandbox/snapshot_walk.py): its answer,
a file of the work directory that the host reads as input. It is bounded before
it is read and decoded straight into these typed shapes (anything else is
refused whole): a compromised worker can make the host read at most
MAX_ANSWER_BYTES and hold their typed values, nothing more.
"""

from __future__ import annotations

import os
import stat
from typing import Annotated, Literal, TypeVar

import msgspec

from corral.history.snapshots import ANSWER, OBJECT

# A first walk lists every entry of the tree (about 170 bytes each): this holds
# some 390,000 entries, and bounds what a forged answer can make the host hold.
MAX_ANSWER_BYTES = 64 << 20
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK

Count = Annotated[int, msgspec.Meta(ge=0)]
# path, type, mode, size, hash, target, dev, ino, size, mtime_ns, ctime_ns (snapshots.Item)
ItemWire = tuple[str, str, Count, Count, str | None, str | None,
                 Count, Count, Count, Count, Count]


class WalkAnswer(msgspec.Struct, forbid_unknown_fields=True):
    """A walk's: the changed items with the name of each copy made, the paths gone,
    the paths left out ([path, reason]), the files left for the next request."""

    items: list[tuple[ItemWire, str | None]]
    removed: list[str]
    skipped: list[tuple[str, str]]
    pending: list[str]
    read_bytes: Count
    walked: Count
    by: dict[str, Literal["corral", "other"]] | None = None  # a diff's
    base: str | None = None  # the snapshot it walked against (None: it read none)


class LinkSkip(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    reason: Literal["link"]
    target: str


class RestoreAnswer(msgspec.Struct, forbid_unknown_fields=True):
    """A restore's: what it brought back, removed and left, and its records."""

    restored: list[str]
    removed: list[str]
    conflicts: list[str]
    reasons: dict[str, str]
    skipped: list[LinkSkip]
    records: list[str]


Answer = TypeVar("Answer", WalkAnswer, RestoreAnswer)


def read_answer(work: int, token: str, told: object, shape: type[Answer]) -> Answer:
    """The answer a worker left in the work directory `work` for the plan `token`
    (`told`: what its call answered, which must name that file), removed as it is
    read. ValueError if there is none, or it is over the bound or not of `shape`."""
    name = f"{OBJECT}{token}{ANSWER}"
    if told != {"answer": name}:
        raise ValueError("the answer names no result of this plan")
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=work)
    except OSError as exc:
        raise ValueError(f"no result ({exc.strerror})") from None
    try:
        os.unlink(name, dir_fd=work)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("the result is not a file")
        data = _bounded(fd)
    finally:
        os.close(fd)
    try:
        return msgspec.json.decode(data, type=shape)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"the result is not a {shape.__name__} ({str(exc)[:200]})") from None


def _bounded(fd: int) -> bytes:
    """The file's bytes, read up to one past the bound (its size may change as it
    is read: the worker may still hold it)."""
    chunks: list[bytes] = []
    left = MAX_ANSWER_BYTES + 1
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    if left <= 0:
        raise ValueError(f"the result is over {MAX_ANSWER_BYTES} bytes")
    return b"".join(chunks)
