"""What tolerant matching costs: edit_file of one line in a 100 KiB source file
through a Sandbox (real workers, durability "none" so the disk does not hide
the difference), with old_string exact, and with it drifted (trailing spaces
dropped, and at the wrong indentation) so the ladder runs.

    python scripts/bench_match.py [--n 400] [--tree DIR]

--tree runs another checkout's corral (e.g. one without the ladder, to compare
the exact edit before and after); a tree without tolerant matching skips the
drifted cases. Prints the median microseconds per call, the cases taken in turn.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

FILE_BYTES = 100 * 1024
NEW = "    total = 0\n    return total"  # with a line ending: the CRLF check runs too


def source() -> tuple[str, str, str]:
    """A 100 KiB Python-like file with trailing spaces on one line, and the line
    (as it is, and as a model would copy it: stripped) to edit."""
    lines = []
    number = 0
    while sum(len(line) + 1 for line in lines) < FILE_BYTES:
        lines += [f"def function_{number}(value):", f"    total = value * {number}",
                  "    return total", ""]
        number += 1
    middle = (len(lines) // 8) * 4 + 1
    lines[middle] = lines[middle] + "  "
    return "\n".join(lines) + "\n", lines[middle], lines[middle].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    sys.path.insert(0, args.tree)
    from corral import Sandbox
    from corral.config import SandboxOptions

    text, line, drifted = source()
    with tempfile.TemporaryDirectory() as ws, Sandbox(
        ws, options=SandboxOptions(durability="none")
    ) as sandbox:
        target = Path(ws) / "big.py"
        spec = next(tool for tool in sandbox.tools() if tool["name"] == "edit_file")
        tolerant = "match" in spec["input_schema"]["properties"]
        cases: dict[str, tuple[str, dict[str, str]]] = {"exact": (line, {})}
        if tolerant:
            cases["exact, match='exact'"] = (line, {"match": "exact"})
            # two lines, so the drifted text is no substring of the file: the ladder runs
            cases["drifted: whitespace"] = (f"    {drifted}\n    return total", {})
            cases["drifted: indentation"] = (f"{drifted}\nreturn total", {})

        def rewrite() -> None:
            target.write_text(text)  # the same file each time, never a growing one

        def timed(old: str, extra: dict[str, str]) -> float:
            rewrite()
            start = time.perf_counter()
            answer = sandbox.call("edit_file", {"path": "big.py", "old_string": old,
                                                "new_string": NEW, **extra})
            assert answer["ok"], answer
            return (time.perf_counter() - start) * 1e6

        # round robin, so a neighbour's load on the machine falls on every case alike
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.n):
            for name, (old, extra) in cases.items():
                times[name].append(timed(old, extra))
        print(f"edit_file of one line in a {len(text) // 1024} KiB file through a Sandbox, "
              f"{args.n} calls each, median (corral from {args.tree}):")
        for name, spent in times.items():
            print(f"  {name:22} {statistics.median(spent):8.0f} us")
    in_process(text, cases, args.n)


def in_process(text: str, cases: dict[str, tuple[str, dict[str, str]]], n: int) -> None:
    """The matching alone: edit.apply over the same text, in this process."""
    from corral.tools.edit import Edit, apply

    print("  the same, edit.apply alone in this process:")
    for name, (old, extra) in cases.items():
        edits = [Edit(old, NEW, False)]
        tolerant = extra.get("match") != "exact"
        spent = []
        for _ in range(n):
            start = time.perf_counter()
            if tolerant:
                apply("big.py", text, edits)
            else:  # an older tree's apply has no such argument
                apply("big.py", text, edits, tolerant=False)
            spent.append((time.perf_counter() - start) * 1e6)
        print(f"  {name:22} {statistics.median(spent):8.0f} us")


if __name__ == "__main__":
    main()
