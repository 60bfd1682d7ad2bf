"""Writes tests/slow.txt, the table of the tests the fast loop leaves out, from a
run of the whole suite with every duration:

    python -m pytest -q --durations=0 --durations-min=0 > durations.txt
    python scripts/slow_tests.py durations.txt [--over 0.2]

A test is slow when its setup, call and teardown together take over `--over`
seconds; a function all of whose parameters are slow is listed once, by its id."""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

LIST = Path(__file__).resolve().parent.parent / "tests" / "slow.txt"
HEADER = """\
# The tests `python -m pytest -m "not slow"` (the fast loop) leaves out: each takes
# over about {over} s on a 2-core machine. One test id a line; a function's id without
# parameters stands for all of them. Written by scripts/slow_tests.py from a
# --durations run; a whole-suite run refuses an id that names no test.
"""
DURATION = re.compile(r"^([\d.]+)s (?:setup|call|teardown) +(.+)$")


def slow_ids(lines: list[str], over: float) -> list[str]:
    seconds: dict[str, float] = defaultdict(float)
    for line in lines:
        if found := DURATION.match(line):
            seconds[found[2]] += float(found[1])
    by_function: dict[str, list[str]] = defaultdict(list)
    for nodeid in seconds:
        by_function[nodeid.partition("[")[0]].append(nodeid)
    listed = []
    for function, nodeids in by_function.items():
        slow = [nodeid for nodeid in nodeids if seconds[nodeid] > over]
        listed += [function] if len(slow) == len(nodeids) else slow
    return sorted(listed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("durations", type=Path,
                        help="the output of pytest --durations=0 --durations-min=0")
    parser.add_argument("--over", type=float, default=0.2, help="seconds (default 0.2)")
    options = parser.parse_args()
    ids = slow_ids(options.durations.read_text().splitlines(), options.over)
    LIST.write_text(HEADER.format(over=options.over) + "".join(f"{nodeid}\n" for nodeid in ids))
    print(f"{LIST}: {len(ids)} entries")


if __name__ == "__main__":
    main()
