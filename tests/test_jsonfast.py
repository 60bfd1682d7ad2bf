"""jsonfast: msgspec, with the standard library's meaning. Each case runs on both
paths (msgspec, and the standard library's, which takes what msgspec refuses)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import NoReturn

import msgspec
import pytest

from corral import jsonfast
from corral.faces.stdio import parse_line
from corral.sandbox import protocol


def _refuse(value: object) -> NoReturn:
    raise ValueError("refused")  # as msgspec refuses what it cannot take


@pytest.fixture(params=["msgspec", "stdlib"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "stdlib":  # msgspec refuses everything: the stdlib takes it all
        monkeypatch.setattr(jsonfast, "_fast_encode", _refuse)
        monkeypatch.setattr(jsonfast, "_fast_decode", _refuse)
    yield request.param


VALUES = [
    {"ok": True, "result": {"content": "line\n" * 1000, "next_offset": None}},
    {"entries": [{"name": "é\u2028\\\"x", "size": 0, "modified": 1.5}], "n": 10**30},
    [1, -0.0, 1.5e300, "null", None, {"1": (1, 2)}],
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_means_what_json_dumps_means(path: str, value: object) -> None:
    assert json.loads(jsonfast.dumps(value)) == json.loads(json.dumps(value))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_dumps_refuses_non_finite_numbers_even_beside_a_null(path: str, bad: float) -> None:
    for value in ({"x": bad}, {"x": None, "deep": [{"y": (bad,)}]}):
        with pytest.raises(ValueError):
            jsonfast.dumps(value)


def test_dumps_lone_surrogate_falls_back_to_an_escape(path: str) -> None:
    assert jsonfast.dumps({"a": "\ud800"}) == b'{"a":"\\ud800"}'


def test_dumps_refuses_what_json_cannot_hold(path: str) -> None:
    with pytest.raises(TypeError):
        jsonfast.dumps({"a": object()})


ACCEPTED = [
    b'{"a":1,"a":2}', b' {"a" : [1, 2.5e3 ] }\n', b'"\\u00e9\\/"',
    b"123456789012345678901234567890",
    b'\xef\xbb\xbf{"bom":1}', '{"utf16": 1}'.encode("utf-16"), b'"\\ud800"', b'"\xed\xa0\x80"',
]
REFUSED = [b"NaN", b"[1e400]", b'"a\x01b"', b"1 2", b"01", b"[" * 100_000, b"\xff"]


@pytest.mark.parametrize("text", ACCEPTED)
def test_parsers_accept_what_the_stdlib_accepts_with_the_same_value(path: str, text: bytes) -> None:
    expected = json.loads(text.decode(json.detect_encoding(text), "surrogatepass"))
    assert parse_line(text) == expected
    if isinstance(expected, dict):
        assert protocol.decode(text) == expected


@pytest.mark.parametrize("text", REFUSED)
def test_parsers_refuse_what_they_refused(path: str, text: bytes) -> None:
    with pytest.raises(ValueError):
        parse_line(text)
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(text)


def test_the_fast_path_is_taken() -> None:
    assert jsonfast.dumps({"a": "é"}) == '{"a":"é"}'.encode()  # UTF-8, not \\u00e9


def test_text_for_a_client_carries_no_lone_surrogate() -> None:
    # a file name's undecodable byte is a surrogate escape in Python; strict parsers (the
    # MCP SDK's) refuse a line that escapes one, so what a client gets shows U+FFFD
    value = {"name": "bad\udcff.txt", "odd": ["\ud800"], "bad\udcfe": 1}
    line = jsonfast.dumps(value, for_client=True)
    assert b"\\ud" not in line.lower()
    assert json.loads(line) == {"name": "bad\ufffd.txt", "odd": ["\ufffd" * 3], "bad\ufffd": 1}
    # between worker and host the escape stays, so the Python API can name the file
    assert json.loads(jsonfast.dumps(value)) == value


@pytest.mark.parametrize("where", [0, jsonfast.WALK_FIRST_VALUES * 4])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_number_is_refused_before_or_past_the_walk(
    path: str, where: int, bad: float
) -> None:
    """dumps walks a message's first values, then scans its text for null: a NaN is
    refused however many values come before it, with a large raw string beside it."""
    raw = msgspec.json.decode(json.dumps("x" * 100_000).encode(), type=msgspec.Raw)
    value = {"text": raw, "items": [None] * where + [bad]}
    with pytest.raises(ValueError):
        jsonfast.dumps(value, for_client=True)


def test_members_decode_a_nested_object_in_one_pass() -> None:
    inner = (("a", int), ("b", jsonfast.RAW, jsonfast.OPTIONAL))
    fields = (("tool", str), ("result", inner, jsonfast.OPTIONAL))
    found = jsonfast.decode_members(b'{"tool":"t","result":{"a":1,"b":"x"},"more":2}', fields)
    assert found is not None and found["tool"] == "t"
    assert found["result"]["a"] == 1 and bytes(found["result"]["b"]) == b'"x"'
    assert jsonfast.decode_members(b'{"tool":"t"}', fields) == {"tool": "t"}
    # the nested object is exact: an unknown member refuses the whole
    assert jsonfast.decode_members(b'{"tool":"t","result":{"a":1,"c":0}}', fields) is None
