"""A compromised worker's answer is decoded only if a tool could have sent it:
within the bytes the call's limits allow, and with no more JSON values than any
tool's answer holds. `[{},{},...]` (3 bytes of JSON, ~70 of Python each) is
refused before it is decoded: the worker is replaced (worker_crashed) and the
host's memory stays near the bytes it read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral import Sandbox
from corral.config import Limits
from corral.sandbox.answers import answer_limits, too_many_values

REPO = Path(__file__).resolve().parent.parent

# Runs in a fresh interpreter, so its peak RSS is this call's, not pytest's.
ATTACK = r"""
import json, os, resource, sys
sys.path.insert(0, sys.argv[1])
from corral.config import Limits, SandboxOptions
from corral.calls.messages import CallRequest
from corral.sandbox.protocol import HEADER, send_bytes
from tests.helpers.evil_zygote import EvilZygote, Private

BOXES = int(sys.argv[2])

def boxes(fd, request):
    head = b'{"id": %d, "ok": true, "tool": "read_file", "text": "", "result": {"x": ['
    payload = head % request["id"] + b"{}," * BOXES + b'{}]}}'
    send_bytes(fd, HEADER.pack(len(payload)) + payload)

pool = Private(EvilZygote(boxes), SandboxOptions(workers=1), Limits())
pool.workers.start()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
response = pool.call(CallRequest("read_file", {"path": "x"}, id=1))
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
second = pool.call(CallRequest("read_file", {"path": "x"}, id=2))
pool.close()
print(json.dumps({"error": response.error, "grown_mib": grown / 1024,
                  "next_ok": second.ok}))
"""


def test_an_answer_of_millions_of_empty_objects_is_refused_undecoded() -> None:
    boxes = 10 * 1024 * 1024  # 30 MiB of "{}," : within the byte limit, ~700 MiB decoded
    assert 3 * boxes < answer_limits(Limits())[0]
    done = subprocess.run(
        [sys.executable, "-c", ATTACK, str(REPO), str(boxes)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["error"]["code"] == "worker_crashed", report
    assert "JSON values" in report["error"]["message"]
    assert report["next_ok"]  # a fresh worker serves the next call
    # the 30 MiB read, a copy without its strings and the read buffer's growth
    assert report["grown_mib"] < 200, report


def test_the_byte_limit_follows_the_call_limits() -> None:
    small, _ = answer_limits(Limits(max_read_bytes=4096))
    big, _ = answer_limits(Limits(max_read_bytes=4 * 1024 * 1024))
    assert small < big


@pytest.mark.parametrize("content", [",", ":", "[{", '"', '\\"'])
def test_file_content_full_of_json_marks_is_not_mistaken_for_values(content: str) -> None:
    _, values = answer_limits(Limits())
    answer = {"id": 1, "ok": True, "tool": "read_file", "text": content * 2_000_000,
              "result": {"content": content * 2_000_000}}
    assert too_many_values(json.dumps(answer).encode(), values) is None


def test_a_big_honest_answer_full_of_commas_is_served(tmp_path: Path) -> None:
    (tmp_path / "wide.csv").write_text(("," * 99 + "\n") * 30_000)  # 3 MB of separators
    limits = Limits(max_read_bytes=4 * 1024 * 1024)
    with Sandbox(tmp_path, limits=limits) as sb:
        arguments = {"path": "wide.csv", "limit": 10**6, "max_bytes": 4 * 1024 * 1024}
        result = sb.call("read_file", arguments)
    assert result["ok"], result
    assert result["result"]["lines_read"] == 30_000


def test_marks_are_counted_wherever_they_are() -> None:
    """The bound counts each , : [ { byte once, in any mix with other bytes."""
    payload = b'{"a":[1,2,{"b":3}],"c":"' + b"x" * 300_000 + b'"}'
    marks = sum(payload.count(mark) for mark in (b",", b":", b"[", b"{"))
    assert too_many_values(payload, marks) is None
    assert too_many_values(bytearray(payload), marks) is None
    # every string taken out, the rest still has `marks` marks: one fewer allowed fails
    assert too_many_values(payload, marks - 1) is not None
