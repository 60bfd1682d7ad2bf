"""What apply_patch costs against edit_file, through one Sandbox (real workers,
history on, durability "fsync" as by default, or --durability none):

- one hunk in a 100 KiB file: apply_patch against edit_file of the same change
  (target: at or under 1x), the hunk after an @@ line naming its function (as
  models write them) and after a bare @@;
- a patch of one hunk in each of 10 such files against one edit_file (target:
  under 10x);
- the in-process floor: the same one-file change with plain Python (read,
  str.replace, temp file, fsync, rename) and the patch parsed and located
  in-process (patch_format alone).

    python scripts/bench_patch.py [--n 200] [--durability fsync|none]

Cases are taken in turn (round robin), so a neighbour's load on the machine falls
on each alike; prints medians in microseconds and the ratios, from one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corral import Sandbox
from corral.config import SandboxOptions
from corral.tools.patch_format import apply_hunks, parse_patch

FILE_BYTES = 100 * 1024
FILES = 10


def source(tag: int) -> tuple[str, int]:
    """A 100 KiB Python-like file, and the function number edited in its middle."""
    lines: list[str] = []
    number = 0
    while sum(len(line) + 1 for line in lines) < FILE_BYTES:
        lines += [f"def function_{number}_{tag}(value):", f"    total = value * {number}",
                  "    return total", ""]
        number += 1
    return "\n".join(lines) + "\n", number // 2


def hunk(name: str, tag: int, number: int, new: str, scope: bool = True) -> str:
    """One changed line with context; `scope`: after an @@ line naming its function
    (as models write them), else a bare @@ and the function's line as context."""
    head = f"@@ def function_{number}_{tag}(value):\n" if scope else (
        f"@@\n def function_{number}_{tag}(value):\n")
    return (f"*** Update File: {name}\n{head}"
            f"-    total = value * {number}\n+    total = value * {new}\n"
            f"     return total\n")


def patch(*sections: str) -> str:
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--durability", choices=["fsync", "none"], default="fsync")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        texts = {}
        for tag in range(FILES):
            text, number = source(tag)
            texts[f"f{tag}.py"] = (text, tag, number)
        flip = [0]

        def rewrite() -> str:
            """Every file back to its text; the value each edit writes alternates, so
            the history's records differ as a model's would."""
            for name, (text, _, _) in texts.items():
                (ws / name).write_text(text)
            flip[0] ^= 1
            return str(7 + flip[0])

        with Sandbox(ws, options=SandboxOptions(durability=args.durability)) as sb:
            one_text, one_tag, one_number = texts["f0.py"]

            def edit() -> dict[str, object]:
                new = rewrite()
                return {"path": "f0.py", "old_string": f"    total = value * {one_number}\n",
                        "new_string": f"    total = value * {new}\n"}

            def one() -> dict[str, object]:
                return {"patch": patch(hunk("f0.py", one_tag, one_number, rewrite()))}

            def bare() -> dict[str, object]:
                return {"patch": patch(hunk("f0.py", one_tag, one_number, rewrite(), False))}

            def ten() -> dict[str, object]:
                new = rewrite()
                return {"patch": patch(*(hunk(name, tag, number, new)
                                         for name, (_, tag, number) in texts.items()))}

            cases: dict[str, tuple[str, Callable[[], dict[str, object]]]] = {
                "edit_file, one line": ("edit_file", edit),
                "apply_patch, one hunk": ("apply_patch", one),
                "apply_patch, hunk, bare @@": ("apply_patch", bare),
                f"apply_patch, {FILES} files": ("apply_patch", ten),
            }
            times: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.n):
                for name, (tool, arguments) in cases.items():
                    given = arguments()
                    start = time.perf_counter()
                    answer = sb.call(tool, given)
                    times[name].append(time.perf_counter() - start)
                    assert answer["ok"], answer
        floor_write = in_process_write(ws / "f0.py", one_text, one_number, args)
        floor_patch = in_process_patch(
            one_text, patch(hunk("f0.py", one_tag, one_number, "7")), args.n)
    medians = {name: median_us(spent) for name, spent in times.items()}
    edit_us = medians["edit_file, one line"]
    print(f"one change in a {FILE_BYTES // 1024} KiB file through a Sandbox (history on, "
          f"durability {args.durability}), {args.n} calls each, median:")
    for name, value in medians.items():
        print(f"  {name:28} {value:8.0f} us  {value / edit_us:5.2f}x edit_file")
    print(f"  {'in-process write (floor)':28} {floor_write:8.0f} us  "
          f"{floor_write / edit_us:5.2f}x edit_file")
    print(f"  {'in-process parse+locate':28} {floor_patch:8.0f} us  "
          f"{floor_patch / edit_us:5.2f}x edit_file")


def in_process_write(path: Path, text: str, number: int, args: argparse.Namespace) -> float:
    """The floor: the same edit with plain Python, in this process."""
    samples = []
    for _ in range(args.n):
        path.write_text(text)
        start = time.perf_counter()
        data = path.read_text()
        data = data.replace(f"    total = value * {number}\n", "    total = value * 7\n", 1)
        temp = path.with_name(f".tmp-{os.getpid()}")
        with open(temp, "w") as handle:
            handle.write(data)
            if args.durability == "fsync":
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, path)
        samples.append(time.perf_counter() - start)
    return median_us(samples)


def in_process_patch(text: str, one: str, n: int) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        apply_hunks(text, parse_patch(one)[0])
        samples.append(time.perf_counter() - start)
    return median_us(samples)


if __name__ == "__main__":
    main()
