"""Does a change slow a call? Two corral checkouts in one run, call by call.

The base (the commit a change started from) and the change are each served by
`corral serve` over the same workspace and driven by the same stdio MCP client
(bench_mcp's), in alternating rounds of 20 calls, so a change in the machine's
load hits both alike. Per operation (bench_mcp's rows: write a new 4 KiB file,
overwrite 4 KiB, an edit in a 100 KiB file, mkdir, read 4 KiB and 1 MiB, list
1,000 files with their sizes, stat, write 1 MiB), for each side:

- the median wall time of a call (what a user waits; on a shared VM it moves by a
  third from run to run, so it is the weakest of the four);
- CPU per call: every process of the server (host, zygote, workers), from
  /proc/<pid>/task/*/schedstat in nanoseconds, and the host's share; and, in a
  second table, each side's user and system time (the interpreter's work against
  the kernel's), host and workers apart;
- system calls per call, host and its children (workers) apart: `strace -c -f`
  attached to the running server for a separate pass of calls (strace slows
  every call, so no time is taken then), the polls and yields of a spin left out;
- answer bytes: the size of one answer on the wire;

and the ratio new / base of each. CPU and system calls barely move with the
machine's load: a change that adds work shows there even when wall time does not.
Every answer is checked (bench_mcp's checks): a fast wrong answer fails the run.

Each checkout runs at equal work by default: `durability = "none"` and
`--no-structured-text` where it knows them (as bench_mcp's `corral (equal)`);
`--defaults` runs both at their own defaults instead. `--ref DIR` adds the
reference MCP filesystem server (installed there with npm, see bench_mcp) to the
same rounds, and its column; `--gap-ms` also runs every row with an idle pause
before each call, beside the floor of one cross-process round trip after the
same pause.

A checkout is a directory or any commit of this repository (exported with
`git archive` into a temporary directory; `git worktree add` of one works too):

    python scripts/bench_regress.py --base 26f3202 [--new .] [--ref DIR] [--calls 200]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_gap import descendants, pipe_round_trip, tree_cpu
from bench_mcp import (
    BIG_CALLS_DIVISOR,
    REPO,
    ROUND_CALLS,
    Op,
    StdioClient,
    configs,
    corral_server,
    find_ref,
    make_workspace,
    measure,
    operations,
)

ROWS = ("write 4 KiB", "overwrite 4 KiB", "edit in 100 KiB", "mkdir", "read 4 KiB",
        "read 1 MiB text", "list 1,000 files, with sizes", "stat", "write 1 MiB")
STRACE_CALLS = 40  # calls per side counted under strace (a quarter of it for big rows)
FLOOR_CALLS = 400


@contextlib.contextmanager
def exported(spec: str) -> Iterator[Path]:
    """A checkout: `spec` itself if it is a directory, else that commit exported."""
    if Path(spec).is_dir():
        yield Path(spec).resolve()
        return
    with tempfile.TemporaryDirectory(prefix=f"bench-regress-{spec[:12]}-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", spec],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def user_sys(pids: list[int]) -> list[float]:
    """User and system CPU seconds of `pids` (/proc/<pid>/stat: in clock ticks,
    coarse, but it tells the interpreter's work from the kernel's)."""
    total = [0.0, 0.0]
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total[0] += int(fields[11]) * TICK_S
            total[1] += int(fields[12]) * TICK_S
    return total


class HostMeter:
    """CPU seconds of a server's tree (what measure() subtracts round by round),
    keeping aside the host's own share of each round, and the user and system
    time of the host and of the rest (host user, host sys, workers user, sys)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.host = 0.0
        self.split = [0.0, 0.0, 0.0, 0.0]
        self._before: tuple[float, list[float]] | None = None

    def _split(self) -> list[float]:
        return user_sys([self.pid]) + user_sys(descendants(self.pid))

    def __call__(self) -> float:
        total, host = tree_cpu(self.pid)
        if self._before is None:  # measure() reads before, then after, a round
            self._before = host, self._split()
        else:
            self.host += host - self._before[0]
            self.split = [sum(pair) for pair in zip(
                self.split, (after - before for after, before in zip(
                    self._split(), self._before[1], strict=True)), strict=True)]
            self._before = None
        return total


def count_syscalls(
    pid: int, run: Callable[[int], Any], check: Callable[[int, Any], None], calls: int,
    keep: Path | None, label: str,
) -> tuple[float, float]:
    """(host, children) system calls per call: strace attached to the host (every
    thread) and, apart, to each process below it (following their forks)."""
    out = {}
    tracers = []
    with tempfile.TemporaryDirectory(prefix="bench-regress-strace-") as tmp:
        for part, pids in (("host", [pid]), ("workers", descendants(pid))):
            if not pids:
                continue
            out[part] = Path(tmp, part)
            argv = ["strace", "-f", "-c", "-q", "-o", str(out[part])]
            for traced in pids:
                argv += ["-p", str(traced)]
            tracers.append(subprocess.Popen(argv, stderr=subprocess.DEVNULL))
        _wait_traced([pid, *descendants(pid)])
        for i in range(calls):
            check(i, run(i))
        for tracer in tracers:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=30)
        counts = {}
        for part, path in out.items():
            summary = path.read_text()
            counts[part] = _total(summary) / calls
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{label}-{part}.txt").write_text(summary)
    return counts.get("host", 0.0), counts.get("workers", 0.0)


def _wait_traced(pids: list[int]) -> None:
    """Until every thread of `pids` has its tracer (strace attaches one by one)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pending = 0
        for pid in pids:
            with contextlib.suppress(OSError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
                    pending += "TracerPid:\t0\n" in status
        if not pending:
            return
        time.sleep(0.01)
    raise RuntimeError("strace did not attach")


# The polls and yields of a spin (the host waiting for an answer, a worker for its next
# request, each up to a fixed time) count how long the other side took, not work: left
# out, so the count is the same from run to run.
SPIN_SYSCALLS = ("poll", "sched_yield")


def _total(summary: str) -> int:
    """The calls of `strace -c`'s table, but a spin's (SPIN_SYSCALLS)."""
    total = 0
    for line in summary.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] not in (
                "total", *SPIN_SYSCALLS):
            total += int(fields[3])
    return total


@dataclass
class Cell:
    median: float
    cpu: float
    host: float
    syscalls: tuple[float, float]  # host, workers
    answer: int
    split: list[float]  # per call: host user, host sys, workers user, workers sys


def run_row(
    name: str, op: Op, servers: dict[str, StdioClient], ref: StdioClient | None,
    args: argparse.Namespace, gap_s: float,
) -> dict[str, Cell]:
    sides: dict[str, Callable[[int], Any]] = {
        label: lambda i, server=server: server.call(*op.corral(i))
        for label, server in servers.items()}
    checks: dict[str, Callable[[int, Any], None]] = dict.fromkeys(servers, op.check_corral)
    clients = dict(servers)
    if ref is not None:
        sides["ref"] = lambda i: ref.call(*op.ref(i))
        checks["ref"] = op.check_ref
        clients["ref"] = ref
    meters = {label: HostMeter(client.proc.pid) for label, client in clients.items()}
    calls = max(ROUND_CALLS, args.calls // BIG_CALLS_DIVISOR if op.big else args.calls)
    samples, cpu = measure(sides, checks, dict(meters), calls, gap_s)
    cells = {}
    for label, client in clients.items():
        syscalls = (0.0, 0.0)
        if not gap_s and args.strace_calls:
            counted = max(2, args.strace_calls // BIG_CALLS_DIVISOR if op.big
                          else args.strace_calls)
            syscalls = count_syscalls(client.proc.pid, sides[label], checks[label], counted,
                                      args.keep_strace, f"{name}-{label}".replace(" ", "_"))
        count = len(samples[label])
        cells[label] = Cell(statistics.median(samples[label]), cpu[label],
                            meters[label].host / count, syscalls, client.answer_bytes,
                            [part / count for part in meters[label].split])
    return cells


def table(rows: list[tuple[str, dict[str, Cell]]], with_ref: bool, counted: bool) -> list[str]:
    us = 1e6
    header = ["operation", "wall base", "wall new", "new/base", "CPU base (host)",
              "CPU new (host)", "new/base"]
    if counted:
        header += ["syscalls base (host+workers)", "syscalls new (host+workers)", "new/base"]
    header += ["answer bytes base", "new", "new/base"]
    if with_ref:
        header += ["wall ref", "CPU ref", "new/ref wall", "new/ref CPU"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, cells in rows:
        base, new = cells["base"], cells["new"]
        row = [name, f"{base.median * us:,.0f}", f"{new.median * us:,.0f}",
               f"{new.median / base.median:.2f}x",
               f"{base.cpu * us:,.0f} ({base.host * us:,.0f})",
               f"{new.cpu * us:,.0f} ({new.host * us:,.0f})", f"{new.cpu / base.cpu:.2f}x"]
        if counted:
            old, now = sum(base.syscalls), sum(new.syscalls)
            row += [f"{old:.0f} ({base.syscalls[0]:.0f}+{base.syscalls[1]:.0f})",
                    f"{now:.0f} ({new.syscalls[0]:.0f}+{new.syscalls[1]:.0f})",
                    f"{now / old:.2f}x" if old else ""]
        row += [f"{base.answer:,}", f"{new.answer:,}", f"{new.answer / base.answer:.2f}x"]
        if with_ref:
            ref = cells["ref"]
            row += [f"{ref.median * us:,.0f}", f"{ref.cpu * us:,.0f}",
                    f"{new.median / ref.median:.2f}x", f"{new.cpu / ref.cpu:.2f}x"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def split_table(rows: list[tuple[str, dict[str, Cell]]]) -> list[str]:
    """Where each side's CPU goes: the interpreter (user) or the kernel (sys)."""
    header = ["operation", "base: host user/sys", "workers user/sys", "new: host user/sys",
              "workers user/sys"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, cells in rows:
        row = [name]
        for side in ("base", "new"):
            part = [f"{value * 1e6:,.0f}" for value in cells[side].split]
            row += [f"{part[0]} / {part[1]}", f"{part[2]} / {part[3]}"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the checkout a change started from "
                        "(a directory or a commit)")
    parser.add_argument("--new", default=str(REPO), help="the change (default: this checkout)")
    parser.add_argument("--ref", type=Path, help="also the reference server installed here")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per small row")
    parser.add_argument("--strace-calls", type=int, default=STRACE_CALLS,
                        help="calls counted under strace per small row (0: no count)")
    parser.add_argument("--keep-strace", type=Path, metavar="DIR",
                        help="keep each side's strace -c summary here")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="also run every row with this idle pause before each call")
    parser.add_argument("--defaults", action="store_true",
                        help="each checkout at its defaults, not at equal work")
    parser.add_argument("--no-history", action="store_true",
                        help="both checkouts with [history] enabled = false: the work the "
                        "reference does, which keeps no undo copies")
    parser.add_argument("--only", help="run the rows whose name contains this")
    parser.add_argument("--dir", help="where to make the workspace (default: the temp dir)")
    args = parser.parse_args()
    if args.calls % ROUND_CALLS or args.calls <= 0:
        parser.error(f"--calls must be a positive multiple of {ROUND_CALLS}")
    ref_entry = find_ref(args.ref) if args.ref else None
    if args.ref and ref_entry is None:
        parser.error(f"no reference server in {args.ref}; see bench_mcp's docstring")
    modes = [("back to back", 0.0)] + ([(f"{args.gap_ms:g} ms gaps", args.gap_ms / 1e3)]
                                       if args.gap_ms else [])
    results: dict[str, list[tuple[str, dict[str, Cell]]]] = {}
    load = os.getloadavg()[0]
    with (exported(args.base) as base, exported(args.new) as new,
          tempfile.TemporaryDirectory(prefix="bench-regress-", dir=args.dir) as tmp):
        ws = Path(tmp, "ws")
        ws.mkdir()
        make_workspace(ws)
        servers: dict[str, StdioClient] = {}
        ref = None
        try:
            for label, tree in (("base", base), ("new", new)):
                config = configs(tmp, tree, label)[0 if args.defaults else 1]
                if args.no_history:
                    config.write_text(config.read_text().replace(
                        "[history]\n", "[history]\nenabled = false\n"))
                servers[label] = corral_server(ws, config, tree, equal=not args.defaults)
            if ref_entry is not None:
                ref = StdioClient(["node", str(ref_entry), str(ws)], ws)
            ops = operations(ws)
            for mode, gap_s in modes:
                for name in ROWS:
                    if not args.only or args.only in name:
                        results.setdefault(mode, []).append(
                            (name, run_row(name, ops[name], servers, ref, args, gap_s)))
        finally:
            for server in [*servers.values(), *([ref] if ref else [])]:
                server.close()
    print(f"base {args.base}, new {args.new}, {'defaults' if args.defaults else 'equal work'}"
          f"{', history off' if args.no_history else ''}; "
          f"{args.calls} timed calls per small row ({args.calls // BIG_CALLS_DIVISOR} for the "
          f"1 MiB rows and the listing) and side in alternating rounds of {ROUND_CALLS}, every "
          f"answer checked; wall: median µs; CPU: µs per call of every process of the server "
          f"(the host's share); syscalls per call from a separate pass of "
          f"{args.strace_calls} calls under strace -c -f; load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    for mode, rows in results.items():
        print(f"\n{mode}:\n")
        print("\n".join(table(rows, ref is not None, counted=mode == "back to back"
                              and args.strace_calls > 0)))
        print(f"\n{mode}, CPU µs per call by where it goes (user: the interpreter, sys: "
              f"the kernel; from /proc/<pid>/stat, in {TICK_S * 1e3:g} ms ticks):\n")
        print("\n".join(split_table(rows)))
    if args.gap_ms:
        trip = pipe_round_trip(FLOOR_CALLS // 4, args.gap_ms / 1e3)
        print(f"\nfloor: one round trip to another process over a pipe after a "
              f"{args.gap_ms:g} ms pause, in Python: {trip * 1e6:.0f} µs (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
