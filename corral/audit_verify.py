"""`corral audit verify`: check the chain of an audit log, or of a rotated set.

What is detected: a record edited, deleted, inserted or moved anywhere but at the
very end (the next record's `prev` no longer matches), a rotated file missing or
out of order (the next file's first `prev` does not match), a log whose first
records are gone (the first `prev` is not the start of a chain), a chain made
without the key or with another key. Under plain SHA-256 someone who can
rewrite the whole file can compute a new chain: only the key (which they do not
have) or a digest kept elsewhere (`head`) tells. What is not detected from the
file alone: records removed from the end, or the last record edited, since no
later line vouches for them; compare the head with one kept off the machine
(`head=`: the digest of a record seen before, which must still be in the chain).
A half-written last line (a crash mid-write) is reported, not an error: the log
verifies up to the last whole record; a line that holds a whole JSON value but is
no record is an error wherever it is (no crash leaves one). A live log is listed
and read as one consistent set while writers append and rotate (`listed`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from corral.audit import LOCK_WAIT_S, Chain, holds_json, rotated

# A writer writes a record and its newline at once, and no part of a record short of
# its end holds a whole JSON value (a crash's half-written line never does): a JSON
# line without `prev`, or JSON without its newline, was put there by something else.
INSERTED = ("a line that holds JSON but is not a record (no prev), nor a half-written one: "
            "appended by something other than corral")
UNENDED = ("JSON without its newline, which no crash leaves (a record and its newline "
           "are written at once): appended by something other than corral")


@dataclass
class Verdict:
    records: int = 0
    head: str | None = None  # digest of the last whole record: keep it elsewhere
    broken: str | None = None  # "FILE:LINE: why", the first broken line
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.broken is None


def log_set(path: str) -> list[str]:
    """What `verify PATH` checks: PATH.1 ... PATH.N and PATH when PATH is a live log
    with rotated files; a rotated file (PATH.N) alone."""
    return [path] if _rotated_file(path) else [*rotated(path), path]


def _rotated_file(path: str) -> bool:
    return bool(re.search(r"\.[1-9][0-9]*$", path)) and os.path.exists(path.rsplit(".", 1)[0])


class Part(NamedTuple):
    """A file of a set as verify reads it: by its name, or (a live log) through the
    descriptor held when the set was listed, up to the size it had then."""

    name: str
    fd: int | None = None
    size: int | None = None


class LockHeld(Exception):
    """Another process has held a live log's lock for LOCK_WAIT_S."""


@contextlib.contextmanager
def listed(path: str) -> Iterator[list[Part]]:
    """log_set(path) as one consistent set, while writers append and rotate: listed
    under the writers' lock (taken shared, for as long as a listing takes), so no
    rotation falls between the rotated files and the live one, and no record is
    half-way through its write. The live log is read through the descriptor locked,
    up to its size then. FileNotFoundError when PATH is missing; LockHeld."""
    if _rotated_file(path):  # a rotated file is never written or renamed again
        yield [Part(path)]
        return
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            # between a rotation's rename and the new file's creation
            if not rotated(path) or time.monotonic() > deadline:
                raise
            time.sleep(0.001)
            continue
        try:
            if _locked_at(fd, path, deadline):
                names, size = rotated(path), os.fstat(fd).st_size
                fcntl.flock(fd, fcntl.LOCK_UN)
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # rotated away while this waited for the lock: open PATH again
    try:
        yield [*(Part(name) for name in names), Part(path, fd, size)]
    finally:
        os.close(fd)


def _locked_at(fd: int, path: str, deadline: float) -> bool:
    """The lock on `fd` taken shared; whether `fd` is still the file at `path` (else
    unlocked again)."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise LockHeld(path) from None
            time.sleep(0.001)
    mine = os.fstat(fd)
    try:
        there = os.stat(path)  # as opened: a copy may be verified through a symlink
    except FileNotFoundError:
        there = None
    if there is not None and (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _lines(part: Part) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without newline, whether a newline ended it), read as a
    stream: a log can be larger than memory."""
    left = part.size
    with open(part.name if part.fd is None else part.fd, "rb", closefd=part.fd is None) as file:
        file.seek(0)  # a live log's descriptor: from its start
        for number, line in enumerate(file, 1):
            if left is not None:
                if left <= 0:
                    return
                line = line[:left]
                left -= len(line)
            whole = line.endswith(b"\n")
            yield number, line[:-1] if whole else line, whole


def _parse(line: bytes) -> dict[str, object] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("prev"), str) else None


def _torn(fragment: bytes) -> dict[str, object]:
    return {"bytes": len(fragment), "sha256": hashlib.sha256(fragment).hexdigest()}


def verify(paths: Sequence[str | Part], key: bytes | None = None, head: str | None = None,
           continues: bool = False) -> Verdict:
    """Check the files in order as one chain (names, or the Parts `listed` gives for a
    live log). `continues`: the first file continues a chain whose earlier files are
    gone; its first prev is taken as given."""
    parts = [Part(p) if isinstance(p, str) else p for p in paths]
    chain, verdict = Chain(key), Verdict()
    expected: str | None = None if continues else chain.genesis
    head_seen = head is None
    fragment: tuple[str, bytes] | None = None  # (where, bytes) of a line left half-written

    def broken(where: str, why: str) -> Verdict:
        verdict.broken = f"{where}: {why}"
        return verdict

    for part in parts:
        path = part.name
        previous = None  # where the line before is, for messages
        for number, line, whole in _lines(part):
            where = f"{path}:{number}"
            if not whole:  # the end of the last file: a crash mid-write
                if part is not parts[-1]:
                    return broken(where, "a half-written line before the end of the set")
                if holds_json(line):
                    return broken(where, UNENDED)
                verdict.notes.append(f"{where}: a half-written last line ({len(line)} bytes, "
                                     "a crash mid-write?) is not a record; not checked")
                continue
            record = _parse(line)
            if record is None:
                if fragment is not None or line == b"":
                    return broken(fragment[0] if fragment else where, "not a record")
                if holds_json(line):
                    return broken(where, INSERTED)
                fragment = (where, line)
                continue
            if fragment is not None:
                if record.get("torn") != _torn(fragment[1]):
                    return broken(fragment[0], "not a record")
                verdict.notes.append(f"{fragment[0]}: a half-written line, named by the "
                                     "record after it")
                fragment = None
            elif "torn" in record:
                return broken(where, "names a half-written line before it that is not there")
            prev = record["prev"]
            if expected is not None and prev != expected:
                return broken(where, _mismatch(chain, str(prev), expected, previous))
            expected = chain.digest(line)
            head_seen = head_seen or expected == head
            verdict.records += 1
            previous = where
    if fragment is not None:
        return broken(fragment[0], "not a record")
    verdict.head = expected if verdict.records else None
    if not head_seen:
        return broken(parts[-1].name, f"no record has the head {head}: records were removed "
                      "from the end (or the head is from another log or key)")
    return verdict


def _mismatch(chain: Chain, prev: str, expected: str, previous: str | None) -> str:
    scheme = prev.split(":", 1)[0]
    if scheme != chain.scheme:
        how = "pass the key file" if scheme == "hmac-sha256" else "not made with this key"
        return f"prev is {scheme}, the check is {chain.scheme}: {how}"
    if previous is None and expected == chain.genesis:
        return ("prev is not the start of a chain: earlier records or files are missing "
                "(or the key is wrong)")
    if previous is None:
        return "prev does not match the last line of the file before: a file is missing or " \
               "out of order"
    return (f"prev does not match the line before ({previous}): that line was edited, or "
            "records were deleted, inserted or reordered here")
