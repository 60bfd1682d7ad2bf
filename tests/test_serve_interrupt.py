"""^C to `corral serve` while calls run: the server exits at once (130) and its
sandbox's processes with it, though its reader is blocked on an input the client
keeps open, the calls' workers would not answer before their timeouts and more
calls wait their turn. The first call of a session runs on the reading thread
(the main one), later ones on a pool's: both are stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
# A regex that backtracks until the call's timeout (10 s): the call is in flight.
SLOW = '{"pattern": "(a+)+$", "path": "evil.txt"}'
HELLO = (b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
         b'"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n')
QUICK = '{"path": "evil.txt"}'


def jsonl(number: int, tool: str, arguments: str) -> bytes:
    return f'{{"id": {number}, "tool": "{tool}", "arguments": {arguments}}}\n'.encode()


def mcp(number: int, tool: str, arguments: str) -> bytes:
    return (f'{{"jsonrpc": "2.0", "id": {number}, "method": "tools/call", "params": '
            f'{{"name": "{tool}", "arguments": {arguments}}}}}\n').encode()


FACES = {"jsonl": (["--jsonl"], [], jsonl),
         "mcp": ([], [HELLO, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'], mcp)}


def busy_worker(server: psutil.Process, deadline: float) -> list[psutil.Process]:
    """The server's descendants once one of them (the call's worker) is burning CPU."""
    while time.monotonic() < deadline:
        family = server.children(recursive=True)
        for process in family:
            try:
                if process.cpu_times().user > 0.2:
                    return family
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.05)
    raise AssertionError("the slow call never started")


@pytest.mark.parametrize("warm", [False, True], ids=["first call", "later calls"])
@pytest.mark.parametrize("face", FACES)
def test_an_interrupted_server_exits_at_once_and_takes_its_processes(
    ws: Path, face: str, warm: bool,
) -> None:
    (ws / "evil.txt").write_text("a" * 40 + "b\n")
    options, hello, message = FACES[face]
    process = subprocess.Popen(
        [sys.executable, "-m", "corral", "serve", "--workspace", str(ws), *options],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
        # ^C's default, whatever this test runner does with it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        for line in hello:
            process.stdin.write(line)
            process.stdin.flush()
        if hello:
            process.stdout.readline()  # initialize's answer
        if warm:  # answered: the next calls run off the reading thread
            process.stdin.write(message(1, "read_file", QUICK))
            process.stdin.flush()
            process.stdout.readline()
        for number in range(2, 2 + (3 if warm else 1)):  # a worker each, then a queue
            process.stdin.write(message(number, "grep", SLOW))
            process.stdin.flush()
        family = busy_worker(psutil.Process(process.pid), time.monotonic() + 30)
        process.send_signal(signal.SIGINT)  # stdin stays open: the client did not leave
        assert process.wait(5) == 130
        _, alive = psutil.wait_procs(family, timeout=5)
        assert alive == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
