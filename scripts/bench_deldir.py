"""delete_directory of a tree (default: 20 directories of 25 files of 4 KiB; with
--links, that many symlinks in each directory too, as a node_modules' .bin) against
shutil.rmtree of the same tree in-process, measured in one run: the recorded
delete renamed into the store and copied into it (a store on another file
system, /dev/shm), in-process; and through a Sandbox, history on (its workers'
mount namespace makes the store another mount: copied) and off.

    python scripts/bench_deldir.py [--dirs 20] [--files 25] [--size 4096] [--links 0]
                                   [--rounds 5]

Prints each median and its ratio to rmtree's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corral import Sandbox
from corral.config import HistoryOptions
from corral.fs import Root
from corral.history.keeper import Keeper
from corral.history.store import Store
from corral.policy import Policy


def make_tree(top: Path, dirs: int, files: int, size: int, links: int = 0) -> None:
    data = os.urandom(size)
    for d in range(dirs):
        sub = top / f"dir{d:03d}"
        sub.mkdir(parents=True)
        for f in range(files):
            (sub / f"file{f:03d}.bin").write_bytes(data)
        for f in range(links):
            (sub / f"link{f:03d}").symlink_to(f"file{f % max(files, 1):03d}.bin")


def timed(make: Callable[[], None], delete: Callable[[], None], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        make()
        start = time.perf_counter()
        delete()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def keeper_delete(ws: Path, work: Path) -> Callable[[], None]:
    def delete() -> None:
        store = Store.open(str(work))
        try:
            with Root(str(ws)) as root:
                root.remove_tree("t", recursive=True, keep=Keeper(store, str(ws), "bench"))
        finally:
            store.close()
    return delete


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=20)
    parser.add_argument("--files", type=int, default=25)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--links", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    entries = args.dirs * (args.files + args.links + 1)
    with tempfile.TemporaryDirectory() as tmp, \
            tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        ws = Path(tmp) / "ws"
        ws.mkdir()

        def make() -> None:
            make_tree(ws / "t", args.dirs, args.files, args.size, args.links)

        results = {"shutil.rmtree (in-process)": timed(
            make, lambda: shutil.rmtree(ws / "t"), args.rounds)}
        same, other = Path(tmp) / "store" / "w-bench", Path(shm) / "store" / "w-bench"
        same.mkdir(parents=True)
        other.mkdir(parents=True)
        results["recorded, renamed into the store (in-process)"] = timed(
            make, keeper_delete(ws, same), args.rounds)
        results["recorded, copied into the store (in-process)"] = timed(
            make, keeper_delete(ws, other), args.rounds)
        policy = Policy({"delete_directory": "allow"})
        call = {"path": "t", "recursive": True}
        for label, history in (("history on", HistoryOptions(path=str(Path(tmp) / "h"))),
                               ("history off", HistoryOptions(enabled=False))):
            with Sandbox(ws, policy=policy, history=history) as sb:
                sb.call("stat_file", {"path": "."})  # a warm worker

                def delete(sb: Sandbox = sb) -> None:
                    assert sb.call("delete_directory", call)["ok"]

                results[f"Sandbox.call, {label}"] = timed(make, delete, args.rounds)
    base = results["shutil.rmtree (in-process)"]
    print(f"a tree of {entries} entries ({args.dirs} x {args.files} files of {args.size} "
          f"bytes, {args.links} symlinks), median of {args.rounds}:")
    for label, seconds in results.items():
        print(f"  {label:50s} {seconds * 1000:8.2f} ms  x{seconds / base:6.2f}")


if __name__ == "__main__":
    main()
