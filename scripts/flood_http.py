"""`corral serve --http` under four floods, with its default limits:

1. one tenant's queue: 8 slow calls (a grep that backtracks for the call's whole
   timeout), then 100 concurrent 3 MiB writes. Reports the answers' statuses and
   the server's peak RSS.
2. half-sent requests: N connections that send half a header and wait, against a
   server limited to --max-files open files; then one real call. Reports how long
   the call took and whether the server ran out of files (EMFILE on stderr).
3. the same N connections to the --metrics port (it needs no token); then one
   real call and one scrape.
4. quota refusals: --refusers clients of a tenant whose calls_per_minute is used
   up, calling as fast as they are answered, while another tenant makes one call
   at a time. Reports that tenant's p50/p99 alone and during the flood, and the
   refusals answered a second.

    python scripts/flood_http.py [--connections 1100] [--max-files 1024] [--refusers 32]

tests/test_http_limits.py holds the short versions (small caps, a 1 s timeout).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.client
import itertools
import json
import multiprocessing
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
TOKEN = "flood-token-0123456789"
REFUSED = "refused-token-0123456789"  # a tenant of one call a minute
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}
IDS = itertools.count(1)  # each request its own id (one client)


def start(top: Path, max_files: int) -> tuple[subprocess.Popen[bytes], int, int]:
    """The server, its port and its metrics port."""
    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max_files, max_files))

    with open(top / "stderr", "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "corral", "serve", "--http", "127.0.0.1:0",
             "--tenants", str(top / "tenants.toml"), "--metrics", "127.0.0.1:0"],
            stderr=stderr, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=top,
            preexec_fn=limit_files,
        )
    while "Prometheus" not in (text := (top / "stderr").read_text()):
        if process.poll() is not None:
            raise SystemExit(f"the server did not start: {text}")
        time.sleep(0.05)
    port, metrics = (int(line.rsplit(":", 1)[1].split("/")[0])
                     for line in text.splitlines()[:2])
    return process, port, metrics


def request(name: str, arguments: dict[str, Any], token: str) -> tuple[str, dict[str, str]]:
    """A stateless tools/call: (its body, its headers)."""
    body = json.dumps({"jsonrpc": "2.0", "id": next(IDS), "method": "tools/call", "params": {
        "name": name, "arguments": arguments, "_meta": META}})
    return body, {"content-type": "application/json", "authorization": f"Bearer {token}",
                  "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call",
                  "mcp-name": name}


def post(port: int, name: str, arguments: dict[str, Any], timeout: float = 120,
         token: str = TOKEN) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        body, headers = request(name, arguments, token)
        connection.request("POST", "/mcp", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def half_sent(top: Path, port: int, connections: int, to: int | None = None) -> None:
    """`connections` half-sent requests to `to` (the metrics port; None: /mcp's)."""
    held = []
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", to or port), timeout=60)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nx-wait: " if to else
                     b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-wait: ")
        held.append(sock)
    started = time.monotonic()
    try:
        answer = f"answered {post(port, 'stat_file', {'path': 'slow.txt'}, timeout=60)}"
    except OSError as exc:
        answer = f"failed ({exc!r})"
    took = time.monotonic() - started
    scraped = ""
    if to:
        started = time.monotonic()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{to}/metrics", timeout=60) as page:
                scraped = f"; a scrape answered {page.status} in {time.monotonic() - started:.2f} s"
        except OSError as exc:
            scraped = f"; a scrape failed ({exc!r})"
    for sock in held:
        sock.close()
    emfile = "Too many open files" in (top / "stderr").read_text()
    print(f"{connections} half-sent requests to {'the metrics port' if to else '/mcp'}: a real "
          f"call {answer} in {took:.2f} s{scraped}; the server "
          f"{'ran' if emfile else 'never ran'} out of files")


def refuse(port: int, clients: int, token: str, stop: Any, count: Any) -> None:
    """In a process of its own (the probe's client must not share its GIL): `clients`
    threads call as fast as they are answered until `stop` is set."""
    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while not stop.is_set():
            body, headers = request("stat_file", {"path": "x"}, token)
            connection.request("POST", "/mcp", body=body, headers=headers)
            connection.getresponse().read()
            with count.get_lock():
                count.value += 1
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def refusals(port: int, pid: int, refusers: int, probes: int = 300) -> None:
    """Another tenant's latency while `refusers` clients are refused quota_exceeded,
    and while as many are refused 401 (a bad token: the least any request costs);
    the server's CPU time per refusal."""
    server = psutil.Process(pid)

    def probe() -> str:
        times = []
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(probes):
            body, headers = request("stat_file", {"path": "slow.txt"}, TOKEN)
            started = time.perf_counter()
            connection.request("POST", "/mcp", body=body, headers=headers)
            connection.getresponse().read()
            times.append(time.perf_counter() - started)
            time.sleep(0.002)
        connection.close()
        times.sort()
        return (f"p50 {1000 * times[len(times) // 2]:.2f} ms, "
                f"p99 {1000 * times[len(times) * 99 // 100]:.2f} ms")

    post(port, "stat_file", {"path": "x"}, token=REFUSED)  # its one call a minute
    print(f"another tenant's call, alone: {probe()}")
    for what, token in (("quota_exceeded", REFUSED), ("401", "not-a-token")):
        stop, count = multiprocessing.Event(), multiprocessing.Value("l", 0)
        flood = multiprocessing.Process(target=refuse, args=(port, refusers, token, stop, count))
        flood.start()
        time.sleep(0.5)
        started, before, cpu = time.monotonic(), count.value, sum(server.cpu_times()[:2])
        during = probe()
        refused = count.value - before
        each = 1e6 * (sum(server.cpu_times()[:2]) - cpu) / (refused + probes)
        rate = refused / (time.monotonic() - started)
        stop.set()
        flood.join()
        print(f"  while {refusers} clients are refused {what} ({rate:.0f} a second, {each:.0f} "
              f"us of server CPU a request): {during}")


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
    parser.add_argument("--refusers", type=int, default=32)
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
        (top / "carol").mkdir()
        refused = hashlib.sha256(REFUSED.encode()).hexdigest()
        (top / "tenants.toml").write_text(
            f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{digest}"\n'
            f'config = "{top / "alice.toml"}"\n'
            f'[[tenant]]\nname = "carol"\ntoken_sha256 = "{refused}"\n'
            f'workspace = "{top / "carol"}"\nquota = {{calls_per_minute = 1}}\n')
        process, port, metrics = start(top, args.max_files)
        try:
            tenant_queue(port, process.pid)
            half_sent(top, port, args.connections)
            half_sent(top, port, args.connections, metrics)
            refusals(port, process.pid, args.refusers)
        finally:
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
