"""What resolving beneath a root costs: each Root operation (both resolvers)
against doing the same directly with os calls on the absolute path, in-process.

    python scripts/bench_fs.py [--n 2000]

Prints microseconds per call and the ratio to the direct version.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral.fs import Root

DEPTH = "a/b/c"  # a typical source-tree depth: resolution cost grows with components
BIG = 1 << 20


def per_call(fn: Callable[[], object], n: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def direct_ops(base: str) -> dict[str, Callable[[], object]]:
    f = f"{base}/{DEPTH}/f.txt"

    def read() -> bytes:
        with open(f, "rb") as h:
            return h.read()

    def write() -> None:
        tmp = f"{base}/{DEPTH}/.tmp"
        with open(tmp, "wb") as h:
            h.write(b"data\n" * 20)
            h.flush()
            os.fsync(h.fileno())
        os.replace(tmp, f"{base}/{DEPTH}/w.txt")

    def append() -> None:
        with open(f"{base}/{DEPTH}/log.txt", "ab") as h:
            h.write(b"x")

    return {
        "read_bytes": read,
        "info": lambda: os.lstat(f),
        "write_atomic": write,
        "append": append,
        "scandir": lambda: [(e.name, e.stat(follow_symlinks=False)) for e in os.scandir(base)],
        "resolve": lambda: os.path.realpath(f),
    }


def root_ops(root: Root) -> dict[str, Callable[[], object]]:
    f = f"{DEPTH}/f.txt"
    return {
        "read_bytes": lambda: root.read_bytes(f, max_file_bytes=BIG),
        "info": lambda: root.info(f),
        "write_atomic": lambda: root.write_atomic(f"{DEPTH}/w.txt", b"data\n" * 20),
        "append": lambda: root.append(f"{DEPTH}/log.txt", b"x", max_file_bytes=BIG),
        "scandir": lambda: root.scandir("."),
        "resolve": lambda: root.resolve(f),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        os.makedirs(f"{base}/{DEPTH}")
        Path(f"{base}/{DEPTH}/f.txt").write_bytes(b"line\n" * 200)
        for i in range(20):
            Path(f"{base}/file{i}").write_bytes(b"")
        direct = {name: per_call(fn, args.n) for name, fn in direct_ops(base).items()}
        rows = {}
        for resolver in ("openat2", "walk"):
            with Root(base, resolver=resolver) as root:
                rows[resolver] = {n: per_call(fn, args.n) for n, fn in root_ops(root).items()}
    print(f"{'op':<14}{'direct us':>10}{'openat2 us':>12}{'ratio':>7}{'walk us':>10}{'ratio':>7}")
    for name, base_us in direct.items():
        o, w = rows["openat2"][name], rows["walk"][name]
        cells = f"{base_us:>10.1f}{o:>12.1f}{o / base_us:>7.2f}{w:>10.1f}{w / base_us:>7.2f}"
        print(f"{name:<14}{cells}")


if __name__ == "__main__":
    main()
