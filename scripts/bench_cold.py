"""Where a small call's time goes after an idle gap: corral against the reference
MCP filesystem server, by how far each request travels, in one run.

Three requests, each back to back and after an idle gap (an agent thinking):
- `ping`: answered by the server's message loop alone (both servers);
- `refused stat`: a stat whose path is a number, refused by the argument check
  (corral's host, before any worker; the reference's schema check): the whole
  tools/call path of the server process, no file touched;
- `stat`: the real call (corral: through the confined worker).
`stat - refused` is then what the call costs past the server's own path: for
corral the round trip to the confined worker and the worker's work, for the
reference its fs.stat through libuv's thread pool.

Then the same in this process, no server: the worker's stat_file code (corral's
registry.execute, as a worker runs it, without confinement) and a bare os.stat,
each back to back and after the same gap. On a VM every step of a cold call costs
several times its warm time (caches and TLBs refilled, a halted vCPU woken), in
every process; this shows by how much here.

Rounds of each server alternate, so a change in the machine's load hits both.

    python scripts/bench_cold.py [--ref DIR] [--calls 300] [--gap-ms 20] [--tree TREE]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_mcp
from bench_mcp import REPO, ROUND_CALLS, WARMUP_CALLS, StdioClient, find_ref, text_of

SMALL = text_of(4096)


def requests(ws: Path) -> dict[str, dict[str, Callable[[], tuple[str, dict[str, Any]]]]]:
    """request name -> server -> (method, params)."""
    return {
        "ping": {
            "corral": lambda: ("ping", {}),
            "reference": lambda: ("ping", {}),
        },
        "refused stat": {
            "corral": lambda: ("tools/call", {"name": "stat_file", "arguments": {"path": 5}}),
            "reference": lambda: ("tools/call", {"name": "get_file_info",
                                                 "arguments": {"path": 5}}),
        },
        "stat": {
            "corral": lambda: ("tools/call", {"name": "stat_file",
                                              "arguments": {"path": "read.txt"}}),
            "reference": lambda: ("tools/call", {"name": "get_file_info",
                                                 "arguments": {"path": str(ws / "read.txt")}}),
        },
    }


def answered(name: str, result: dict[str, Any]) -> None:
    """A fast wrong answer fails the run: a stat succeeds and says the file's size, a
    refused one is an error about the path argument."""
    text = " ".join(part.get("text", "") for part in result.get("content", []))
    if name == "stat":
        assert not result.get("isError") and str(len(SMALL)) in text, result
    elif name == "refused stat":
        assert result.get("isError") and "path" in text, result


def measure(
    servers: dict[str, StdioClient], make: dict[str, Callable[[], tuple[str, dict[str, Any]]]],
    name: str, calls: int, gap_s: float,
) -> dict[str, float]:
    """Median seconds a request takes, per server (bench_mcp's alternating rounds)."""
    sides = {label: functools.partial(_ask, server, make[label])
             for label, server in servers.items()}
    checks = dict.fromkeys(servers, lambda _i, result: answered(name, result))
    samples, _ = bench_mcp.measure(sides, checks, {}, calls, gap_s)
    return {label: statistics.median(times) for label, times in samples.items()}


def _ask(server: StdioClient, make: Callable[[], tuple[str, dict[str, Any]]], _i: int) -> Any:
    return server.request(*make())


def in_process(ws: Path, calls: int, gap_s: float) -> dict[str, tuple[float, float]]:
    """(back to back, after the gap) median seconds of the worker's stat code and of a
    bare os.stat, in this process (the --tree checkout's code: main puts it first on
    sys.path)."""
    from corral.calls.messages import CallRequest
    from corral.config import Limits
    from corral.fs import Root, Roots
    from corral.policy import Policy
    from corral.tools.base import Context
    from corral.tools.registry import execute

    root = Root(str(ws), mode="rw")
    context = Context(Roots(root, []), Limits(), Policy.from_dict({}))
    request = CallRequest("stat_file", {"path": "read.txt"})
    answer = execute(context, request)
    assert answer.ok and answer.result["size"] == len(SMALL), answer
    operations: dict[str, Callable[[], object]] = {
        "worker's stat_file code": lambda: execute(context, request),
        "os.stat": lambda: os.stat("read.txt", dir_fd=root.fd),
    }
    cells = {}
    for label, operation in operations.items():
        cells[label] = (_median(operation, calls * 10, 0.0), _median(operation, calls, gap_s))
    root.close()
    return cells


def _median(operation: Callable[[], object], calls: int, gap_s: float) -> float:
    for _ in range(WARMUP_CALLS):
        operation()
    times = []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        start = time.perf_counter()
        operation()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, help="where the reference server was npm-installed")
    parser.add_argument("--tree", type=Path, default=REPO, help="the corral checkout")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per request and mode")
    parser.add_argument("--gap-ms", type=float, default=20.0)
    args = parser.parse_args()
    entry = find_ref(args.ref)
    if entry is None:
        print("the reference server is not installed (see bench_mcp.py)", file=sys.stderr)
        return 2
    gap_s = args.gap_ms / 1000
    sys.path.insert(0, str(args.tree))
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp, "ws")
        ws.mkdir()
        (ws / "read.txt").write_text(SMALL)
        servers: dict[str, StdioClient] = {}
        try:
            servers["corral"] = StdioClient(
                [sys.executable, "-m", "corral", "serve", "--workspace", str(ws)], ws,
                args.tree, "bench_cold")
            servers["reference"] = StdioClient(
                ["node", str(entry), str(ws)], ws, args.tree, "bench_cold")
            rows = {}
            for name, make in requests(ws).items():
                rows[name] = (measure(servers, make, name, args.calls, 0.0),
                              measure(servers, make, name, args.calls, gap_s))
        finally:
            for server in servers.values():
                server.proc.kill()  # nothing left to ask it: no need to wait for a clean exit
                server.proc.wait()
        local = in_process(ws, args.calls, gap_s)
    us = 1e6
    print(f"{args.calls} timed calls per request, mode and server, in alternating rounds of "
          f"{ROUND_CALLS}; medians in microseconds; gap {args.gap_ms:g} ms; "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("| request | corral b2b | ref b2b | ratio | corral after gap | ref after gap | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, (warm, cold) in rows.items():
        print(f"| {name} | {warm['corral'] * us:.0f} | {warm['reference'] * us:.0f} | "
              f"{warm['corral'] / warm['reference']:.2f}x | {cold['corral'] * us:.0f} | "
              f"{cold['reference'] * us:.0f} | {cold['corral'] / cold['reference']:.2f}x |")
    print("\nstat - refused stat: the call past the server's own path\n")
    print("| mode | corral | reference |")
    print("|---|---|---|")
    for mode, index in (("back to back", 0), ("after gap", 1)):
        past = {side: rows["stat"][index][side] - rows["refused stat"][index][side]
                for side in ("corral", "reference")}
        print(f"| {mode} | {past['corral'] * us:.0f} | {past['reference'] * us:.0f} |")
    print("\nin this process, no server:\n")
    print("| operation | back to back | after gap | cold / warm |")
    print("|---|---|---|---|")
    for label, (warm_s, cold_s) in local.items():
        print(f"| {label} | {warm_s * us:.1f} | {cold_s * us:.1f} | {cold_s / warm_s:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
