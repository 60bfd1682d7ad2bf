"""Workspace checkpoints on a generated tree, in one run: the first checkpoint (a
whole snapshot) against `git add -A && git write-tree` of the same tree; a
checkpoint after 10 changed files (and the file bytes it read, and what the store
grew by), with the worker's watch and walked whole; a forced rewind of 10 files
changed behind corral's back; each beside the floor, a bare os.scandir + lstat
walk of the tree.

    python scripts/bench_snapshots.py [--files 10000] [--bytes 104857600] [--dir D]
                                      [--changed 10] [--rounds 3] [--tree T]

The real run is --files 100000 --bytes 2147483648 (2 GiB). `--tree T` makes the
tree in T once and reuses it in later runs of the same --files and --bytes (its
.git is made again each run, so git's figure is always a first `git add`). The
tree's files are unique (no two alike, so nothing is stored once for two files) and incompressible.
Prints a Markdown table; the page cache is warm for every row (the tree was just
written), as it is for a checkpoint an agent takes between its own edits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral import Sandbox
from corral.config import HistoryOptions, Limits

PER_DIR = 100


def tree_paths(root: Path, files: int) -> list[Path]:
    """The generated tree's files, 100 to a directory."""
    return [root / f"d{index // (PER_DIR * PER_DIR)}" / f"e{index // PER_DIR % PER_DIR}"
            / f"f{index}.bin" for index in range(files)]


def generate(root: Path, files: int, total: int) -> list[Path]:
    """`files` unique files of about total/files bytes each (made once: a tree
    whose marker names these sizes is reused)."""
    paths = tree_paths(root, files)
    marker = root.parent / f"{root.name}.made"
    if marker.exists() and marker.read_text() == f"{files} {total}":
        return paths
    shutil.rmtree(root, ignore_errors=True)
    size = max(total // files, 16)
    pool = os.urandom(size + 1 << 16)
    for index, path in enumerate(paths):
        if index % PER_DIR == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        start = (index * 7919) % (1 << 16)
        path.write_bytes(index.to_bytes(8, "little") + pool[start:start + size - 8])
    marker.write_text(f"{files} {total}")
    return paths


def floor_walk(root: Path) -> int:
    """os.scandir + lstat of every entry: what any walk by stat must cost."""
    count = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                count += 1
                if entry.is_dir(follow_symlinks=False) and entry.name != ".git":
                    stack.append(entry.path)
                del st
    return count


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = run()
    return time.perf_counter() - started, value


def du(path: Path) -> int:
    """Bytes of the files beneath `path`, each inode once (a manifest is linked twice)."""
    sizes = {}
    for item in path.rglob("*"):
        st = item.lstat()
        if not item.is_dir():
            sizes[st.st_dev, st.st_ino] = st.st_size
    return sum(sizes.values())


def git(root: Path) -> float:
    def run() -> None:
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        subprocess.run(["git", "write-tree"], cwd=root, check=True, stdout=subprocess.DEVNULL)
    return timed(run)[0]


def change(paths: list[Path], count: int) -> list[Path]:
    """Rewrite `count` files spread over the tree, same size, new bytes (never
    bytes stored before: a reused tree holds an earlier run's changes)."""
    step = max(len(paths) // count, 1)
    chosen = paths[::step][:count]
    for path in chosen:
        data = bytearray(path.read_bytes())
        data[:8] = os.urandom(8)
        path.write_bytes(bytes(data))
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--bytes", type=int, default=100 * 1024 * 1024)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", help="where to make the tree (default: a temp dir)")
    parser.add_argument("--tree", help="a tree to make once and reuse (kept)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-snap-", dir=args.dir))
    tree, store = (Path(args.tree) if args.tree else base / "ws"), base / "hist"
    tree.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tree / ".git", ignore_errors=True)
    try:
        made, paths = timed(lambda: generate(tree, args.files, args.bytes))
        print(f"tree: {args.files} files, {args.bytes / 2**20:.0f} MiB, made in {made:.1f} s")
        rows: list[tuple[str, float, float, str]] = []
        floor = min(timed(lambda: floor_walk(tree))[0] for _ in range(3))
        subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
        git_first = git(tree)
        options = HistoryOptions(path=str(store), max_bytes=4 * args.bytes + (1 << 30))
        with Sandbox(tree, history=options, limits=Limits(timeout_s=3600)) as sb:
            first, _ = timed(lambda: sb.checkpoint("first"))
            snap = sb.last_snapshot or {}
            stored = du(store)
            rows.append(("first checkpoint", first, floor,
                         f"read {snap.get('read_bytes', 0) / 2**20:.0f} MiB; git add -A && "
                         f"git write-tree {git_first:.2f} s ({first / git_first:.2f}x git)"))
            incremental, rewinds, reads, grown = [], [], [], []
            git_incremental = []
            for _ in range(args.rounds):
                changed = change(paths, args.changed)
                changed_bytes = sum(p.stat().st_size for p in changed)
                git_incremental.append(git(tree))
                before = du(store)
                took, cp = timed(lambda: sb.checkpoint("again"))
                incremental.append(took)
                snap = sb.last_snapshot or {}
                reads.append((snap.get("read_bytes", 0), changed_bytes))
                manifest = next(store.glob(f"*/m-{cp}.json")).stat().st_size
                grown.append((snap.get("stored_bytes", 0), manifest, du(store) - before))
                change(paths, args.changed)  # behind corral's back
                took, rewound = timed(lambda cp=cp: sb.rewind(cp, force=True))
                assert rewound["ok"] and not rewound["result"]["conflicts"], rewound
                rewinds.append(took)
            floor = min(timed(lambda: floor_walk(tree))[0] for _ in range(3))
            walked = (sb.last_snapshot or {}).get("walked", 0)
            read, wanted = reads[-1]
            blobs, manifest, growth = grown[-1]
            rows.append((f"checkpoint after {args.changed} changed files",
                         statistics.median(incremental), floor,
                         f"listed {walked} entries (the watch's dirty directories); "
                         f"read {read} B of the {wanted} B changed; blobs +{blobs} B, "
                         f"manifest {manifest} B, store +{growth} B in all; git add -A "
                         f"&& git write-tree {statistics.median(git_incremental) * 1000:.0f}"
                         " ms"))
            rows.append((f"rewind (force) of {args.changed} files changed by others",
                         statistics.median(rewinds), floor,
                         "its own checkpoint first (a walk); the record pass wrote "
                         "nothing, so the restore takes the two snapshots' differences, "
                         "no second walk"))
        # the walk whole, as with the watch off, a new worker's first, or every
        # (MAX_DELTAS + 1)th checkpoint, when its snapshot is written whole
        unwatched = HistoryOptions(path=str(store), max_bytes=options.max_bytes,
                                   snapshot_watch=False)
        with Sandbox(tree, history=unwatched, limits=Limits(timeout_s=3600)) as sb:
            sb.checkpoint("warm")
            whole = []
            for _ in range(args.rounds):
                change(paths, args.changed)
                whole.append(timed(lambda: sb.checkpoint("whole"))[0])
        rows.append((f"checkpoint after {args.changed} changed files, walked whole",
                     statistics.median(whole), floor,
                     "[history] snapshot_watch = false; also a new worker's first "
                     "checkpoint, and one in 17 (its snapshot written whole)"))
        print(f"\nfirst snapshot stored {stored / 2**20:.0f} MiB\n")
        print("| step | corral | floor (scandir + lstat walk) | notes |")
        print("|---|---:|---:|---|")
        for name, value, floor_s, note in rows:
            print(f"| {name} | {value * 1000:.0f} ms | {floor_s * 1000:.0f} ms | {note} |")
    finally:
        shutil.rmtree(tree / ".git", ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
