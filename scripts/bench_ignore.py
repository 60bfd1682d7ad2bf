"""What ignore files save and cost, through a Sandbox (the rules read and applied in
the confined worker), ratios from one run:

- a repository with a 20,000-file node_modules/ (ignored by its .gitignore) and
  200 source files: a recursive listing, search_files and grep with the ignore
  rules against include_ignored=true (every file walked, as without ignore
  support), and whether the ignored listing fits the default limits whole;
- the same 20,200 files with no ignore file at all: the rules' cost against
  include_ignored=true, through the Sandbox (wall time) and, steadier on a busy
  machine, the tool run in this process (the least CPU time of the rounds).

    python scripts/bench_ignore.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral import Sandbox
from corral.calls.messages import CallRequest
from corral.config import Limits
from corral.fs import Root, Roots
from corral.policy import Policy
from corral.tools.base import Context
from corral.tools.registry import execute

MODULES, PER_MODULE = 1000, 20  # node_modules: 1000 packages of 20 files
SOURCES, PER_SOURCE = 20, 10  # src: 20 packages of 10 files
# Listings of the whole tree: the entry cap raised so that the full walk is measured.
WHOLE = Limits(max_list_entries=1_000_000, max_read_bytes=64 * 1024 * 1024,
               timeout_s=120.0)


def make_tree(base: Path, gitignore: bool) -> Path:
    base.mkdir()
    for package in range(MODULES):
        directory = base / "node_modules" / f"pkg{package}" / "lib"
        directory.mkdir(parents=True)
        for index in range(PER_MODULE):
            (directory / f"m{index}.js").write_text("module.exports = 1;\n")
    for package in range(SOURCES):
        directory = base / "src" / f"pkg{package}"
        directory.mkdir(parents=True)
        for index in range(PER_SOURCE):
            (directory / f"mod{index}.py").write_text("def needle():\n    return 1\n")
    if gitignore:
        (base / ".gitignore").write_text("node_modules/\n*.pyc\n__pycache__/\n")
    return base


def timed(call: Callable[[], dict]) -> float:
    start = time.perf_counter()
    answer = call()
    elapsed = time.perf_counter() - start
    assert answer["ok"], answer
    return elapsed


def compare(sb: Sandbox, rounds: int, tool: str, arguments: dict) -> tuple[float, float]:
    """Median seconds with the rules and with include_ignored, the two interleaved
    so that a neighbour's load on a shared machine falls on both alike."""
    calls = (lambda: sb.call(tool, arguments),
             lambda: sb.call(tool, {**arguments, "include_ignored": True}))
    for call in calls:
        call()  # warm: caches, a started worker
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for call, times in zip(calls, samples, strict=True):
            times.append(timed(call))
    return statistics.median(samples[0]), statistics.median(samples[1])


def in_process(tree: Path, rounds: int, tool: str, arguments: dict) -> tuple[float, float]:
    """Least CPU seconds of `tool` run here, with the rules and with include_ignored."""
    ctx = Context(Roots(Root(str(tree))), WHOLE, Policy())
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for index, extra in enumerate(({}, {"include_ignored": True})):
            start = time.process_time()
            answer = execute(ctx, CallRequest(tool, {**arguments, **extra}))
            best[index] = min(best[index], time.process_time() - start)
            assert answer.ok, answer
    return best[0], best[1]


CALLS = [
    ("list_directory", {"recursive": True, "max_entries": 1_000_000}),
    ("search_files", {"pattern": "**/*.py"}),
    ("grep", {"pattern": "needle", "max_results": 5000}),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_tree(Path(tmp) / "repo", gitignore=True)
        plain = make_tree(Path(tmp) / "plain", gitignore=False)
        with Sandbox(repo) as sb:  # default limits: does the ignored listing fit whole?
            listed = sb.call("list_directory", {"path": ".", "recursive": True})
        result = listed["result"]
        print(f"default limits, ignored listing: {result['count']} entries, truncated="
              f"{result['truncated']}, ignored={result['ignored']}, "
              f"{len(listed['text'])} chars of text")
        print(f"{'call':<16}{'ignored ms':>12}{'all ms':>10}{'speed-up':>10}")
        with Sandbox(repo, limits=WHOLE) as sb:
            for tool, arguments in CALLS:
                ignoring, everything = compare(sb, args.rounds, tool, arguments)
                print(f"{tool:<16}{ignoring * 1e3:>12.1f}{everything * 1e3:>10.1f}"
                      f"{everything / ignoring:>9.1f}x")
        print("no ignore files (20,200 files): the rules' cost")
        print(f"{'call':<16}{'rules ms':>12}{'off ms':>10}{'cost':>10}")
        with Sandbox(plain, limits=WHOLE) as sb:
            for tool, arguments in CALLS:
                ruled, off = compare(sb, args.rounds, tool, arguments)
                print(f"{tool:<16}{ruled * 1e3:>12.1f}{off * 1e3:>10.1f}"
                      f"{(ruled / off - 1) * 100:>+9.1f}%")
        print("the same, run in this process (least CPU time)")
        for tool, arguments in CALLS:
            ruled, off = in_process(plain, args.rounds, tool, arguments)
            print(f"{tool:<16}{ruled * 1e3:>12.1f}{off * 1e3:>10.1f}"
                  f"{(ruled / off - 1) * 100:>+9.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
