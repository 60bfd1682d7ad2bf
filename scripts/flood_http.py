"""`corral serve --http` under two floods, with its default limits:

1. one tenant's queue: 8 slow calls (a grep that backtracks for the call's whole
   timeout), then 100 concurrent 3 MiB writes. Reports the answers' statuses and
   the server's peak RSS.
2. half-sent requests: N connections that send half a header and wait, against a
   server limited to --max-files open files; then one real call. Reports how long
   the call took and whether the server ran out of files (EMFILE on stderr).

    python scripts/flood_http.py [--connections 1100] [--max-files 1024]

tests/test_http_limits.py holds the short versions (small caps, a 1 s timeout).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.client
import itertools
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
TOKEN = "flood-token-0123456789"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}
IDS = itertools.count(1)  # each request its own id (one client)


def start(top: Path, max_files: int) -> tuple[subprocess.Popen[bytes], int]:
    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max_files, max_files))

    with open(top / "stderr", "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "corral", "serve", "--http", "127.0.0.1:0",
             "--tenants", str(top / "tenants.toml")],
            stderr=stderr, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=top,
            preexec_fn=limit_files,
        )
    while "serving" not in (line := (top / "stderr").read_text()):
        if process.poll() is not None:
            raise SystemExit(f"the server did not start: {line}")
        time.sleep(0.05)
    return process, int(line.split("\n")[0].rsplit(":", 1)[1].split("/")[0])


def post(port: int, name: str, arguments: dict[str, Any], timeout: float = 120) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": next(IDS), "method": "tools/call", "params": {
        "name": name, "arguments": arguments, "_meta": META}})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/mcp", body=body, headers={
            "content-type": "application/json", "authorization": f"Bearer {TOKEN}"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def half_sent(top: Path, port: int, connections: int) -> None:
    held = []
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        sock.sendall(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-wait: ")
        held.append(sock)
    started = time.monotonic()
    try:
        answer = f"answered {post(port, 'stat_file', {'path': 'slow.txt'}, timeout=60)}"
    except OSError as exc:
        answer = f"failed ({exc!r})"
    took = time.monotonic() - started
    for sock in held:
        sock.close()
    emfile = "Too many open files" in (top / "stderr").read_text()
    print(f"{connections} half-sent requests: a real call {answer} in {took:.2f} s; "
          f"the server {'ran' if emfile else 'never ran'} out of files")


def tenant_queue(port: int, pid: int) -> None:
    server = psutil.Process(pid)
    statuses: collections.Counter[int] = collections.Counter()

    def call(name: str, arguments: dict[str, Any]) -> None:
        statuses[post(port, name, arguments)] += 1

    slow = [threading.Thread(target=call, args=("grep", {"pattern": "(a+)+$"}))
            for _ in range(8)]
    for thread in slow:
        thread.start()
    time.sleep(0.5)
    content = "x" * (3 * 1024 * 1024)
    writes = [threading.Thread(target=call, args=("write_file", {"path": f"w{n}.txt",
                                                                 "content": content}))
              for n in range(100)]
    before = server.memory_info().rss
    for thread in writes:
        thread.start()
    peak = before
    while any(thread.is_alive() for thread in slow + writes):
        peak = max(peak, server.memory_info().rss)
        time.sleep(0.05)
    mib = 1024 * 1024
    print(f"8 slow calls + 100 writes of 3 MiB: answers {dict(statuses)}; RSS {before // mib} "
          f"MiB before, {peak // mib} MiB at the peak")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--max-files", type=int, default=1024)
    args = parser.parse_args()
    _, most = resource.getrlimit(resource.RLIMIT_NOFILE)  # this side holds every connection
    resource.setrlimit(resource.RLIMIT_NOFILE, (most, most))
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        (top / "ws").mkdir()
        (top / "ws" / "slow.txt").write_text("a" * 40 + "b\n")
        (top / "alice.toml").write_text(
            f'[workspace]\nroot = "{top / "ws"}"\n[limits]\ntimeout_s = 4\n'
            f'max_write_bytes = 4194304\n[history]\npath = "{top / "history"}"\n')
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        (top / "tenants.toml").write_text(
            f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{digest}"\n'
            f'config = "{top / "alice.toml"}"\n')
        process, port = start(top, args.max_files)
        try:
            tenant_queue(port, process.pid)
            half_sent(top, port, args.connections)
        finally:
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
