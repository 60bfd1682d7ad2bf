"""How big a worker's answer may be before the host decodes it, and what of a large
read it passes on undecoded. A worker is confined because the code in it may be
made to misbehave, so its answers are untrusted input: a frame bigger, or of more
JSON values, than any call under these limits needs is refused undecoded
(handles.Worker.exchange); its shape is checked once decoded (messages.Answer.from_wire)."""

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


# A large read_file answer, as the host passes it on (decode_answer): its members, the
# result's exact shape (tools/read.py; a window of a file over max_file_bytes,
# tools/read_window.py, has start_byte, no version, and may have null line numbers),
# and the two strings that stay JSON text. The result is decoded in the same pass as
# the answer: its megabyte of content is skipped once.
_READ_RESULT = (
    ("path", str), ("content", jsonfast.RAW), ("encoding", str), ("total_lines", int | None),
    ("start_line", int | None), ("lines_read", int), ("truncated", bool),
    ("next_offset", int | None), ("size", int), ("version", str, jsonfast.OPTIONAL),
    ("next_byte_offset", int, jsonfast.OPTIONAL), ("start_byte", int, jsonfast.OPTIONAL),
)
_ANSWER = tuple(
    (name, _READ_RESULT if name == "result" else jsonfast.RAW, jsonfast.OPTIONAL)
    for name in ("id", "ok", "tool", "result", "text", "error", "meta")
)


def decode_answer(
    payload: bytes | bytearray, max_values: int, *, raw: bool = False
) -> dict[str, Any]:
    """A worker's answer frame, refused (ProtocolError) when it has more values than
    `max_values` (too_many_values). raw=True: a large text read keeps its content
    and text as JSON text (jsonfast.Raw) for a face that writes them out as they
    are, so the host neither builds nor re-encodes a megabyte of content
    (read_passed_on); every other answer is decoded."""
    if raw and len(payload) > UNCHECKED_BYTES:
        passed = read_passed_on(bytes(payload), max_values)
        if passed is not None:
            return passed
    return decode(_counted(payload, max_values))


def read_passed_on(data: bytes, max_values: int) -> dict[str, Any] | None:
    """A read_file answer whose content and text stay JSON text, or None when it is
    not one (the caller decodes it whole). What is passed on undecoded is only two
    JSON strings, valid UTF-8 (a string's syntax leaves no room for a line break,
    a number or nesting: the client's line stays one JSON value); the result's other
    fields are checked against their types, and the answer's other members are
    decoded and counted against `max_values` together, as the whole answer is."""
    members = jsonfast.decode_members(data, _ANSWER)
    if members is None or bytes(members.get("tool", b"")) != b'"read_file"':
        return None
    text, fields = members.pop("text", None), members.pop("result", None)
    if text is None or fields is None or not (
        _json_string(bytes(text)) and _json_string(bytes(fields["content"]))
    ):
        return None
    parts = {name: bytes(part) for name, part in members.items()}
    _counted(b"[" + b",".join(parts.values()) + b"]", max_values)
    wire = {name: decode_value(part) for name, part in parts.items()}
    wire.update(result=fields, text=text)
    return wire


def _json_string(data: bytes) -> bool:
    """JSON text (already checked as JSON) that is a string, in UTF-8."""
    if data[:1] != b'"':
        return False
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
