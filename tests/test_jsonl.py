"""`corral serve --jsonl`: pipelined requests matched by id; bad lines get error lines."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral.calls.waiting import WaitPolicy
from corral.faces import stdio
from tests.helpers.calls import SECRET

REPO = Path(__file__).resolve().parent.parent


def serve_jsonl(workspace: Path, lines: list[bytes]) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "corral", "serve", "--jsonl", "--workspace", str(workspace)],
        input=b"".join(line + b"\n" for line in lines),
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def line(request_id: Any, tool: str, **arguments: Any) -> bytes:
    return json.dumps({"id": request_id, "tool": tool, "arguments": arguments}).encode()


def test_thousand_pipelined_requests_come_back_matched_by_id(workspace: Path) -> None:
    for index in range(100):
        (workspace / f"f{index}.txt").write_text(f"file {index}\n")
    requests = {}
    for index in range(1000):
        kind = index % 4
        if kind == 0:
            requests[index] = line(index, "read_file", path=f"f{index % 100}.txt")
        elif kind == 1:
            requests[index] = line(index, "stat_file", path=f"f{index % 100}.txt")
        elif kind == 2:
            requests[index] = line(index, "write_file", path=f"w/{index}.txt", content=str(index))
        else:
            requests[index] = line(index, "read_file", path="../outside/secret.txt")
    responses = serve_jsonl(workspace, list(requests.values()))
    assert sorted(response["id"] for response in responses) == list(range(1000))
    for response in responses:
        index = response["id"]
        kind = index % 4
        if kind == 0:
            assert response["ok"] and response["result"]["content"] == f"file {index % 100}\n"
        elif kind == 1:
            assert response["ok"] and response["result"]["size"] == len(f"file {index % 100}\n")
        elif kind == 2:
            assert response["ok"] and (workspace / f"w/{index}.txt").read_text() == str(index)
        else:
            assert response["error"]["code"] == "outside_workspace"
            assert SECRET not in json.dumps(response)


def test_malformed_lines_get_error_lines_and_serving_continues(workspace: Path) -> None:
    lines = [
        b"{not json",
        b"[1, 2]",
        b'{"id": "a", "arguments": {}}',
        b'{"id": "b", "tool": "read_file", "arguments": "hello.txt"}',
        b'{"id": "c", "tool": 5}',
        line("d", "no_such_tool"),
        line("e", "read_file", path="hello.txt"),
        line("f", "read_file", nonsense=True),
        b'{"id": "g", "tool": "list_directory", "arguments": null}',
    ]
    responses = serve_jsonl(workspace, lines)
    by_id = {response["id"]: response for response in responses if response["id"] is not None}
    anonymous = [response for response in responses if response["id"] is None]
    assert len(anonymous) == 2 and len(by_id) == 7
    for response in [*anonymous, by_id["a"], by_id["b"], by_id["c"]]:
        assert response["ok"] is False and response["error"]["code"] == "invalid_arguments"
        assert response["error"]["message"]
    assert by_id["b"]["tool"] == "read_file" and by_id["c"]["tool"] is None
    assert by_id["d"]["error"]["code"] == "unknown_tool"
    assert by_id["e"]["ok"] and by_id["e"]["result"]["content"] == "hello\nworld\n"
    assert by_id["f"]["error"]["code"] == "invalid_arguments"
    assert by_id["g"]["ok"] and by_id["g"]["result"]["count"] >= 1


def test_oversized_line_is_skipped_to_its_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE_BYTES", 10)
    stream = io.BytesIO(b'{"id": 1}\n' + b"x" * 35 + b"\n\n  \n" + b'{"id":2}\n' + b"tail")
    assert list(stdio.read_lines(stream)) == [b'{"id": 1}', None, b'{"id":2}', b"tail"]


def test_line_server_bounds_jobs_and_keeps_reading() -> None:
    """Six blocking jobs on two job slots: the first runs on the reading thread, which
    hands reading off; two run, three queue, and a quick line read
    after them is still answered while they block; a buggy job is reported and
    serving goes on; at the end every job has run."""
    release = threading.Event()
    quick_seen = threading.Event()
    state = threading.Condition()
    running: list[int] = []
    peak: list[int] = []
    released: list[bool] = []

    def job(wait: WaitPolicy) -> None:
        wait.on_slow()  # as a call does before it blocks: an inline job hands reading off
        with state:
            running.append(1)
            peak.append(len(running))
            state.notify_all()
        released.append(release.wait(10))  # False: reading had stalled behind the jobs
        with state:
            running.pop()

    def handle(line: bytes | None) -> stdio.Job | None:
        if line == b"quick":
            quick_seen.set()
            return None
        if line == b"boom":
            return lambda wait: 1 / 0  # type: ignore[return-value]
        return job

    def lines() -> Iterator[bytes]:
        yield from [b"slow"] * 6 + [b"quick"]
        with state:
            assert state.wait_for(lambda: len(running) == 3, timeout=10)
        release.set()
        yield from [b"boom", b"slow"]

    server = stdio.LineServer(lines(), handle, max_jobs=2)
    ended = []
    serving = threading.Thread(target=server.run, args=(lambda: ended.append(True),), daemon=True)
    serving.start()
    serving.join(30)
    assert ended == [True] and quick_seen.is_set()
    # two on the job slots, and the first on the reading thread (the inline policy)
    assert len(peak) == 7 and max(peak) == 3 and running == []
    assert released == [True] * 7


def test_line_server_stop_reads_no_further() -> None:
    seen = []
    server: stdio.LineServer

    def handle(line: bytes | None) -> stdio.Job | None:
        seen.append(line)
        if line == b"stop":
            server.stop()
        return None

    server = stdio.LineServer(iter([b"a", b"stop", b"b"]), handle, max_jobs=1)
    server.run()
    assert seen == [b"a", b"stop"]


def fd_targets(pid: int) -> set[str]:
    """What a process's fds point at; nothing for a process that exited meanwhile (a
    start-up sweep's worker or an idle one may exit while we look)."""
    targets = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(FileNotFoundError):
                targets.add(os.readlink(fd))
    except FileNotFoundError:
        pass
    return targets


@pytest.mark.parametrize("mode", ["--jsonl", "mcp"])
def test_sandbox_processes_do_not_hold_the_protocol_pipe(workspace: Path, mode: str) -> None:
    """Only the server itself may write to the client's pipe: a zygote or worker that
    inherited it could corrupt the stream and would keep it open after the server exits."""
    argv = [sys.executable, "-m", "corral", "serve", "--workspace", str(workspace)]
    first = line(1, "stat_file", path="hello.txt")
    if mode == "mcp":
        first = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}},
            }
        ).encode()
    else:
        argv.append("--jsonl")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(first + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1  # the sandbox is up
        pipe = f"pipe:[{os.fstat(proc.stdout.fileno()).st_ino}]"
        holders = []
        for process in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]:
            if pipe in fd_targets(process.pid):
                holders.append(process.pid)
        assert holders == [proc.pid]
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
