"""Kill -9 the worker, or the host with its workers, at random instants of
workspace checkpoints and of whole-workspace rewinds (force) over changes made
behind corral's back; after each kill:

- a checkpoint: the tree is as it was, and every checkpoint in the history has
  its whole snapshot (diff against it works);
- a rewind: run again it gives the checkpoint's tree (all after); before that,
  in worker rounds, the checkpoint the killed rewind made first (if it got that
  far) gives the tree as it was before the rewind (all before).

    python scripts/crash_snapshots.py [--rounds 40] [--seed N] [--files 300]

tests/test_snapshots_crash.py runs a short version.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral import Sandbox
from corral.config import HistoryOptions
from corral.errors import CorralError
from corral.history.store import new_id

SIZE = 16 * 1024
_HOST = """
import sys
from corral import Sandbox
from corral.config import HistoryOptions
workspace, store, op, cp = sys.argv[1:5]
with Sandbox(workspace, workers=1, history=HistoryOptions(path=store)) as sb:
    print("open", flush=True)
    if op == "checkpoint":
        while True:
            sb.checkpoint("looping")
    else:
        sb.rewind(cp, force=True)
"""


def tree_of(root: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir",)
            else:
                found[rel] = ("file", path.stat().st_mode & 0o7777, path.read_bytes())
    return found


def make(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / f"d{i % 8}" / f"e{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_bytes(f"{i}\n".encode() * (SIZE // 4))


def others(root: Path, files: int, draw: random.Random, n: int) -> None:
    """A shell's and an editor's changes: rewrites, renames, deletes, new files."""
    for i in draw.sample(range(files), files // 4):
        path = root / f"d{i % 8}" / f"e{i % 3}" / f"f{i}.txt"
        if path.exists():
            path.write_bytes(f"round {n} {i}\n".encode() * draw.randint(1, SIZE // 8))
    for i in draw.sample(range(files), 5):
        path = root / f"d{i % 8}" / f"e{i % 3}" / f"f{i}.txt"
        if path.exists():
            os.rename(path, path.with_name(f"moved-{n}-{i}.txt"))
    shutil.rmtree(root / f"d{draw.randrange(8)}", ignore_errors=True)
    fresh = root / f"fresh{n}"
    fresh.mkdir(exist_ok=True)
    for i in range(draw.randint(1, 20)):
        (fresh / f"n{i}.txt").write_text(f"new {n} {i}\n")


def kill_after(pid: int, delay: float, group: bool = False) -> Callable[[], None]:
    def kill() -> None:
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            (os.killpg if group else os.kill)(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill)
    thread.start()
    return thread.join


def dead(pid: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)


def check_checkpoints(sb: Sandbox) -> int:
    found = [e for e in sb.history(limit=10_000) if e["action"] == "checkpoint"]
    for entry in found:
        try:
            sb.diff(entry["id"])
        except CorralError as error:  # a rewind's own mark (its worker's) has no snapshot
            if error.code != "not_found":
                raise
    return len(found)


def host(workspace: Path, store: Path, op: str, cp: str, delay: float) -> None:
    """A host process doing `op`, killed with its workers `delay` s after it opened
    (corral imported from this checkout, installed or not)."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOST, str(workspace), str(store), op, cp],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert process.stdout is not None
    assert process.stdout.readline() == "open\n", "the host did not start"
    kill_after(process.pid, delay, group=True)()
    process.wait()


def worker_round(workspace: Path, store: Path, draw: random.Random, files: int, n: int) -> str:
    options = HistoryOptions(path=str(store))
    with Sandbox(workspace, workers=1, history=options) as sb:
        cp = sb.checkpoint("before")
        at_checkpoint = tree_of(workspace)
        others(workspace, files, draw, n)
        changed = tree_of(workspace)
        started = time.monotonic()
        sb.checkpoint("measure")
        took = time.monotonic() - started
        pid = sb.pids()["workers"][0]
        wait = kill_after(pid, draw.uniform(0, took * 1.5))
        try:
            sb.checkpoint("killed")
        except CorralError as error:
            assert error.code == "worker_crashed", error
        finally:
            wait()
            dead(pid)
        assert tree_of(workspace) == changed, "a checkpoint changed the tree"
        check_checkpoints(sb)
        pid = sb.pids()["workers"][0]
        mark = new_id()
        wait = kill_after(pid, draw.uniform(0, took * 3))
        try:
            killed = sb.rewind(cp, force=True)
        finally:
            wait()
            dead(pid)
        made = [e["id"] for e in sb.history(limit=10_000) if e["action"] == "checkpoint"
                and e["checkpoint"] == f"before rewind to {cp}" and e["id"] > mark]
        outcome = "finished" if killed["ok"] else "killed"
        if not killed["ok"] and made:
            # the oldest: the host's snapshot of the tree as it was (the record pass
            # makes its own checkpoint after it, of corral's changes only)
            back = sb.rewind(made[-1], force=True)
            assert back["ok"] and not back["result"]["conflicts"], back
            links = {link["path"] for link in back["result"]["links_not_restored"]}
            assert {k: v for k, v in tree_of(workspace).items()} == {
                k: v for k, v in changed.items() if k not in links}, "not all before"
            outcome = "killed, all before"
        again = sb.rewind(cp, force=True)
        assert again["ok"] and not again["result"]["conflicts"], again
        assert tree_of(workspace) == at_checkpoint, "not all after"
    return f"worker: {outcome}, then all after"


def host_round(workspace: Path, store: Path, draw: random.Random, files: int, n: int) -> str:
    options = HistoryOptions(path=str(store))
    with Sandbox(workspace, history=options) as sb:
        cp = sb.checkpoint("before")
    at_checkpoint = tree_of(workspace)
    others(workspace, files, draw, n)
    changed = tree_of(workspace)
    host(workspace, store, "checkpoint", cp, draw.uniform(0.05, 1.0))
    with Sandbox(workspace, history=options) as sb:
        assert tree_of(workspace) == changed, "a checkpoint changed the tree"
        count = check_checkpoints(sb)
    host(workspace, store, "rewind", cp, draw.uniform(0.05, 1.5))
    with Sandbox(workspace, history=options) as sb:
        again = sb.rewind(cp, force=True)
        assert again["ok"] and not again["result"]["conflicts"], again
    assert tree_of(workspace) == at_checkpoint, "not all after"
    return f"host: {count} checkpoints whole, then all after"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--files", type=int, default=300)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}")
    draw = random.Random(seed)
    for n in range(args.rounds):
        base = Path(tempfile.mkdtemp(prefix="crash-snap-"))
        try:
            workspace = base / "ws"
            workspace.mkdir()
            make(workspace, args.files)
            run = worker_round if n % 2 == 0 else host_round
            print(f"round {n}: {run(workspace, base / 'hist', draw, args.files, n)}",
                  flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print(f"{args.rounds} rounds: every tree all before or all after")


if __name__ == "__main__":
    main()
