"""Large answers passed on undecoded (Sandbox.flow(raw=True), used by the MCP and
JSON-lines faces): the same JSON reaches the client, and a worker's answer is
still checked where the host or the client depends on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral import Sandbox, jsonfast
from corral.config import Limits
from corral.mcp_core import tool_result
from corral.policy import Policy
from corral.sandbox.answers import UNCHECKED_BYTES, decode_answer
from corral.sandbox.protocol import ProtocolError

MIB = 1024 * 1024
BIG_TEXT = "".join(f"line {n}: caf\u00e9 \"quoted\" \\ tab\t\n" for n in range(40_000))


def frame(**members: Any) -> bytes:
    return json.dumps(members, ensure_ascii=False).encode()


def big_answer(text: str = BIG_TEXT, **result: Any) -> bytes:
    return frame(id=1, ok=True, tool="read_file", result={"content": text, **result},
                 text=text, meta={"touched": [], "bytes": 0, "needs_approval": []})


def test_a_large_answer_keeps_its_result_and_text_as_json_text() -> None:
    wire = decode_answer(big_answer(), 10_000, raw=True)
    assert jsonfast.is_raw(wire["result"]) and jsonfast.is_raw(wire["text"])
    assert (wire["id"], wire["ok"], wire["tool"]) == (1, True, "read_file")
    assert msgspec.json.decode(wire["result"]) == {"content": BIG_TEXT}
    assert msgspec.json.decode(wire["text"]) == BIG_TEXT


def test_small_answers_and_callers_that_want_dicts_get_dicts() -> None:
    small = big_answer("short")
    assert len(small) < UNCHECKED_BYTES
    assert decode_answer(small, 10_000, raw=True)["result"] == {"content": "short"}
    assert decode_answer(big_answer(), 10_000)["result"] == {"content": BIG_TEXT}


def test_a_result_with_an_image_is_decoded_for_the_face_to_take_apart() -> None:
    image = {"media_type": "image/png", "data": "AAAA"}
    wire = decode_answer(big_answer(image=image), 10_000, raw=True)
    assert wire["result"]["image"] == image
    assert jsonfast.is_raw(wire["text"])


def test_text_that_is_not_utf8_is_refused_not_passed_on() -> None:
    # JSON syntax is checked without decoding; the bytes of a string are not, so a
    # misbehaving worker's invalid UTF-8 would break the client's line
    payload = big_answer().replace("caf\u00e9".encode(), b"caf\xff", 1)
    with pytest.raises(ProtocolError):
        decode_answer(payload, 10_000, raw=True)


def test_members_the_host_reads_are_still_bounded_in_values() -> None:
    payload = frame(id=1, ok=True, tool="read_file", result={"content": BIG_TEXT},
                    text="x", meta={"touched": [], "bytes": 0, "junk": [0] * 200_000})
    with pytest.raises(ProtocolError, match="JSON values"):
        decode_answer(payload, 10_000, raw=True)


def test_a_result_that_is_not_an_object_is_not_passed_on() -> None:
    payload = frame(id=1, ok=True, tool="read_file", result=[BIG_TEXT], text=BIG_TEXT,
                    meta={})
    assert decode_answer(payload, 10_000, raw=True)["result"] == [BIG_TEXT]  # from_wire refuses


@pytest.fixture
def big_sandbox(workspace: Path) -> Any:
    (workspace / "big.txt").write_text(BIG_TEXT)
    with Sandbox(workspace, limits=Limits(max_read_bytes=4 * MIB)) as sandbox:
        yield sandbox


def test_a_raw_read_reaches_the_client_as_the_same_json(big_sandbox: Sandbox) -> None:
    args = {"path": "big.txt", "max_bytes": 4 * MIB, "limit": 100_000}
    plain = big_sandbox.call("read_file", args)
    raw = big_sandbox.run(big_sandbox.flow("read_file", args, raw=True))
    assert jsonfast.is_raw(raw["result"]) and jsonfast.is_raw(raw["text"])
    assert json.loads(jsonfast.dumps(raw)) == plain
    assert plain["result"]["content"] == BIG_TEXT
    as_mcp = json.loads(jsonfast.dumps(tool_result(raw, structured=True)))
    assert as_mcp == tool_result(plain, structured=True)


def test_read_before_write_keeps_dicts(workspace: Path) -> None:
    (workspace / "big.txt").write_text(BIG_TEXT)
    with Sandbox(workspace, limits=Limits(max_read_bytes=4 * MIB),
                 policy=Policy(read_before_write="require")) as sandbox:
        args = {"path": "big.txt", "max_bytes": 4 * MIB, "limit": 100_000}
        outcome = sandbox.run(sandbox.flow("read_file", args, raw=True))
        assert outcome["result"]["content"] == BIG_TEXT
        # the read counted: a write may follow it
        assert sandbox.call("write_file", {"path": "big.txt", "content": "x"})["ok"]
