"""Files of any size: read_file windows and grep over a generated file of 2 GiB (by
default), beside the shell tools that do the same, with the peak RSS of the host and
of every worker. Each figure is the median of --runs warm runs (the file stays in
the page cache); the file is deleted afterwards.

    python scripts/bench_huge.py [--dir /var/tmp] [--gib 2] [--runs 5]

Budgets: the last 100 lines <= 50 ms; lines 10,000,000-10,000,100 <= 2x
`tail -n +N FILE | head -n 101`; grep >= 50% of `grep -c`'s throughput; host and
worker peak RSS < 64 MiB.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral import Sandbox

MiB = 1024 * 1024
LINE = int(os.environ.get("BENCH_LINE", "10000000"))
NEEDLE = "NEEDLE-7f3a"  # a few lines hold it: grep reads the whole file


def generate(path: Path, size: int) -> int:
    """Log-like lines (some non-ASCII) up to `size` bytes, a NEEDLE line every
    2 million; returns the line count."""
    number = 0
    with path.open("wb") as out:
        written = 0
        while written < size:
            block = []
            for n in range(number, number + 10_000):
                tag = f" {NEEDLE}" if n % 2_000_000 == 1_999_999 else ""
                block.append(f"{n + 1} 2026-12-02T03:{n // 60 % 60:02d}:{n % 60:02d} INFO "
                             f"worker={n % 997:03d} request handled path=/api/v1/items/{n * 7} "
                             f"status=200 été{tag}\n")
            data = "".join(block).encode()
            out.write(data)
            written += len(data)
            number += 10_000
    return number


def timed(run: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def shell(command: str) -> Callable[[], object]:
    return lambda: subprocess.run(command, shell=True, check=True, capture_output=True)


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").iterdir():
            children = (task / "children").read_text().split()
            found += map(int, children)
            todo += map(int, children)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corral-huge-", dir=options.dir))
    try:
        path = work / "big.log"
        lines = generate(path, int(options.gib * 1024 * MiB))
        size = path.stat().st_size
        assert lines > LINE + 100, "the file is too small for the line window"
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm
        rows = []
        with Sandbox(work) as sb:
            def call(tool: str, **arguments: object) -> dict[str, object]:
                answer = sb.call(tool, arguments)
                assert answer["ok"], answer
                return answer

            tail = call("read_file", path="big.log", offset=-100)["result"]
            assert tail["lines_read"] == 100 and tail["start_line"] == -100  # type: ignore[index]
            ours = timed(lambda: call("read_file", path="big.log", offset=-100), options.runs)
            floor = timed(shell(f"tail -n 100 {path}"), options.runs)
            rows.append(("last 100 lines", ours, floor, "tail -n 100", "<= 50 ms"))

            window = call("read_file", path="big.log", offset=LINE, limit=101)["result"]
            assert window["content"].startswith(f"{LINE} ")  # type: ignore[index]

            def cold() -> None:  # a new mtime: no worker has marks for the file
                os.utime(path)
                call("read_file", path="big.log", offset=LINE, limit=101)

            ours = timed(cold, options.runs)
            floor = timed(shell(f"tail -n +{LINE} {path} | head -n 101"), options.runs)
            rows.append((f"lines {LINE:,}-{LINE + 100:,}, counted", ours, floor,
                         "tail -n +N \\| head", "<= 2x"))
            for _ in range(8):  # every worker has scanned it once
                call("read_file", path="big.log", offset=LINE, limit=101)
            ours = timed(lambda: call("read_file", path="big.log", offset=LINE + 101,
                                      limit=101), options.runs)
            rows.append(("the next page, from marks", ours, floor, "tail -n +N \\| head", ""))

            middle = call("read_file", path="big.log", byte_offset=size // 2, limit=100)
            assert middle["result"]["start_line"] is None  # type: ignore[index]
            ours = timed(lambda: call("read_file", path="big.log", byte_offset=size // 2,
                                      limit=100), options.runs)
            floor = timed(shell(f"tail -c +{size // 2} {path} | head -n 100"), options.runs)
            rows.append(("100 lines at byte size/2", ours, floor, "tail -c +B \\| head", ""))

            found = call("grep", pattern=NEEDLE, path="big.log")["result"]
            assert len(found["matches"]) == lines // 2_000_000, found  # type: ignore[arg-type]
            ours = timed(lambda: call("grep", pattern=NEEDLE, path="big.log"), options.runs)
            floor = timed(shell(f"grep -c {NEEDLE} {path} || true"), options.runs)
            rows.append((f"grep {NEEDLE} (literal)", ours, floor, "grep -c", ">= 50% speed"))

            regex = r"worker=99[0-9] .*status=5\d\d"  # \d: searched as text, decoded
            ours = timed(lambda: call("grep", pattern=regex, path="big.log"), options.runs)
            floor = timed(shell(f"grep -cP '{regex}' {path} || true"), options.runs)
            rows.append(("grep with \\d (decoded)", ours, floor, "grep -cP", ""))

            workers = {pid: peak_rss_kib(pid) for pid in descendants(os.getpid())}
        host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        shutil.rmtree(work)
    print(f"file: {size / MiB / 1024:.2f} GiB, {lines:,} lines, page cache warm, "
          f"median of {options.runs}")
    print("| what | corral | shell | shell command | ratio | budget |\n|---|---|---|---|---|---|")
    for what, ours, floor, command, budget in rows:
        print(f"| {what} | {ours * 1000:.1f} ms | {floor * 1000:.1f} ms | `{command}` "
              f"| {ours / floor:.2f}x time, {floor / ours:.0%} speed | {budget} |")
    print(f"| peak RSS, host | {host / 1024:.1f} MiB | | | | < 64 MiB |")
    for pid, kib in sorted(workers.items()):
        print(f"| peak RSS, process {pid} (zygote/worker) | {kib / 1024:.1f} MiB | | | "
              "| < 64 MiB |")


if __name__ == "__main__":
    main()
