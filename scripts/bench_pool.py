"""Benchmark of the confined pool against doing the same work in-process.

    python scripts/bench_pool.py [--calls 2000] [--starts 10] [--respawns 20]

Reports: a 4 KiB read_file through the pool (sync submit and asubmit), median
and p99, and its ratio to the same read_file run in the host through the same
tool code (open beneath the root + read + render, no IPC) and to a plain
open()+read() of the file; sandbox start to
first result; worker respawn after a crash; memory of zygote + 2 workers.
Targets (issue 3): read median <= 8x in-process, start <= 150 ms, respawn <=
10 ms, memory <= 60 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corral import testing
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.fs import Root, Roots
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker
from corral.tools.base import Context
from corral.tools.registry import execute

READ = {"tool": "read_file", "arguments": {"path": "four_k.txt"}, "approved": []}
WARMUP = 50  # calls before timing: first calls pay for lazy caches on both sides


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def timed(fn: Callable[[], Any], count: int) -> list[float]:
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def make_workspace() -> str:
    workspace = tempfile.mkdtemp(prefix="corral-bench-")
    line = "x" * 63 + "\n"
    Path(workspace, "four_k.txt").write_text(line * 64)  # 4096 bytes, 64 lines
    return workspace


def start_broker(workspace: str, **options: Any) -> Broker:
    return Broker([RootSpec(workspace, "rw")], Limits(), Policy(), SandboxOptions(**options))


def plain_read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def bench_reads(workspace: str, calls: int) -> dict[str, float]:
    path = os.path.join(workspace, READ["arguments"]["path"])
    plain = timed(lambda: plain_read(path), calls)
    root = Root(workspace)
    context = Context(Roots(root), Limits(), Policy())
    in_process = timed(lambda: execute(context, CallRequest(**READ)), calls)
    root.close()
    broker = start_broker(workspace)
    try:
        assert broker.submit(CallRequest(**READ)).public()["ok"]
        pooled = timed(lambda: broker.submit(CallRequest(**READ)).public(), calls)

        async def async_calls() -> list[float]:
            samples = []
            for i in range(WARMUP + calls):
                start = time.perf_counter()
                await broker.asubmit(CallRequest(**READ))
                if i >= WARMUP:
                    samples.append(time.perf_counter() - start)
            return samples

        pooled_async = asyncio.run(async_calls())
    finally:
        broker.close()
    return {
        "plain_median_us": statistics.median(plain) * 1e6,
        "in_process_median_us": statistics.median(in_process) * 1e6,
        "pool_median_us": statistics.median(pooled) * 1e6,
        "pool_p99_us": percentile(pooled, 0.99) * 1e6,
        "async_median_us": statistics.median(pooled_async) * 1e6,
        "async_p99_us": percentile(pooled_async, 0.99) * 1e6,
    }


def bench_start(workspace: str, starts: int) -> list[float]:
    samples = []
    for _ in range(starts):
        start = time.perf_counter()
        broker = start_broker(workspace)
        assert broker.submit(CallRequest(**READ)).public()["ok"]
        samples.append(time.perf_counter() - start)
        broker.close()
    return samples


def bench_respawn(workspace: str, respawns: int) -> list[float]:
    broker = start_broker(workspace, workers=1)
    workers = testing.supply(broker)  # the verbs themselves: kill, then time lost()
    samples = []
    try:
        for _ in range(respawns):
            worker = workers.take()
            os.kill(worker.pid, signal.SIGKILL)
            start = time.perf_counter()
            workers.lost(worker)
            samples.append(time.perf_counter() - start)
        assert broker.submit(CallRequest(**READ)).public()["ok"]
    finally:
        broker.close()
    return samples


def bench_memory(workspace: str) -> dict[str, float]:
    broker = start_broker(workspace, workers=2)
    try:
        # from two threads: the second worker starts when two calls overlap
        with ThreadPoolExecutor(2) as threads:
            list(threads.map(lambda _: broker.submit(CallRequest(**READ)), range(200)))
        pids = broker.pids()
        processes = [psutil.Process(pid) for pid in [pids["zygote"], *pids["workers"]]]
        infos = [p.memory_full_info() for p in processes]
    finally:
        broker.close()
    mib = 1024 * 1024
    return {
        "rss_mib": sum(i.rss for i in infos) / mib,
        "pss_mib": sum(i.pss for i in infos) / mib,
        "uss_mib": sum(i.uss for i in infos) / mib,
        "zygote_rss_mib": infos[0].rss / mib,
        "workers": len(infos) - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--respawns", type=int, default=20)
    args = parser.parse_args()
    workspace = make_workspace()

    reads = bench_reads(workspace, args.calls)
    ratio = reads["pool_median_us"] / reads["in_process_median_us"]
    print(f"4 KiB read_file, {args.calls} calls")
    print(f"  plain open()+read() in the host:     median {reads['plain_median_us']:7.1f} us")
    print(f"  in-process (same tool code, no IPC): median {reads['in_process_median_us']:7.1f} us")
    print(f"  pool submit:  median {reads['pool_median_us']:7.1f} us  "
          f"p99 {reads['pool_p99_us']:7.1f} us  ratio {ratio:4.1f}x  (target <= 8x)  "
          f"vs plain read {reads['pool_median_us'] / reads['plain_median_us']:5.1f}x")
    print(f"  pool asubmit: median {reads['async_median_us']:7.1f} us  "
          f"p99 {reads['async_p99_us']:7.1f} us  "
          f"ratio {reads['async_median_us'] / reads['in_process_median_us']:4.1f}x")

    starts = bench_start(workspace, args.starts)
    print(f"start to first result ({args.starts} starts): median "
          f"{statistics.median(starts) * 1e3:6.1f} ms  min {min(starts) * 1e3:6.1f} ms  "
          "(target <= 150 ms)")

    respawns = bench_respawn(workspace, args.respawns)
    print(f"respawn after a crash ({args.respawns}): median "
          f"{statistics.median(respawns) * 1e3:6.2f} ms  max {max(respawns) * 1e3:6.2f} ms  "
          "(target <= 10 ms)")

    memory = bench_memory(workspace)
    print(f"zygote + {memory['workers']:.0f} workers: RSS {memory['rss_mib']:5.1f} MiB  "
          f"PSS {memory['pss_mib']:5.1f} MiB  USS {memory['uss_mib']:5.1f} MiB  "
          f"(zygote RSS {memory['zygote_rss_mib']:4.1f} MiB; target <= 60 MiB)")


if __name__ == "__main__":
    main()
