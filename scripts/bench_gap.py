"""Steady-state cost of `corral serve` calls, checkout against checkout, in one run.

Each checkout given with --tree (default: this one) gets its own `corral serve`
over the same workspace; rounds of 20 calls alternate between them, so a change
in the machine's load hits each alike. Per row and checkout: the median and p99
latency (and p99 / median), and the CPU per call of the server's processes (host,
zygote and workers, from /proc/<pid>/task/*/schedstat: nanoseconds, not ticks),
with the host's share. Two modes: back to back, and with an idle gap before each
call (every process has gone to sleep). Then the floor: the same system calls in
this process (open + read 4 KiB, stat) and a round trip to another process over
a pipe, in Python and, when a C compiler is there, in C.

    python scripts/bench_gap.py --tree /path/to/before --tree . [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_mcp import StdioClient, has, marker, text_of

REPO = Path(__file__).resolve().parent.parent
ROUND_CALLS = 20  # calls per checkout per round
WARMUP_CALLS = 20
# Back to back, each round starts with this many calls left untimed: the other
# checkouts' rounds were an idle gap for this one, and its first call would be a
# cold call counted as a back-to-back one (1 in ROUND_CALLS: the whole p99). Even,
# so an edit ends where it began.
ROUND_WARMUP_CALLS = 2
BIG_CALLS_DIVISOR = 4  # the 1 MiB read takes 10-50x longer: fewer calls
FLOOR_CALLS = 20_000
MIB = 1024 * 1024


SMALL = text_of(4096)
BIG = text_of(MIB)


# name -> (tool, arguments for call i, big row?)
ROWS: dict[str, tuple[str, Callable[[int], dict[str, Any]], bool]] = {
    "stat": ("stat_file", lambda i: {"path": "read.txt"}, False),
    "read 4 KiB": ("read_file", lambda i: {"path": "read.txt"}, False),
    "write 4 KiB": ("write_file", lambda i: {"path": "write.txt", "content": SMALL}, False),
    "edit in 100 KiB": ("edit_file", lambda i: {
        "path": "edit.txt", "old_string": marker(i)[0], "new_string": marker(i)[1]}, False),
    "read 1 MiB": ("read_file", lambda i: {"path": "big.txt", "limit": 100_000,
                                           "max_bytes": 4 * MIB}, True),
}


class Server(StdioClient):
    """`corral serve` of one checkout."""

    def __init__(self, tree: Path, ws: Path, config: Path, *extra: str) -> None:
        argv = [sys.executable, "-m", "corral", "serve", "--workspace", str(ws),
                "--config", str(config), *extra]
        super().__init__(argv, ws, tree, "bench_gap")

    def cpu(self) -> tuple[float, float]:
        return tree_cpu(self.proc.pid)


def tree_cpu(pid: int) -> tuple[float, float]:
    """(all, host) CPU seconds so far: the threads of `pid`, then its descendants'."""
    host = _schedstat(pid)
    total = host
    for child in descendants(pid):
        total += _schedstat(child)
    return total, host


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (corral's zygote and workers)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
            children = [int(child) for task in tasks for child in
                        Path(f"/proc/{parent}/task/{task}/children").read_text().split()]
        except OSError:
            continue
        found += children
        todo += children
    return found


def _schedstat(pid: int) -> float:
    """CPU seconds every thread of `pid` has run (0 if it is gone)."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                total += int(stat.read().split()[0])
    except OSError:
        pass
    return total / 1e9


def checked(name: str, ws: Path, i: int, result: dict[str, Any]) -> None:
    """A fast wrong answer fails the run."""
    answer = result.get("structuredContent") or {}
    if name == "read 1 MiB":
        assert answer.get("content") == BIG, "the 1 MiB read differs"
    elif name == "read 4 KiB":
        assert answer.get("content") == SMALL, "the 4 KiB read differs"
    elif name == "stat":
        assert answer.get("size") == len(SMALL), "stat size"
    elif name == "write 4 KiB":
        assert (ws / "write.txt").read_text() == SMALL, "write"
    else:
        assert marker(i)[1] in (ws / "edit.txt").read_text(), "edit"


def measure(
    servers: dict[str, Server], name: str, ws: Path, calls: int, gap_s: float
) -> dict[str, dict[str, float]]:
    tool, arguments, big = ROWS[name]
    calls = max(ROUND_CALLS, calls // BIG_CALLS_DIVISOR if big else calls)
    samples: dict[str, list[float]] = {label: [] for label in servers}
    cpu: dict[str, list[tuple[float, float]]] = {label: [] for label in servers}
    for server in servers.values():
        for i in range(WARMUP_CALLS):
            server.call(tool, arguments(i))
    for _ in range(calls // ROUND_CALLS):
        for label, server in servers.items():
            for i in range(0 if gap_s else ROUND_WARMUP_CALLS):
                server.call(tool, arguments(i))
            before = server.cpu()
            for i in range(ROUND_CALLS):
                if gap_s:
                    time.sleep(gap_s)
                start = time.perf_counter()
                result = server.call(tool, arguments(i))
                samples[label].append(time.perf_counter() - start)
                checked(name, ws, i, result)
            after = server.cpu()
            cpu[label].append(((after[0] - before[0]) / ROUND_CALLS,
                               (after[1] - before[1]) / ROUND_CALLS))
    cells = {}
    for label, times in samples.items():
        times.sort()
        median = statistics.median(times)
        cells[label] = {
            "p50": median, "p99": times[min(len(times) - 1, int(0.99 * len(times)))],
            "cpu": statistics.median(c[0] for c in cpu[label]),
            "host": statistics.median(c[1] for c in cpu[label]),
        }
    return cells


def floor_python(calls: int) -> dict[str, float]:
    """Median seconds of the floor operations in this process."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f")
        Path(path).write_text(SMALL)

        def read() -> None:
            fd = os.open(path, os.O_RDONLY)
            os.read(fd, 8192)
            os.close(fd)

        found = {"open + read 4 KiB": _median_of(read, calls),
                 "stat": _median_of(lambda: os.stat(path), calls)}
    found["pipe round trip"] = pipe_round_trip(calls // 4)
    return found


def _median_of(operation: Callable[[], object], calls: int, gap_s: float = 0.0) -> float:
    times = []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        start = time.perf_counter()
        operation()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pipe_round_trip(calls: int, gap_s: float = 0.0) -> float:
    """A byte to a child process over one pipe and back over another (each after
    an idle gap of `gap_s`: both processes asleep, as before a call after a pause)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import os\nwhile os.read(0, 1): os.write(1, b'x')"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
    )
    assert child.stdin is not None and child.stdout is not None
    out, back = child.stdin.fileno(), child.stdout.fileno()

    def trip() -> None:
        os.write(out, b"x")
        os.read(back, 1)

    try:
        return _median_of(trip, calls, gap_s)
    finally:
        child.stdin.close()
        child.wait()


C_FLOOR = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b;
  return (x > y) - (x < y); }
static double median(double *v, int n) { qsort(v, n, sizeof *v, cmp); return v[n / 2]; }
int main(int argc, char **argv) {
  int n = atoi(argv[2]); double *v = malloc(n * sizeof *v); char buf[8192]; struct stat st;
  for (int i = 0; i < n; i++) { double t = now(); int fd = open(argv[1], O_RDONLY);
    read(fd, buf, sizeof buf); close(fd); v[i] = now() - t; }
  printf("%g\n", median(v, n));
  for (int i = 0; i < n; i++) { double t = now(); stat(argv[1], &st); v[i] = now() - t; }
  printf("%g\n", median(v, n));
  int to[2], from[2]; pipe(to); pipe(from); fflush(stdout);
  pid_t child = fork();
  if (child == 0) { char c; close(to[1]); close(from[0]);  /* EOF once the parent is done */
    while (read(to[0], &c, 1) == 1) write(from[1], &c, 1); _exit(0); }
  close(to[0]); close(from[1]);
  for (int i = 0; i < n / 4; i++) { double t = now(); write(to[1], "x", 1);
    read(from[0], buf, 1); v[i] = now() - t; }
  close(to[1]); waitpid(child, NULL, 0);
  printf("%g\n", median(v, n / 4));
  return 0;
}
"""


def floor_c(calls: int) -> dict[str, float] | None:
    """The same three in C, if a C compiler is at hand; None otherwise."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        source, program, data = (os.path.join(tmp, name) for name in ("f.c", "f", "data"))
        Path(source).write_text(C_FLOOR)
        Path(data).write_text(SMALL)
        if subprocess.run([compiler, "-O2", "-o", program, source],
                          capture_output=True).returncode:
            return None
        out = subprocess.run([program, data, str(calls)], capture_output=True, text=True)
        values = [float(line) for line in out.stdout.split()]
    return dict(zip(("open + read 4 KiB", "stat", "pipe round trip"), values, strict=True))


def table(
    rows: list[tuple[str, dict[str, dict[str, float]]]], labels: list[str], base: str
) -> list[str]:
    """One row per operation; the last column compares the last checkout with `base`."""
    ms = 1e3
    header = ["operation"]
    for label in labels:
        header += [f"{label} p50", "p99", "p99/p50", "CPU/call (host)"]
    compared = base != labels[-1]
    if compared:
        header.append(f"p50 {labels[-1]} / {base}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, cells in rows:
        row = [name]
        for label in labels:
            cell = cells[label]
            row += [f"{cell['p50'] * ms:.3f}", f"{cell['p99'] * ms:.3f}",
                    f"{cell['p99'] / cell['p50']:.1f}x",
                    f"{cell['cpu'] * ms:.3f} ({cell['host'] * ms:.3f})"]
        if compared:
            row.append(f"{cells[labels[-1]]['p50'] / cells[base]['p50']:.2f}x")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", type=Path,
                        help="a corral checkout (repeat; default: this one)")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per small row")
    parser.add_argument("--gap-ms", type=float, default=20.0, help="idle gap in the cold mode")
    parser.add_argument("--only", help="run the rows whose name contains this")
    parser.add_argument("--durability", choices=("fsync", "none"), default="fsync")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor measures")
    parser.add_argument("--no-structured-text", action="store_true",
                        help="serve with --no-structured-text where the checkout has it "
                        "(older ones never repeat the text: the same answers)")
    parser.add_argument("--history-off", action="store_true",
                        help="also run the first checkout with [history] enabled = false")
    args = parser.parse_args()
    if args.calls % ROUND_CALLS or args.calls <= 0:
        parser.error(f"--calls must be a positive multiple of {ROUND_CALLS}")
    trees = [tree.resolve() for tree in args.tree or [REPO]]
    labels = [tree.name for tree in trees]
    if len(set(labels)) < len(labels):
        labels = [f"{index}:{label}" for index, label in enumerate(labels)]
    load = os.getloadavg()[0]
    results: dict[str, list[tuple[str, dict[str, dict[str, float]]]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gap-") as tmp:
        ws = Path(tmp, "ws")
        ws.mkdir()
        (ws / "read.txt").write_text(SMALL)
        (ws / "big.txt").write_text(BIG)
        (ws / "edit.txt").write_text(text_of(100 * 1024, marker_line=800))
        runs = list(zip(trees, labels, [True] * len(trees), strict=True))
        if args.history_off:
            runs.insert(0, (trees[0], f"{labels[0]} (history off)", False))
            labels.insert(0, runs[0][1])
        servers = {}
        try:
            for index, (tree, label, history) in enumerate(runs):
                config = Path(tmp, f"corral-{index}.toml")
                config.write_text(
                    f"[limits]\nmax_read_bytes = {4 * MIB}\n"
                    f'[history]\nenabled = {str(history).lower()}\n'
                    f'path = "{tmp}/history-{index}"\n'
                    f'[sandbox]\ndurability = "{args.durability}"\n'
                )
                extra = ["--no-structured-text"] if args.no_structured_text and has(
                    tree, "corral/faces/cli.py", "--no-structured-text") else []
                servers[label] = Server(tree, ws, config, *extra)
            for mode, gap in (("back to back", 0.0), (f"{args.gap_ms:g} ms gaps", args.gap_ms)):
                for name in ROWS:
                    if not args.only or args.only in name:
                        cells = measure(servers, name, ws, args.calls, gap / 1e3)
                        results.setdefault(mode, []).append((name, cells))
        finally:
            for server in servers.values():
                server.close()
    print(f"{args.calls} timed calls per small row ({args.calls // BIG_CALLS_DIVISOR} for "
          f"1 MiB) and checkout, alternating rounds of {ROUND_CALLS}; durability "
          f"{args.durability}{'; --no-structured-text' if args.no_structured_text else ''}; "
          f"times in ms; CPU/call: all the server's processes (the host's "
          f"share); load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    for mode, rows in results.items():
        print(f"\n{mode}:\n")
        print("\n".join(table(rows, labels, labels[1 if args.history_off else 0])))
    if not args.no_floor:
        python, c = floor_python(FLOOR_CALLS), floor_c(FLOOR_CALLS)
        print("\nfloor (median µs, in one process; a round trip to another process):\n")
        print("| operation | Python | C |\n|---|---|---|")
        for name, seconds in python.items():
            in_c = f"{c[name] * 1e6:.1f}" if c else "n/a"
            print(f"| {name} | {seconds * 1e6:.1f} | {in_c} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
