"""A large read passed on undecoded (Sandbox.flow(raw=True), asked for by the MCP,
JSON-lines and HTTP faces): the client gets the same JSON, and a worker (which is
untrusted) cannot use the path to reach past its answer: the line it lands in stays
one strict JSON value, and the host's memory and bookkeeping stay bounded."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral import Sandbox, jsonfast
from corral.calls.messages import Answer, CallRequest, Malformed
from corral.config import Limits, SandboxOptions
from corral.faces.mcp_jsonrpc import response
from corral.faces.mcp_render import tool_result
from corral.faces.stdio import LineWriter
from corral.policy import Policy
from corral.sandbox import handles
from corral.sandbox.answers import UNCHECKED_BYTES, decode_answer
from corral.sandbox.protocol import ProtocolError

MIB = 1024 * 1024
BIG_TEXT = "".join(f"line {n}: caf\u00e9 \"quoted\" \\ tab\t\n" for n in range(40_000))
PAD = b'"' + b"x" * 300_000 + b'"'  # a JSON string that makes any answer large
META = b'{"touched":[],"bytes":0,"needs_approval":[]}'
FIELDS = (b'"path":"big.txt","encoding":"utf-8","total_lines":1,"start_line":1,'
          b'"lines_read":1,"truncated":false,"next_offset":null,"size":1,"version":"v"')


def read_answer(text: str = BIG_TEXT) -> bytes:
    result = {"path": "big.txt", "content": text, "encoding": "utf-8", "total_lines": 1,
              "start_line": 1, "lines_read": 1, "truncated": False, "next_offset": None,
              "size": 1, "version": "v"}
    return json.dumps({"id": 1, "ok": True, "tool": "read_file", "result": result,
                       "text": text, "meta": json.loads(META)}, ensure_ascii=False,
                      separators=(",", ":")).encode()


def crafted(result: bytes = b"{" + FIELDS + b',"content":' + PAD + b"}", text: bytes = PAD,
            meta: bytes = META) -> bytes:
    return (b'{"id":1,"ok":true,"tool":"read_file","result":' + result + b',"text":' + text
            + b',"meta":' + meta + b"}")


def client_line(payload: bytes) -> bytes:
    """What the MCP server writes to its client for this worker answer."""
    wire = decode_answer(bytearray(payload), 10_000, raw=True)
    answer = Answer.from_wire(wire, CallRequest("read_file", {}, id=1))
    out = io.BytesIO()
    LineWriter(out).write(response(7, tool_result(answer.public(), structured=True)))
    return out.getvalue()


def test_a_large_read_keeps_its_text_and_content_as_json_strings() -> None:
    wire = decode_answer(read_answer(), 10_000, raw=True)
    assert jsonfast.is_raw(wire["text"]) and jsonfast.is_raw(wire["result"]["content"])
    assert (wire["id"], wire["ok"], wire["tool"]) == (1, True, "read_file")
    assert wire["result"]["total_lines"] == 1 and wire["meta"]["touched"] == []
    assert msgspec.json.decode(wire["text"]) == BIG_TEXT
    assert msgspec.json.decode(wire["result"]["content"]) == BIG_TEXT


def test_small_answers_and_callers_that_want_values_get_values() -> None:
    small = read_answer("short")
    assert len(small) < UNCHECKED_BYTES
    assert decode_answer(small, 10_000, raw=True)["text"] == "short"
    assert decode_answer(read_answer(), 10_000)["text"] == BIG_TEXT


@pytest.mark.parametrize(("result", "passes"), [
    # whitespace between tokens is kept by a raw member: a line break there would end the
    # client's line and start a message of the worker's making
    (b'{\n"content":' + PAD + b',"x":\n{"jsonrpc":"2.0","id":7,"method":"ping"}\n,' + FIELDS
     + b"}", False),
    # between the result's own fields it is dropped: the host writes those fields itself
    (b'{\r"content":' + PAD + b",\n" + FIELDS + b"}", True),
    (b'{"content":' + PAD + b',"image":{"media_type":"image/png","data":"AA"},' + FIELDS + b"}",
     False),
    (b'{"content":[' + PAD + b"]," + FIELDS + b"}", False),  # not a string
    (b'{"content":' + PAD + b"}", False),  # fields missing
], ids=["line-break-between-tokens", "between-fields", "image", "content-not-a-string",
        "fields-missing"])
def test_only_a_read_result_of_the_exact_shape_passes_undecoded(
    result: bytes, passes: bool
) -> None:
    wire = decode_answer(crafted(result), 10_000, raw=True)
    assert jsonfast.is_raw(wire["result"].get("content")) is passes
    line = client_line(crafted(result))  # either way: one strict JSON value, one line
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    json.loads(line)


@pytest.mark.parametrize("number", [b"1e400", b"9" * 5000])
def test_numbers_no_client_can_take_are_refused_as_ever(number: bytes) -> None:
    result = b'{"content":' + PAD + b',"n":' + number + b"," + FIELDS + b"}"
    with pytest.raises(ProtocolError):
        decode_answer(crafted(result), 10_000, raw=True)


def test_the_client_line_of_a_passed_read_is_one_strict_json_value() -> None:
    line = client_line(read_answer())
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    message = json.loads(line)
    assert message["result"]["structuredContent"]["content"] == BIG_TEXT
    assert message["result"]["content"][0]["text"] == BIG_TEXT


def test_text_that_is_not_utf8_is_decoded_and_refused() -> None:
    # a JSON string's bytes are not checked when it is skimmed, so this path checks them
    payload = read_answer().replace("caf\u00e9".encode(), b"caf\xff", 1)
    with pytest.raises(ProtocolError):
        decode_answer(payload, 10_000, raw=True)


@pytest.mark.parametrize("bad", [
    FIELDS.replace(b'"path":"big.txt"', b'"path":"\xff"'), FIELDS + b',"\xff":1',
])
def test_bad_utf8_in_a_typed_field_is_a_protocol_error(bad: bytes) -> None:
    # msgspec's UnicodeDecodeError must not leave decode_answer as itself
    with pytest.raises(ProtocolError):
        decode_answer(crafted(b'{"content":' + PAD + b"," + bad + b"}"), 10_000, raw=True)


def test_nesting_past_the_parser_depth_is_a_protocol_error() -> None:
    # not a RecursionError, which would leave the pool's worker neither returned nor replaced
    deep = b"[" * 5000 + b"]" * 5000
    for payload in (crafted(meta=deep), crafted(b'{"content":' + PAD + b',"a":' + deep + b","
                                                + FIELDS + b"}")):
        with pytest.raises(ProtocolError):
            decode_answer(payload, 10_000, raw=True)


def test_many_values_beside_a_passed_read_are_counted_together() -> None:
    # each under the bound alone, over it together: the answer is refused as a whole is
    many = b"[" + b"0," * 100_000 + b"0]"  # 200 KB: decoded unchecked alone
    meta = b'{"touched":[],"bytes":0,"a":' + many + b"}"
    payload = crafted(meta=meta)[:-1] + b',"error":' + many + b"}"
    with pytest.raises(ProtocolError, match="JSON values"):
        decode_answer(payload, 10_000, raw=True)


def test_a_lone_surrogate_beside_a_large_result_cannot_unbound_it() -> None:
    # a text msgspec refuses goes the stdlib way; the result is then decoded whole and
    # counted like any answer, not passed on and decoded unbounded when written
    result = b'{"content":' + PAD + b',"a":[' + b"[]," * 200_000 + b"[]]," + FIELDS + b"}"
    with pytest.raises(ProtocolError, match="JSON values"):
        decode_answer(crafted(result, text=b'"\xed\xa0\x80"'), 10_000, raw=True)


def test_a_non_read_tool_is_decoded() -> None:
    payload = read_answer().replace(b'"tool":"read_file"', b'"tool":"grep"', 1)
    assert decode_answer(payload, 10_000, raw=True)["text"] == BIG_TEXT


def test_an_answer_that_is_not_a_read_result_is_malformed_not_passed() -> None:
    payload = crafted(b"[" + PAD + b"]")
    wire = decode_answer(payload, 10_000, raw=True)
    with pytest.raises(Malformed):
        Answer.from_wire(wire, CallRequest("read_file", {}, id=1))


@pytest.fixture
def big_sandbox(workspace: Path) -> Any:
    (workspace / "big.txt").write_text(BIG_TEXT)
    with Sandbox(workspace, limits=Limits(max_read_bytes=4 * MIB)) as sandbox:
        yield sandbox


ARGS = {"path": "big.txt", "max_bytes": 4 * MIB, "limit": 100_000}


def test_a_raw_read_reaches_the_client_as_the_same_json(big_sandbox: Sandbox) -> None:
    plain = big_sandbox.call("read_file", ARGS)
    raw = big_sandbox.run(big_sandbox.flow("read_file", ARGS, raw=True))
    assert jsonfast.is_raw(raw["text"]) and jsonfast.is_raw(raw["result"]["content"])
    assert json.loads(jsonfast.dumps(raw)) == plain
    assert plain["result"]["content"] == BIG_TEXT
    as_mcp = json.loads(jsonfast.dumps(tool_result(raw, structured=True)))
    assert as_mcp == tool_result(plain, structured=True)


def test_read_before_write_counts_a_raw_read(workspace: Path) -> None:
    (workspace / "big.txt").write_text(BIG_TEXT)
    with Sandbox(workspace, limits=Limits(max_read_bytes=4 * MIB),
                 policy=Policy(read_before_write="require")) as sandbox:
        assert not sandbox.call("write_file", {"path": "big.txt", "content": "x"})["ok"]
        outcome = sandbox.run(sandbox.flow("read_file", ARGS, raw=True))
        assert jsonfast.is_raw(outcome["result"]["content"])
        assert sandbox.call("write_file", {"path": "big.txt", "content": "x"})["ok"]


def test_an_answer_that_fails_to_read_in_any_way_costs_its_worker_not_the_pool(
    workspace: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (workspace / "small.txt").write_text("hello\n")
    with Sandbox(workspace, options=SandboxOptions(workers=1)) as sandbox:


        def unforeseen(payload: Any, max_values: int, *, raw: bool = False) -> Any:
            raise RecursionError("deep")

        monkeypatch.setattr(handles, "decode_answer", unforeseen)
        failed = sandbox.call("read_file", {"path": "small.txt"})
        assert failed["error"]["code"] == "worker_crashed"
        monkeypatch.undo()
        assert sandbox.call("read_file", {"path": "small.txt"})["result"]["content"] == "hello\n"
