"""NaN, Infinity and -Infinity are not JSON: every face refuses them on input and
never writes them (a strict client's parser would reject the whole line)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.faces import stdio
from corral.sandbox import protocol

REPO = Path(__file__).resolve().parent.parent
NOT_JSON = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400"]


def strict(line: bytes) -> Any:
    """json.loads as a strict parser (JavaScript's JSON.parse, Go's encoding/json) reads."""

    def refuse(name: str) -> None:
        raise AssertionError(f"output holds {name}: {line[:200]!r}")

    return json.loads(line, parse_constant=refuse)


def serve(workspace: Path, flags: list[str], lines: list[bytes]) -> list[Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "corral", "serve", *flags, "--workspace", str(workspace)],
        input=b"".join(line + b"\n" for line in lines), capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [strict(line) for line in proc.stdout.splitlines()]


def test_jsonl_refuses_non_json_numbers_and_answers_in_strict_json(workspace: Path) -> None:
    lines = [b'{"id": %s, "tool": "stat_file", "arguments": {"path": "."}}' % n for n in NOT_JSON]
    lines += [b'{"id": 1, "tool": "read_file", "arguments": {"path": "hello.txt", "limit": %s}}'
              % n for n in NOT_JSON]
    lines.append(b'{"id": 2, "tool": "stat_file", "arguments": {"path": "hello.txt"}}')
    answers = serve(workspace, ["--jsonl"], lines)
    assert len(answers) == len(lines)
    *refused, last = answers
    for answer in refused:
        assert answer["id"] is None and answer["error"]["code"] == "invalid_arguments", answer
        assert "not valid JSON" in answer["error"]["message"]
    assert last["id"] == 2 and last["ok"]


def test_mcp_refuses_non_json_numbers_with_a_parse_error(workspace: Path) -> None:
    lines = [b'{"jsonrpc": "2.0", "id": %s, "method": "ping"}' % n for n in NOT_JSON]
    lines += [b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": %s}}' % n
              for n in NOT_JSON]
    lines.append(b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}')
    answers = serve(workspace, [], lines)
    *refused, last = answers
    assert len(refused) == 2 * len(NOT_JSON)
    assert all(answer["error"]["code"] == -32700 and answer["id"] is None for answer in refused)
    assert last == {"jsonrpc": "2.0", "id": 2, "result": {}}


@pytest.mark.parametrize("number", NOT_JSON)
def test_line_parser_refuses_non_json_numbers(number: bytes) -> None:
    with pytest.raises(ValueError):
        stdio.parse_line(b'{"id": %s}' % number)
    assert stdio.parse_line(b'{"id": 1.5e300}') == {"id": 1.5e300}


def test_line_writer_never_writes_a_non_json_number() -> None:
    out = io.BytesIO()
    with pytest.raises(ValueError):
        stdio.LineWriter(out).write({"id": float("nan")})
    assert out.getvalue() == b""


@pytest.mark.parametrize("number", NOT_JSON)
def test_worker_frames_refuse_non_json_numbers(number: bytes) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(b'{"id": 1, "arguments": {"limit": %s}}' % number)
    with pytest.raises(protocol.ProtocolError):
        protocol.encode({"id": 1, "x": float("inf")}, 1 << 20)
