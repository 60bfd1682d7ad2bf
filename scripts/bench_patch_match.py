"""What locating a patch hunk costs against edit_file's match of the same text:
one hunk (two old lines, two new) in a 100 KiB source file, as apply_hunks
finds and applies it and as edit.apply finds and applies the same old and new
text, in this process, exact and drifted, LF and CRLF.

    python scripts/bench_patch_match.py [--n 400]

Prints the median microseconds of each and their ratio (patch / edit_file),
the cases taken in turn so a neighbour's load falls on both alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral.tools.edit import Edit, apply
from corral.tools.patch_format import FilePatch, Hunk, apply_hunks

FILE_BYTES = 100 * 1024
NEW = ["    total = 0", "    return total"]


def source(ending: str) -> tuple[str, list[str]]:
    """A 100 KiB Python-like file with trailing spaces on one line, and the two
    lines (as they are) a hunk replaces in its middle."""
    lines: list[str] = []
    size = number = 0
    while size < FILE_BYTES:
        block = [f"def function_{number}(value):", f"    total = value * {number}",
                 "    return total", ""]
        lines += block
        size += sum(len(line) + 1 for line in block)
        number += 1
    middle = (len(lines) // 8) * 4 + 1
    lines[middle] += "  "
    return ending.join(lines) + ending, lines[middle : middle + 2]


def cases() -> dict[str, tuple[str, list[str]]]:
    """name -> (the file, the old lines as the model sends them)."""
    lf, old = source("\n")
    crlf, _ = source("\r\n")
    stripped = [line.rstrip() for line in old]
    return {
        "exact, LF": (lf, old),
        "exact, CRLF": (crlf, old),
        "drifted: whitespace": (lf, stripped),
        "drifted: indentation": (lf, [line.strip() for line in stripped]),
    }


def both(text: str, old: list[str]) -> tuple[FilePatch, list[Edit]]:
    """The same change as a one-hunk patch and as edit_file's edit."""
    hunk = Hunk((), tuple([("-", line) for line in old] + [("+", line) for line in NEW]),
                False, 3)
    return (FilePatch("update", "big.py", None, (hunk,), None, 2),
            [Edit("\n".join(old), "\n".join(NEW), False)])


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400)
    args = parser.parse_args()
    runs: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {}
    for name, (text, old) in cases().items():
        patch, edits = both(text, old)
        assert apply_hunks(text, patch)[0] == apply("big.py", text, edits).text, name
        runs[name] = (lambda t=text, p=patch: apply_hunks(t, p),
                      lambda t=text, e=edits: apply("big.py", t, e))
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in runs}
    for _ in range(args.n):
        for name, (patch_run, edit_run) in runs.items():
            times[name][0].append(timed(patch_run))
            times[name][1].append(timed(edit_run))
    print(f"one hunk in a {FILE_BYTES // 1024} KiB file, in process, {args.n} runs each; "
          "median, and the fastest run (on a shared machine, the least disturbed):")
    print(f"  {'case':22} {'apply_hunks':>12} {'edit.apply':>12} {'ratio':>6}   "
          f"{'fastest':>7} {'fastest':>7} {'ratio':>6}")
    for name, (patch_times, edit_times) in times.items():
        patch_us, edit_us = statistics.median(patch_times), statistics.median(edit_times)
        fastest = min(patch_times), min(edit_times)
        print(f"  {name:22} {patch_us:9.0f} us {edit_us:9.0f} us {patch_us / edit_us:6.2f}   "
              f"{fastest[0]:7.0f} {fastest[1]:7.0f} {fastest[0] / fastest[1]:6.2f}")


if __name__ == "__main__":
    main()
