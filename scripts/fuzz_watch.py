"""Random changes behind corral's back, and a checkpoint after each round: the
watched checkpoint (sandbox/snapshot_watch.py) must be the tree. After every
round a whole walk against the new checkpoint (`diff`, which never uses the
watch) must find nothing, and now and then a forced rewind to one of the last
few checkpoints must give back exactly the tree it held.

    python scripts/fuzz_watch.py [--seeds 20] [--rounds 200] [--dir D]

tests/test_snapshots_watch.py runs two seeds of 12 rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from corral import Sandbox
from corral.config import HistoryOptions, Limits


def state(root: Path) -> dict[str, Any]:
    """Every entry beneath `root` but .git: a file's mode and bytes, a directory's
    mode, a link's target."""
    found: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            key = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[key] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                found[key] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return found


def random_changes(tree: Path, rng: random.Random, count: int) -> None:
    """`count` changes drawn from what a shell does, anywhere in the tree."""
    for _ in range(count):
        dirs = [Path(d) for d, _, _ in os.walk(tree)]
        files = [Path(d) / f for d, _, names in os.walk(tree) for f in names
                 if not (Path(d) / f).is_symlink()]
        here = rng.choice(dirs)
        op = rng.randrange(9)
        if op == 0 and files:
            rng.choice(files).write_text(f"{rng.random()}\n")
        elif op == 1:
            (here / f"n{rng.randrange(10**6)}").write_text("new\n")
        elif op == 2 and files:
            os.unlink(rng.choice(files))
        elif op == 3 and len(dirs) > 1:
            victim, target = rng.choice(dirs[1:]), rng.choice(dirs)
            if not target.is_relative_to(victim):
                os.rename(victim, target / f"m{rng.randrange(10**6)}")
        elif op == 4:
            (here / f"D{rng.randrange(10**6)}" / "x").mkdir(parents=True)
        elif op == 5 and len(dirs) > 1:
            shutil.rmtree(rng.choice(dirs[1:]))
        elif op == 6 and files:
            os.symlink(os.path.basename(rng.choice(files)), here / f"l{rng.randrange(10**6)}")
        elif op == 7 and files:
            os.chmod(rng.choice(files), rng.choice((0o600, 0o644, 0o755)))
        elif op == 8:
            os.chmod(here, rng.choice((0o700, 0o750, 0o755)))


def check_rounds(tree: Path, seed: int, rounds: int,
                 history: HistoryOptions | None = None) -> dict[str, Any]:
    """Rounds of random changes, each followed by a checkpoint that must be the tree
    (a whole walk finds nothing since), and now and then a forced rewind to a
    one of the last few. AssertionError, naming the seed and round, if not."""
    rng = random.Random(seed)
    with Sandbox(tree, history=history, limits=Limits(timeout_s=600)) as sb:
        made = [(sb.checkpoint("0"), state(tree))]
        watched, slowest = 0, 0.0
        for n in range(rounds):
            random_changes(tree, rng, rng.randrange(1, 6))
            made.append((sb.checkpoint(str(n)), state(tree)))
            watched += (sb.last_snapshot or {})["walked"] < len(made[-1][1])
            since = sb.diff(made[-1][0])
            assert since == {"changed": [], "added": [], "removed": []}, (seed, n, since)
            if rng.random() < 0.2:  # to one of the last few: a rewind to an old one
                # takes back, one by one, what the rewinds since wrote (docs/history.md)
                to, then = rng.choice(made[-4:])
                started = time.perf_counter()
                back = sb.rewind(to, force=True)
                took = time.perf_counter() - started
                slowest = max(slowest, took)
                assert back["ok"], (seed, n, back)
                assert state(tree) == then, f"seed {seed}, round {n}: rewind to {to}"
    return {"rounds": rounds, "watched": watched, "slowest_rewind_s": slowest}


def seed_tree(tree: Path) -> None:
    for d in range(6):
        (tree / f"d{d}" / "sub").mkdir(parents=True)
        for f in range(8):
            (tree / f"d{d}" / f"f{f}.txt").write_text(f"{d} {f}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--dir", help="where to make the trees (default: a temp dir)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--no-watch", action="store_true",
                        help="[history] snapshot_watch = false: every walk whole (a control)")
    args = parser.parse_args()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        base = Path(tempfile.mkdtemp(prefix="fuzz-watch-", dir=args.dir))
        try:
            seed_tree(base / "ws")
            found = check_rounds(base / "ws", seed, args.rounds,
                                 HistoryOptions(path=str(base / "history"),
                                                snapshot_watch=not args.no_watch))
            print(f"seed {seed}: {found['rounds']} rounds, {found['watched']} watched, slowest "
                  f"rewind {found['slowest_rewind_s']:.1f} s: ok", flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
