"""Directory-move race: while move_file renames a big tree `t` to `.aws`, another
worker writes `t/credentials`. Every entry of a moved tree is checked at its new
name (`.aws/credentials` is denied), so the write must land either before the
move's check (the move is refused) or after its rename (in a new `t`): never
inside the tree as it is renamed. Any `.aws/credentials` after a round is a leak.

    python scripts/race_move.py [--seconds 60] [--files 3000]

tests/test_move_race.py runs a short, fixed-round version of `race`.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral import Sandbox


def make_tree(ws: Path, files: int) -> None:
    for name in ("t", ".aws"):
        shutil.rmtree(ws / name, ignore_errors=True)
    tree = ws / "t"
    for index in range(files):
        sub = tree / f"d{index // 100:03d}"
        if index % 100 == 0:
            sub.mkdir(parents=True)
        (sub / f"f{index:05d}").write_bytes(b"x")


def move_seconds(sb: Sandbox, ws: Path, files: int) -> float:
    """How long one uncontended move of the tree takes here (it sets the write's delays)."""
    make_tree(ws, files)
    started = time.perf_counter()
    result = sb.call("move_file", {"source": "t", "destination": ".aws"})
    assert result["ok"], result
    return time.perf_counter() - started


def one_round(sb: Sandbox, ws: Path, files: int, delay: float) -> str:
    make_tree(ws, files)
    moved: dict[str, Any] = {}
    mover = threading.Thread(
        target=lambda: moved.update(sb.call("move_file", {"source": "t", "destination": ".aws"}))
    )
    mover.start()
    time.sleep(delay)
    wrote = sb.call("write_file", {"path": "t/credentials", "content": "stolen"})
    mover.join()
    assert wrote["ok"], wrote
    if (ws / ".aws" / "credentials").exists():
        return "leak"
    if moved["ok"]:
        return "moved"
    assert moved["error"]["code"] == "path_denied", moved
    return "refused"


def race(base: Path, *, files: int, rounds: int | None = None, seconds: float | None = None,
         seed: int = 0) -> Counter[str]:
    """Rounds with the write at a random moment within ~1.5 moves' time."""
    ws = base / "ws"
    ws.mkdir()
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    with Sandbox(ws, workers=2) as sb:
        window = 1.5 * move_seconds(sb, ws, files)
        end = time.monotonic() + (seconds or 0)
        while (rounds is not None and sum(outcomes.values()) < rounds) or (
            seconds is not None and time.monotonic() < end
        ):
            outcomes[one_round(sb, ws, files, rng.uniform(0, window))] += 1
    outcomes["window_ms"] = round(window * 1000)
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--files", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        outcomes = race(Path(base), files=args.files, seconds=args.seconds)
    print(dict(outcomes))
    return 1 if outcomes["leak"] else 0


if __name__ == "__main__":
    sys.exit(main())
