"""How big a worker's answer may be before the host decodes it. A worker is
confined because the code in it may be made to misbehave, so its answers are
untrusted input: a frame bigger, or of more JSON values, than any call under
these limits needs is refused undecoded (pool.Worker.exchange); its shape is
checked once decoded (messages.Answer.from_wire)."""

from __future__ import annotations

import re
from typing import Any

from corral import jsonfast
from corral.config import Limits
from corral.sandbox.protocol import ProtocolError, decode, decode_value
from corral.tools.diff import DIFF_MAX_BYTES
from corral.tools.listing import LISTING_BUDGET_FLOOR
from corral.tools.read import HARD_READ_CEILING, MAX_FILES
from corral.tools.search import MAX_MATCHES

# What decoding costs is the number of values, not the bytes: `{}` is 3 bytes of
# JSON and ~70 of Python (a 64 MiB answer of them took ~1.5 GiB). A tool's answer
# holds few values beside its strings: entries, matches, files, touched paths.
VALUES_PER_ITEM = 16  # a listed entry or a grep match is ~9 values; room to spare
VALUES_BASE = 16 * 1024  # fields, meta, read_multiple_files' MAX_FILES results
# On the wire (json's ensure_ascii) a non-ASCII character takes up to 3x the UTF-8
# bytes a budget counts; a read answer carries its content and its text (2x budget).
WIRE_FACTOR = 3
META_BYTES = 8 * 1024 * 1024  # touched paths and approvals: a few dozen paths of 4 KiB
# Smaller answers are decoded unchecked: at ~30x they cost a few MiB at most.
UNCHECKED_BYTES = 256 * 1024
# Every byte but the marks a non-string JSON value needs (see too_many_values): one
# translate() keeps only the marks, a third of the time of four count() passes.
_NOT_MARKS = bytes(byte for byte in range(256) if byte not in b",:[{")
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"')  # possessive: no backtracking state


# An answer's members (messages.py); a caller that takes raw JSON gets these two of a
# large answer undecoded when each starts as it must (an object, a string).
ANSWER_MEMBERS = ("id", "ok", "tool", "result", "text", "error", "meta")
_PASSED_ON = {"result": b"{", "text": b'"'}


def decode_answer(
    payload: bytes | bytearray, max_values: int, *, raw: bool = False
) -> dict[str, Any]:
    """A worker's answer frame, refused (ProtocolError) when it has more values than
    `max_values` (too_many_values). raw=True: a large answer's `result` and `text`
    stay JSON text (jsonfast.Raw) for a face that writes them out as they are: the
    host then neither builds nor re-encodes a megabyte of content. The text passed
    on is checked to be JSON and UTF-8 (a client's parser must not fail on the line
    it lands in); a result holding an "image" is decoded, the face takes it apart."""
    if raw and len(payload) > UNCHECKED_BYTES:
        members = jsonfast.raw_members(bytes(payload), ANSWER_MEMBERS)
        if members is not None:
            return {name: _member(name, bytes(part), part, max_values)
                    for name, part in members.items()}
    return decode(_counted(payload, max_values))


def _member(name: str, data: bytes, part: Any, max_values: int) -> Any:
    if data[:1] == _PASSED_ON.get(name) and _utf8(data) and not (
        name == "result" and jsonfast.raw_members(data, ("image",))  # one more skim, no values
    ):
        return part
    return decode_value(_counted(data, max_values))


def _utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _counted(payload: bytes | bytearray, max_values: int) -> bytes | bytearray:
    problem = too_many_values(payload, max_values)
    if problem is not None:
        raise ProtocolError(problem)
    return payload


def answer_limits(limits: Limits) -> tuple[int, int]:
    """(bytes, values) a tool's answer can need under `limits`: a read's content and
    text (budgets of tools/read.py, listing.py), an edit's diff and its text, meta."""
    budget = max(min(limits.max_read_bytes, HARD_READ_CEILING), LISTING_BUDGET_FLOOR)
    size = WIRE_FACTOR * (3 * budget + 2 * DIFF_MAX_BYTES) + META_BYTES
    values = VALUES_BASE + VALUES_PER_ITEM * (limits.max_list_entries + MAX_MATCHES + MAX_FILES)
    return size, values


def too_many_values(payload: bytes | bytearray, max_values: int) -> str | None:
    """Why a payload must not be decoded: more JSON values than `max_values`. Every
    value but a string needs a separator or a bracket, so counting those bytes is a
    bound (C speed); only when file content in strings pushes it over are the
    strings taken out to count exactly, after a count of their quotes (each string
    has two, an escaped quote inside one has a backslash) caps how many there are."""

    def marks(data: bytes | bytearray) -> int:
        return len(data.translate(None, _NOT_MARKS))

    if len(payload) <= UNCHECKED_BYTES or marks(payload) <= max_values:
        return None
    strings = (payload.count(b'"') - payload.count(b'\\"')) // 2
    if strings <= max_values and marks(_STRING.sub(b"", payload)) <= max_values:
        return None
    return f"an answer of more than {max_values} JSON values, more than any call needs"
