"""edit_file race: threads edit distinct lines of one file through a Sandbox's
workers at once, none with expected_version. An edit that loses the race between
its read and its write is applied again to the file as it is then (at most
edit.EDIT_TRIES reads), so every edit lands: any `conflict` answer, or a line
left unchanged at the end, is a failure.

    python scripts/race_edits.py [--edits 960] [--threads 8] [--workers 4]

tests/test_edit_conflict.py runs a short version (48 edits, 4 workers).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral import Sandbox


def race(edits: int, threads: int, workers: int) -> tuple[Counter[str], int, float]:
    """(answers by code, lines left unchanged, seconds)."""
    keys = [f"k{index}" for index in range(edits)]
    with tempfile.TemporaryDirectory() as directory:
        ws = Path(directory)
        target = ws / "settings.txt"
        target.write_text("".join(f"{key} = 0\n" for key in keys))
        started = time.perf_counter()
        with Sandbox(ws, workers=workers) as sb, ThreadPoolExecutor(threads) as pool:
            answers = list(pool.map(lambda key: sb.call("edit_file", {
                "path": "settings.txt", "old_string": f"{key} = 0",
                "new_string": f"{key} = 1"}), keys))
        took = time.perf_counter() - started
        lines = target.read_text().splitlines()
    codes = Counter("ok" if answer["ok"] else answer["error"]["code"] for answer in answers)
    return codes, sum(line.endswith(" = 0") for line in lines), took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=960)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    codes, left, took = race(args.edits, args.threads, args.workers)
    print(f"{args.edits} edits, {args.threads} threads, {args.workers} workers, {took:.1f} s: "
          f"{dict(codes)}; lines left unchanged: {left}")
    return 0 if codes["ok"] == args.edits and left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
