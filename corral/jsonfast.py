"""JSON text in and out, through msgspec, with the standard library's meaning.

Why msgspec: Python's json encodes a 1 MiB read's answer (2.2 MB of JSON) in ~10 ms
of CPU on a 2-core VM and parses it in ~3 ms, and that answer is encoded twice (the
worker's frame, then the MCP line) and parsed once; msgspec does each in under 1 ms.
The standard library's json takes what msgspec refuses (below).

The meaning stays the standard library's, so the two paths never disagree:
- `dumps` refuses NaN and the infinities (ValueError), as json with
  allow_nan=False does; msgspec would write them as null. Its output is UTF-8
  (the stdlib path escapes non-ASCII as \\uXXXX): the same JSON value.
- `loads` returns msgspec's value when msgspec takes the text; anything it
  refuses (a BOM, UTF-16, lone surrogate escapes, NaN, bad JSON) goes to the
  caller's stdlib decoder, which accepts exactly what it accepted before, or
  raises its own error. msgspec accepts no text the stdlib refuses.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any

import msgspec


def _raw_as_value(value: Any) -> Any:
    """The stdlib path's view of a RAW member (decode_members): its decoded value."""
    if isinstance(value, msgspec.Raw):
        return msgspec.json.decode(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One encoder for every message: json.dumps with options builds one per call (~1 us).
_STD_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_raw_as_value)
_fast_encode: Callable[[Any], bytes] = msgspec.json.Encoder().encode
_fast_decode: Callable[[bytes | bytearray | memoryview], Any] = msgspec.json.Decoder().decode


def dumps(value: Any, *, finite: bool = False, for_client: bool = False) -> bytes:
    """`value` as compact JSON text in UTF-8; ValueError for NaN or an infinity,
    TypeError for what JSON cannot hold. finite=True: the caller's floats are
    finite by construction (a worker's answer: stat times), so the walk that tells
    a non-finite float from None on the msgspec path is skipped (it cost ~1 ms of
    a 1,000-entry listing, whose answer holds a null). for_client=True: text for
    a client's parser, so a lone surrogate (a file name's undecodable byte, as
    Python spells it) becomes U+FFFD: strict parsers (the MCP SDK's) refuse a
    line that escapes one, and would lose the whole response."""
    try:
        data = _fast_encode(value)
    except Exception:
        pass  # lone surrogates, a non-str key, an unknown type: the stdlib decides
    else:
        # msgspec writes a non-finite float as null: the text is scanned for one,
        # and the value walked only if there is one. A large text of few values (a
        # read's answer, whose content is JSON kept as it came) is walked first, where
        # the scan of its megabytes would cost a millisecond.
        if finite or (
            len(data) > SCAN_FIRST_BYTES and _finite_within(value, WALK_FIRST_VALUES)
        ) or b"null" not in data or _finite_within(value, None):
            return data
    if for_client:
        value = _without_lone_surrogates(value)
    return _STD_ENCODER.encode(value).encode()


def _without_lone_surrogates(value: Any) -> Any:
    """`value` with each str's lone surrogates replaced: a surrogate escape by the
    U+FFFD its byte decodes to, as a UTF-8 decoder with "replace" shows a bad name
    (each other lone surrogate by U+FFFD too)."""
    if isinstance(value, str):
        try:
            data = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = value.encode("utf-8", "surrogatepass")
        return data.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_without_lone_surrogates(item) for item in value]
    return value


def loads(data: bytes | bytearray | memoryview, slow: Callable[[bytes], Any]) -> Any:
    """The JSON value in `data`, or whatever `slow(bytes(data))` (the caller's
    stdlib decoding, with its own errors) makes of what msgspec refuses."""
    try:
        return _fast_decode(data)
    except (ValueError, RecursionError, UnicodeDecodeError):
        pass  # msgspec.DecodeError is a ValueError
    return slow(bytes(data))


def is_raw(value: Any) -> bool:
    """Whether `value` is JSON text kept undecoded (decode_members)."""
    return isinstance(value, msgspec.Raw)


RAW = "raw"  # a field type for decode_members: the member's JSON text, undecoded
OPTIONAL = "optional"
# A field of decode_members: (name, type) must be there, (name, type, OPTIONAL) may not.
# A type that is a tuple of fields is an object of exactly those members, decoded in
# the same pass (a dict of them).
Field = tuple[str, Any] | tuple[str, Any, str]


def decode_members(
    data: bytes, fields: tuple[Field, ...], *, exact: bool = False
) -> dict[str, Any] | None:
    """The members of the JSON object in `data` that `fields` name, decoded to their
    types (msgspec's checks: an int in range, a str, ...). A RAW member stays JSON
    text (msgspec.Raw, which dumps() writes out as it is): its syntax is checked, no
    value in it is built, and the caller checks the rest (its kind, UTF-8). Other
    members are skipped unbuilt, or refuse the object when `exact`. None when
    msgspec refuses `data` (bad JSON, a type, nesting past its depth): the caller
    then decodes it the usual way. An optional member that is absent is left out."""
    try:
        decoded = _members_decoder(fields, exact).decode(data)
    except (ValueError, RecursionError):  # DecodeError, ValidationError, bad UTF-8 in a str
        return None
    return _found(decoded, fields)


@functools.cache
def _members_decoder(fields: tuple[Field, ...], exact: bool) -> Any:
    return msgspec.json.Decoder(_members(fields, exact))


def _found(decoded: Any, fields: tuple[Field, ...]) -> dict[str, Any]:
    """The members a decoded struct holds, nested ones as dicts."""
    found = {}
    for field in fields:
        value = getattr(decoded, field[0])
        if value is msgspec.UNSET:
            continue
        found[field[0]] = _found(value, field[1]) if isinstance(field[1], tuple) else value
    return found


@functools.cache
def _members(fields: tuple[Field, ...], exact: bool) -> Any:
    """The msgspec struct type of decode_members' `fields`."""

    def typed(field: Field) -> tuple[Any, ...]:
        kind = field[1]
        if kind == RAW:
            kind = msgspec.Raw
        elif isinstance(kind, tuple):
            kind = _members(kind, True)
        if len(field) == 2:
            return (field[0], kind)
        return (field[0], kind | msgspec.UnsetType, msgspec.UNSET)

    return msgspec.defstruct("Members", [typed(f) for f in fields], forbid_unknown_fields=exact)


# dumps walks this many values of a large message before it falls back to scanning its
# JSON for "null": ~20 us of walking, against ~1-3 ms to scan a 1 MiB read's answer.
# Under SCAN_FIRST_BYTES the scan is the cheaper (a stat's reply: ~0.1 us, its walk ~4 us).
WALK_FIRST_VALUES = 256
SCAN_FIRST_BYTES = 64 * 1024


def _finite_within(value: Any, budget: int | None) -> bool | None:
    """No NaN or infinity anywhere in a value of dicts, lists and tuples; with a
    `budget`, looking at that many values at most: None when there are more (and
    none of those seen was a NaN or an infinity)."""
    stack = [value]
    while stack:
        if budget is not None:
            if budget <= 0:
                return None
            budget -= 1
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())  # a float key becomes a string: still JSON
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True
