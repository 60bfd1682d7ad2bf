"""What history costs: a 4 KiB write, a 1 MiB write and an edit in a 100 KiB file,
through a Sandbox with history on and with history off, in one run (calls
alternate between the two so drift hits both), plus the same change done
directly in-process (a Root, no sandbox, no history) as the reference.

    python scripts/bench_history.py [--calls 100] [--cold 30] [--gap 0.05]

Back-to-back: calls one after another. Cold: an idle gap before each call (the
worker and the CPU have gone quiet). Reports medians in microseconds and what
history adds to the median.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral import Sandbox
from corral.config import HistoryOptions
from corral.fs import Expect, Root

KIB = 1024
EDIT_FILE_BYTES = 100 * KIB


def cases(n: int) -> dict[str, Callable[[int], tuple[str, dict[str, Any]]]]:
    """Each case: the i-th call (tool, arguments); successive calls change the file."""
    small = [("a" if i % 2 else "b") * 4 * KIB for i in range(2)]
    big = [("c" if i % 2 else "d") * KIB * KIB for i in range(2)]
    marks = ("MARK-A", "MARK-B")
    return {
        "write 4 KiB": lambda i: ("write_file", {"path": "small.txt", "content": small[i % 2]}),
        "write 1 MiB": lambda i: ("write_file", {"path": "big.txt", "content": big[i % 2]}),
        "edit in 100 KiB": lambda i: ("edit_file", {
            "path": "edit.txt", "old_string": marks[i % 2], "new_string": marks[1 - i % 2]}),
    }


def seed(workspace: Path) -> None:
    line = "some text of an ordinary source file, line by line\n"
    body = line * (EDIT_FILE_BYTES // len(line))
    (workspace / "edit.txt").write_text(body[: len(body) // 2] + "MARK-A\n" + body[len(body) // 2:])
    for name in ("small.txt", "big.txt"):
        (workspace / name).write_text("seed\n")


def direct(root: Root, tool: str, arguments: dict[str, Any]) -> None:
    """The same change in-process, without a sandbox or history."""
    path = arguments["path"]
    if tool == "write_file":
        root.write_atomic(path, arguments["content"].encode())
    else:
        data = root.read_bytes(path, max_file_bytes=1 << 26).decode()
        new = data.replace(arguments["old_string"], arguments["new_string"], 1)
        root.write_atomic(path, new.encode(), expect=Expect(content=data.encode()))


def measure(calls: int, gap: float, base: Path) -> dict[str, dict[str, float]]:
    spaces = {name: base / name for name in ("direct", "off", "on")}
    for space in spaces.values():
        space.mkdir()
        seed(space)
    results: dict[str, dict[str, list[float]]] = {}
    root = Root(str(spaces["direct"]))
    off = Sandbox(spaces["off"], history=HistoryOptions(enabled=False))
    on = Sandbox(spaces["on"], history=HistoryOptions(path=str(base / "store")))
    try:
        for label, make in cases(calls).items():
            times: dict[str, list[float]] = {"direct": [], "off": [], "on": []}
            for i in range(calls):
                tool, arguments = make(i)
                order = ("off", "on", "direct") if i % 2 else ("on", "off", "direct")
                for who in order:
                    if gap:
                        time.sleep(gap)
                    start = time.perf_counter()
                    if who == "direct":
                        direct(root, tool, arguments)
                    else:
                        response = (on if who == "on" else off).call(tool, arguments)
                        assert response["ok"], response
                    times[who].append(time.perf_counter() - start)
            results[label] = times
    finally:
        off.close()
        on.close()
        root.close()
    return {label: {who: statistics.median(t) * 1e6 for who, t in times.items()}
            for label, times in results.items()}


def report(title: str, medians: dict[str, dict[str, float]]) -> None:
    print(f"\n{title} (median us)")
    print("| case | in-process | sandbox, history off | sandbox, history on | history adds |")
    print("|---|---:|---:|---:|---:|")
    for label, m in medians.items():
        added = (m["on"] / m["off"] - 1) * 100
        print(f"| {label} | {m['direct']:.0f} | {m['off']:.0f} | {m['on']:.0f} | {added:+.1f}% |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100, help="back-to-back calls per case")
    parser.add_argument("--cold", type=int, default=30, help="cold calls per case")
    parser.add_argument("--gap", type=float, default=0.05, help="idle seconds before a cold call")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm"
        warm.mkdir()
        report(f"back-to-back, {args.calls} calls per case", measure(args.calls, 0.0, warm))
        cold = Path(tmp) / "cold"
        cold.mkdir()
        report(f"cold ({args.gap * 1000:.0f} ms idle before each), {args.cold} calls per case",
               measure(args.cold, args.gap, cold))


if __name__ == "__main__":
    main()
