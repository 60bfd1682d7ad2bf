"""Rename-race soak for corral.fs.Root: while another process swaps a directory
inside the workspace with a symlink to a directory outside it (renameat2
RENAME_EXCHANGE, as fast as it can), every Root operation runs through that
name. Nothing outside may be read, changed or created.

    python scripts/race_fs.py [--seconds 30] [--resolver openat2|walk|both]

tests/test_fs_race.py runs a short, fixed-iteration version of `race`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral.errors import CorralError
from corral.fs import Root, syscalls

RENAME_EXCHANGE = 0x02  # swap two names atomically: the classic TOCTOU window, maximally hot
SECRET = b"RACE-SECRET-OUTSIDE-9c1e"
BIG = 1 << 20


def layout(base: Path) -> tuple[Path, Path]:
    """ws/d (a real dir), ws/swap (a symlink to outside), outside/secret.txt."""
    ws, outside = base / "ws", base / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    (ws / "d" / "secret.txt").write_bytes(b"inside")
    os.symlink(str(outside), ws / "swap")
    return ws, outside


def outside_state(outside: Path) -> dict[str, tuple[int, bytes]]:
    return {
        p.name: (p.stat().st_ino, p.read_bytes()) for p in sorted(outside.iterdir())
    }


def start_swapper(ws: Path) -> int:
    """A process swapping ws/d and ws/swap until killed; returns once it swaps."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
            syscalls.renameat2(fd, "d", fd, "swap", RENAME_EXCHANGE)
            os.write(ready_w, b"!")
            while True:
                syscalls.renameat2(fd, "d", fd, "swap", RENAME_EXCHANGE)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    return pid


def one_round(root: Root, i: int) -> list[object]:
    """Every operation once through the racing name; results and error codes."""
    ops = [
        lambda: root.read_bytes("d/secret.txt", max_file_bytes=BIG),
        lambda: root.info("d/secret.txt"),
        lambda: root.write_atomic("d/secret.txt", b"pwned"),
        lambda: root.write_atomic(f"d/new{i}.txt", b"pwned"),
        lambda: root.append("d/secret.txt", b"pwned", max_file_bytes=BIG),
        lambda: root.mkdir(f"d/dir{i}"),
        lambda: root.unlink(f"d/new{i}.txt"),
        lambda: root.rename("d/secret.txt", root, "d/secret.txt", overwrite=True),
        lambda: root.scandir("d"),
        lambda: list(root.walk("d")),
        lambda: root.resolve("d/secret.txt"),
    ]
    out: list[object] = []
    for op in ops:
        try:
            out.append(op())
        except CorralError as exc:
            out.append(exc.code)
            out.append(exc.message)
    return out


def race(base: Path, resolver: str, rounds: int) -> Counter[str]:
    """Run `rounds` rounds against a live swapper; raise AssertionError on any leak."""
    ws, outside = layout(base)
    before = outside_state(outside)
    outcomes: Counter[str] = Counter()
    with Root(str(ws), resolver=resolver) as root:
        pid = start_swapper(ws)
        try:
            for i in range(rounds):
                for item in one_round(root, i):
                    text = repr(item)
                    if SECRET.decode() in text:
                        raise AssertionError(f"secret leaked: {text[:200]}")
                    if isinstance(item, str) and "_" in item and " " not in item:
                        outcomes[item] += 1
                    elif not isinstance(item, str):
                        outcomes["ok"] += 1
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    after = outside_state(outside)
    if after != before:
        raise AssertionError(f"outside changed: {sorted(set(after) ^ set(before))}")
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--resolver", default="both", choices=["openat2", "walk", "both"])
    args = parser.parse_args()
    resolvers = ["openat2", "walk"] if args.resolver == "both" else [args.resolver]
    for resolver in resolvers:
        deadline, total, outcomes = time.monotonic() + args.seconds, 0, Counter()
        while time.monotonic() < deadline:
            with tempfile.TemporaryDirectory() as tmp:
                outcomes += race(Path(tmp), resolver, 200)
            total += 200
        print(f"{resolver}: {total} rounds, no leak; outcomes {dict(outcomes)}")


if __name__ == "__main__":
    main()
