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
verifies up to the last whole record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from corral.audit import Chain, rotated


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
    if re.search(r"\.[1-9][0-9]*$", path) and os.path.exists(path.rsplit(".", 1)[0]):
        return [path]
    return [*rotated(path), path]


def _lines(path: str) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without newline, whether a newline ended it), read as a
    stream: a log can be larger than memory."""
    with open(path, "rb") as file:
        for number, line in enumerate(file, 1):
            whole = line.endswith(b"\n")
            yield number, line[:-1] if whole else line, whole


def _parse(line: bytes) -> dict[str, object] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("prev"), str) else None


def _torn(fragment: bytes) -> dict[str, object]:
    return {"bytes": len(fragment), "sha256": hashlib.sha256(fragment).hexdigest()}


def verify(paths: Sequence[str], key: bytes | None = None, head: str | None = None,
           continues: bool = False) -> Verdict:
    """Check the files in order as one chain. `continues`: the first file continues
    a chain whose earlier files are gone; its first prev is taken as given."""
    chain, verdict = Chain(key), Verdict()
    expected: str | None = None if continues else chain.genesis
    head_seen = head is None
    fragment: tuple[str, bytes] | None = None  # (where, bytes) of a line left half-written

    def broken(where: str, why: str) -> Verdict:
        verdict.broken = f"{where}: {why}"
        return verdict

    for path in paths:
        previous = None  # where the line before is, for messages
        for number, line, whole in _lines(path):
            where = f"{path}:{number}"
            if not whole:  # the end of the last file: a crash mid-write
                if path != paths[-1]:
                    return broken(where, "a half-written line before the end of the set")
                verdict.notes.append(f"{where}: a half-written last line ({len(line)} bytes, "
                                     "a crash mid-write?) is not a record; not checked")
                continue
            record = _parse(line)
            if record is None:
                if fragment is not None or line == b"":
                    return broken(fragment[0] if fragment else where, "not a record")
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
        return broken(paths[-1], f"no record has the head {head}: records were removed "
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
