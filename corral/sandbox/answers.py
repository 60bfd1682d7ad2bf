"""What the host accepts from a worker. A worker is confined because the code in
it may be made to misbehave, so its answers are untrusted input: beyond being a
frame of JSON (protocol.py) and repeating the request's id (pool.py), an answer
must have the shape the host's code reads, or the worker is treated as lost.
The content itself (file text, listings) is the worker's to give.
"""

from __future__ import annotations

import re
from typing import Any

from corral.config import Limits
from corral.errors import ERROR_CODES
from corral.tools.edit import DIFF_MAX_BYTES
from corral.tools.listing import LISTING_BUDGET_FLOOR
from corral.tools.read import HARD_READ_CEILING, MAX_FILES
from corral.tools.search import MAX_MATCHES

_TOUCHED_FIELDS = ("path", "root", "resolved", "decision")
_APPROVAL_FIELDS = ("key", "root", "resolved", "path")


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


def malformed(response: dict[str, Any], request: dict[str, Any]) -> str | None:
    """Why `response` cannot be the answer to `request`; None if it can."""
    if "cleanup" in request:
        return None if _count(response.get("removed")) else "a cleanup answer without a count"
    if "find_temps" in request:
        temps = response.get("temps")
        return None if isinstance(temps, list) and all(map(_temp, temps)) else (
            "a temp listing that is not [root index, path, pid] triples"
        )
    tool = request.get("tool")
    if response.get("tool") != tool and (isinstance(tool, str) or response.get("tool") != ""):
        return "an answer for another tool"
    ok = response.get("ok")
    if ok is True:
        problem = _success(response)
    elif ok is False:
        problem = _failure(response.get("error"))
    else:
        problem = "an answer that is neither ok nor an error"
    return problem or _meta(response.get("meta", {}))


def _success(response: dict[str, Any]) -> str | None:
    result = response.get("result")
    if not isinstance(result, dict) or not isinstance(response.get("text"), str):
        return "a result without its dict and text"
    image = result.get("image")
    if image is not None and not (
        isinstance(image, dict) and _strings(image, ("media_type", "data"))
    ):
        return "an image block without media_type and data"
    return None


def _failure(error: Any) -> str | None:
    if not isinstance(error, dict) or error.get("code") not in ERROR_CODES:
        return "an error without a known code"
    if not isinstance(error.get("message"), str) or not _optional_string(error.get("rule")):
        return "an error without a message"
    return None


def _meta(meta: Any) -> str | None:
    if not isinstance(meta, dict):
        return "meta that is not an object"
    touched = meta.get("touched", [])
    needs = meta.get("needs_approval", [])
    if not isinstance(touched, list) or not all(
        isinstance(t, dict) and _strings(t, _TOUCHED_FIELDS) and _optional_string(t.get("rule"))
        for t in touched
    ):
        return "meta.touched entries without their paths"
    if not isinstance(needs, list) or not all(
        isinstance(n, dict) and _strings(n, _APPROVAL_FIELDS) and _optional_string(n.get("rule"))
        for n in needs
    ):
        return "meta.needs_approval entries without their paths"
    if not _count(meta.get("bytes", 0)):
        return "meta.bytes that is not a count"
    return None


def _temp(item: Any) -> bool:
    return (
        isinstance(item, list) and len(item) == 3 and _count(item[0])
        and isinstance(item[1], str) and _count(item[2])
    )


def _strings(entry: dict[str, Any], fields: tuple[str, ...]) -> bool:
    return all(isinstance(entry.get(name), str) for name in fields)


def _optional_string(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
