"""Benchmark of many sandboxes in one corral.Pool.

    python scripts/bench_tenants.py [--sandboxes 1000] [--active 100] [--seconds 3]

Reports, in one run:
- memory: host + zygote RSS (and PSS) with N sandboxes open on distinct
  workspaces, their start-up sweeps done and their idle workers reaped
  (target <= 256 MiB total);
- the first call on a cold sandbox (no worker: one is forked; past 64, an idle
  worker of another sandbox is evicted first), median and p99
  (target median <= 10 ms), beside the same stat_file run in-process through the
  same tool code (no IPC, no fork) and a warm call through the pool;
- throughput with `--active` tenants calling at once (one thread each), beside
  the same threads running the tool in-process;
- a quiet tenant's stat_file latency (a 2 ms idle gap between calls) alone and
  beside a noisy neighbour flooding the pool, p50 and p99 (target p99 <= 3x);
- stat_file over MCP Streamable HTTP (`corral serve --http`, keep-alive) vs
  over stdio MCP (`corral serve`), one client each, alternating, same run.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corral import Pool, Sandbox, testing
from corral.calls.messages import CallRequest
from corral.config import Limits
from corral.fs import Root, Roots
from corral.policy import Policy
from corral.tools.base import Context
from corral.tools.registry import execute

STAT = {"path": "f.txt"}
MIB = 1024 * 1024


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def ms(value: float) -> str:
    return f"{value * 1e3:7.2f} ms"


def make_workspaces(top: str, count: int) -> list[str]:
    paths = []
    for index in range(count):
        path = os.path.join(top, f"ws{index:04d}")
        os.mkdir(path)
        Path(path, "f.txt").write_text(f"tenant {index}\n")
        paths.append(path)
    return paths


def in_process(workspace: str) -> Callable[[], Any]:
    context = Context(Roots(Root(workspace)), Limits(), Policy())
    return lambda: execute(context, CallRequest("stat_file", dict(STAT)))


def timed(fn: Callable[[], Any], count: int, gap_s: float = 0.0) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
        if gap_s:
            time.sleep(gap_s)
    return samples


def rss_of(pids: list[int]) -> tuple[float, float]:
    infos = [psutil.Process(pid).memory_full_info() for pid in pids]
    return sum(i.rss for i in infos) / MIB, sum(i.pss for i in infos) / MIB


def bench_many(workspaces: list[str]) -> dict[str, Any]:
    """Open a sandbox per workspace; once their start-up sweeps are done and every
    idle worker has exited, measure memory, then call each once (cold: it forks)."""
    host_before = psutil.Process().memory_info().rss / MIB
    with Pool(max_workers=64, idle_timeout_s=1.0) as pool:
        sandboxes = [pool.sandbox(path) for path in workspaces]
        for sb in sandboxes:
            testing.sweep(testing.broker(sb)).result()
        wait_reaped(pool)
        stats = pool.stats()
        zygote = pool._hub.zygote.pid
        rss, pss = rss_of([os.getpid(), zygote])
        zygote_rss, _ = rss_of([zygote])
        cold = []
        for sb in sandboxes:
            start = time.perf_counter()
            assert sb.call("stat_file", dict(STAT))["ok"]
            cold.append(time.perf_counter() - start)
        warm = timed(lambda: sandboxes[-1].call("stat_file", dict(STAT)), 500)
        for sb in sandboxes:
            sb.close()
    reference = timed(in_process(workspaces[0]), 500)
    return {
        "cold": cold, "warm": warm, "in_process": reference, "stats": stats,
        "rss": rss, "pss": pss, "zygote_rss": zygote_rss, "host_before": host_before,
    }


def wait_reaped(pool: Pool) -> None:
    deadline = time.monotonic() + 60
    while pool.stats()["workers"] and time.monotonic() < deadline:
        time.sleep(0.1)


def run_threads(count: int, seconds: float, work: Callable[[int], Any]) -> int:
    """`count` threads each calling work(index) until time is up; total calls."""
    done = [0] * count
    stop = threading.Event()

    def loop(index: int) -> None:
        while not stop.is_set():
            work(index)
            done[index] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return sum(done)


def bench_throughput(workspaces: list[str], active: int, seconds: float) -> dict[str, float]:
    chosen = workspaces[:active]
    references = [in_process(path) for path in chosen]
    local = run_threads(active, seconds, lambda i: references[i]())
    with Pool(max_workers=64, idle_timeout_s=30.0) as pool:
        sandboxes = [pool.sandbox(path) for path in chosen]
        pooled = run_threads(active, seconds, lambda i: sandboxes[i].call("stat_file", dict(STAT)))
    return {"pool": pooled / seconds, "in_process": local / seconds}


def bench_neighbour(workspaces: list[str], samples: int) -> dict[str, list[float]]:
    quiet_ws, noisy_ws = workspaces[0], workspaces[1]
    Path(noisy_ws, "big.txt").write_text("line of text to grep through\n" * 20000 + "needle\n")
    with Pool(max_workers=64, idle_timeout_s=30.0) as pool:
        quiet = pool.sandbox(quiet_ws, workers=1)
        noisy: Sandbox = pool.sandbox(noisy_ws, workers=2)
        quiet.call("stat_file", dict(STAT))
        alone = timed(lambda: quiet.call("stat_file", dict(STAT)), samples, gap_s=0.002)
        stop = threading.Event()

        def flood() -> None:
            while not stop.is_set():
                noisy.call("grep", {"pattern": "needle"})

        threads = [threading.Thread(target=flood) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)
        try:
            beside = timed(lambda: quiet.call("stat_file", dict(STAT)), samples, gap_s=0.002)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    return {"alone": alone, "beside": beside}


META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def stat_message(request_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": "stat_file", "arguments": dict(STAT), "_meta": META}}).encode()


def bench_http_vs_stdio(workspace: str, calls: int) -> dict[str, list[float]]:
    """The same stateless stat_file call, one client, over stdio MCP and over HTTP."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    stdio = subprocess.Popen(
        [sys.executable, "-m", "corral", "serve", "--workspace", workspace],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
    )
    assert stdio.stdin is not None and stdio.stdout is not None

    def over_stdio(request_id: int) -> None:
        stdio.stdin.write(stat_message(request_id) + b"\n")  # type: ignore[union-attr]
        stdio.stdin.flush()  # type: ignore[union-attr]
        assert b'"exists":true' in stdio.stdout.readline()  # type: ignore[union-attr]

    tenants = os.path.join(os.path.dirname(workspace), "tenants.toml")
    Path(tenants).write_text(
        f'[[tenant]]\nname = "bench"\ntoken_sha256 = "{hashlib.sha256(b"t").hexdigest()}"\n'
        f'workspace = "{workspace}"\n'
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "corral", "serve", "--http", "127.0.0.1:0", "--tenants", tenants],
        stderr=subprocess.PIPE, env=env,
    )
    assert server.stderr is not None
    port = int(server.stderr.readline().decode().rsplit(":", 1)[1].split("/")[0])
    connection = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"content-type": "application/json", "authorization": "Bearer t",
               "accept": "application/json, text/event-stream",
               # a 2026-07-28 request's SEP-2243 headers, which the server checks
               "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call",
               "mcp-name": "stat_file"}

    def over_http(request_id: int) -> None:
        connection.request("POST", "/mcp", body=stat_message(request_id), headers=headers)
        response = connection.getresponse()
        assert response.status == 200 and b'"exists":true' in response.read()

    try:
        faces = {"stdio": over_stdio, "http": over_http}
        for fn in faces.values():
            for i in range(50):  # warm-up: imports, the first fork, caches
                fn(i)
        results: dict[str, list[float]] = {"stdio": [], "http": []}
        for order in (("stdio", "http"), ("http", "stdio")):  # neither always goes first
            for name in order:
                results[name] += timed_ids(faces[name], calls)
        return results
    finally:
        connection.close()
        stdio.stdin.close()
        stdio.wait(30)
        server.terminate()
        server.wait(30)


def timed_ids(fn: Callable[[int], Any], count: int) -> list[float]:
    samples = []
    for i in range(count):
        start = time.perf_counter()
        fn(1000 + i)
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=1000)
    parser.add_argument("--active", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--http-calls", type=int, default=500)
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix="corral-tenants-")
    workspaces = make_workspaces(top, args.sandboxes)

    many = bench_many(workspaces)
    cold, warm, reference = many["cold"], many["warm"], many["in_process"]
    print(f"{args.sandboxes} sandboxes in one Pool(max_workers=64), stat_file:")
    print(f"  first call on a cold sandbox: median {ms(statistics.median(cold))}  "
          f"p99 {ms(percentile(cold, 0.99))}  min {ms(min(cold))}  (target median <= 10 ms)")
    print(f"    of which the first 64 (a free slot): median {ms(statistics.median(cold[:64]))}; "
          f"the rest (an idle worker evicted first): median {ms(statistics.median(cold[64:]))}")
    print(f"  warm call through the pool:   median {ms(statistics.median(warm))}  "
          f"p99 {ms(percentile(warm, 0.99))}")
    print(f"  in-process (same tool code):  median {ms(statistics.median(reference))}  "
          f"cold/in-process {statistics.median(cold) / statistics.median(reference):6.0f}x  "
          f"warm/in-process {statistics.median(warm) / statistics.median(reference):4.1f}x")
    print(f"  idle workers reaped ({many['stats']}): host + zygote RSS {many['rss']:6.1f} MiB "
          f"(PSS {many['pss']:6.1f}; zygote {many['zygote_rss']:5.1f}; host before the pool "
          f"{many['host_before']:5.1f})  (target <= 256 MiB)")

    rates = bench_throughput(workspaces, args.active, args.seconds)
    print(f"{args.active} tenants calling at once ({args.seconds:g} s, one thread each): "
          f"pool {rates['pool']:7.0f} calls/s, in-process {rates['in_process']:7.0f} calls/s "
          f"({rates['pool'] / rates['in_process']:4.2f}x)")

    latency = bench_neighbour(workspaces, args.samples)
    alone, beside = latency["alone"], latency["beside"]
    print("quiet tenant, stat_file with a 2 ms gap, alone vs beside a noisy neighbour "
          "(4 threads of grep over 600 KiB, its workers=2):")
    print(f"  alone:  median {ms(statistics.median(alone))}  p99 {ms(percentile(alone, 0.99))}")
    print(f"  beside: median {ms(statistics.median(beside))}  p99 {ms(percentile(beside, 0.99))}"
          f"  p99 ratio {percentile(beside, 0.99) / percentile(alone, 0.99):4.1f}x  "
          f"median ratio {statistics.median(beside) / statistics.median(alone):4.1f}x  "
          "(target p99 <= 3x)")

    faces = bench_http_vs_stdio(workspaces[2], args.http_calls)
    print(f"stat_file, one MCP client (2026-07-28), {2 * args.http_calls} calls each:")
    for name in ("stdio", "http"):
        print(f"  over {name:5s}: median {ms(statistics.median(faces[name]))}  "
              f"p99 {ms(percentile(faces[name], 0.99))}")
    ratio = statistics.median(faces["http"]) / statistics.median(faces["stdio"])
    print(f"  http/stdio median {ratio:4.2f}x  (in-process {ms(statistics.median(reference))})")


if __name__ == "__main__":
    main()
