"""Kill -9 the worker, or the host with its workers, at random instants of
workspace checkpoints and of whole-workspace rewinds (force) over changes made
behind corral's back and through corral; after each kill:

- a checkpoint: the tree is as it was, and every checkpoint in the history has
  its whole snapshot (diff against it works);
- a rewind: once the workspace is opened again (a new Sandbox on it), the tree
  is exactly the tree before the rewind or exactly the checkpoint's (file bytes
  and modes, the set of directories, symlink targets; ignored paths left out),
  never a mix; and the rewind run again gives the checkpoint's tree.

    python scripts/crash_snapshots.py [--rounds 40] [--seed N] [--files 300]

tests/test_snapshots_crash.py runs a short version.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
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

SIZE = 16 * 1024
IGNORED = ".git"  # what snapshots leave out: changed in every round, never compared
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
        print("rewound", flush=True)
"""


def tree_of(root: Path) -> dict[str, Any]:
    """Every entry but the ignored ones: a file's mode and bytes, a directory, a
    link's target."""
    found: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and IGNORED in dirnames:
            dirnames.remove(IGNORED)
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


def verdict(now: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> str:
    """"all before" or "all after"; AssertionError naming the mix otherwise."""
    if now == before:
        return "all before"
    if now == after:
        return "all after"
    paths = sorted(now.keys() | before.keys() | after.keys())
    old = [p for p in paths if now.get(p) == before.get(p) != after.get(p)]
    new = [p for p in paths if now.get(p) == after.get(p) != before.get(p)]
    neither = [p for p in paths if now.get(p) not in (before.get(p), after.get(p))]
    raise AssertionError(f"a mix: {len(old)} paths as before (e.g. {old[:3]}), {len(new)} "
                         f"as after (e.g. {new[:3]}), {len(neither)} neither ({neither[:3]})")


def make(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / f"d{i % 8}" / f"e{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_bytes(f"{i}\n".encode() * (SIZE // 4))
    for i in range(8):  # links a rewind makes again if they are removed
        os.symlink(f"e{i % 3}/f{i}.txt", root / f"d{i}" / "link")
    (root / IGNORED).mkdir()
    (root / IGNORED / "HEAD").write_text("ref: main\n")


def others(root: Path, files: int, draw: random.Random, n: int) -> None:
    """A shell's and an editor's changes: rewrites, renames, deletes, new files,
    modes, links."""
    for i in draw.sample(range(files), files // 4):
        path = root / f"d{i % 8}" / f"e{i % 3}" / f"f{i}.txt"
        if path.exists():
            path.write_bytes(f"round {n} {i}\n".encode() * draw.randint(1, SIZE // 8))
    for i in draw.sample(range(files), 5):
        path = root / f"d{i % 8}" / f"e{i % 3}" / f"f{i}.txt"
        if path.exists():
            os.rename(path, path.with_name(f"moved-{n}-{i}.txt"))
    for i in draw.sample(range(files), 5):
        path = root / f"d{i % 8}" / f"e{i % 3}" / f"f{i}.txt"
        if path.exists():
            path.chmod(0o600 if draw.random() < 0.5 else 0o755)
    shutil.rmtree(root / f"d{draw.randrange(8)}", ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(root / f"d{draw.randrange(8)}" / "link")
    fresh = root / f"fresh{n}"
    fresh.mkdir(exist_ok=True)
    for i in range(draw.randint(1, 20)):
        (fresh / f"n{i}.txt").write_text(f"new {n} {i}\n")
    with contextlib.suppress(FileExistsError):
        os.symlink("../d0", fresh / "up")
    (root / IGNORED / "HEAD").write_text(f"ref: round-{n}\n")


def corrals(sb: Sandbox, draw: random.Random, n: int) -> None:
    """Changes through corral's tools, for the rewind's record pass to take back."""
    for i in range(3):
        sb.call("write_file", {"path": f"tool{n}/t{i}.txt", "content": f"tool {n} {i}\n"})
    for _ in range(2):
        folder = f"d{draw.randrange(8)}"
        if os.path.isdir(os.path.join(sb.roots[0].path, folder)):
            sb.call("write_file", {"path": f"{folder}/by-tool.txt", "content": f"{n}\n"})


class Finished(logging.Handler):
    """Counts the rewinds a sandbox finished as it opened (the log line it writes)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "finishing a rewind" in record.getMessage():
            self.count += 1


def reopened(workspace: Path, options: HistoryOptions, before: dict[str, Any],
             after: dict[str, Any]) -> str:
    """Open the workspace again: its tree is all before or all after (and which;
    "finished at open": the new sandbox finished the rewind)."""
    finished = Finished()
    logger = logging.getLogger("corral")
    logger.addHandler(finished)
    try:
        with Sandbox(workspace, workers=1, history=options):
            outcome = verdict(tree_of(workspace), before, after)
    finally:
        logger.removeHandler(finished)
    return outcome + (", finished at open" if finished.count else "")


def kill_after(pid: int, delay: float, group: bool = False) -> Callable[[], float]:
    """Kill `pid` (its group) in `delay` s; the returned wait gives when (monotonic)."""
    when = [0.0]

    def kill() -> None:
        time.sleep(delay)
        when[0] = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            (os.killpg if group else os.kill)(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill)
    thread.start()

    def wait() -> float:
        thread.join()
        return when[0]

    return wait


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


def host(workspace: Path, store: Path, op: str, cp: str, delay: float) -> bool:
    """A host process doing `op`, killed with its workers `delay` s after it opened
    (corral imported from this checkout, installed or not); True if it finished
    its rewind first."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOST, str(workspace), str(store), op, cp],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert process.stdout is not None
    assert process.stdout.readline() == "open\n", "the host did not start"
    kill_after(process.pid, delay, group=True)()
    finished = process.stdout.read() == "rewound\n"
    process.wait()
    return finished


def worker_round(workspace: Path, store: Path, draw: random.Random, files: int, n: int) -> str:
    options = HistoryOptions(path=str(store))
    with Sandbox(workspace, workers=1, history=options) as sb:
        cp = sb.checkpoint("before")
        at_checkpoint = tree_of(workspace)
        others(workspace, files, draw, n)
        corrals(sb, draw, n)
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
        others(workspace, files, draw, n + 1000)  # for the rewind's own snapshot to copy
        changed = tree_of(workspace)
        pid = sb.pids()["workers"][0]
        wait = kill_after(pid, draw.uniform(0, took * 3))
        try:
            killed = sb.rewind(cp, force=True)
        finally:
            returned = time.monotonic()
            during = wait() < returned
            dead(pid)
    how = ("ok" if killed["ok"] else killed["error"]["code"]) + (
        ", its worker killed during it" if during else ", killed after")
    outcome = reopened(workspace, options, changed, at_checkpoint)
    with Sandbox(workspace, workers=1, history=options) as sb:
        again = sb.rewind(cp, force=True)
        assert again["ok"] and not again["result"]["conflicts"], again["result"]["reasons"]
    assert tree_of(workspace) == at_checkpoint, "not all after"
    return f"worker: rewind {how}; reopened: {outcome}"


def host_round(workspace: Path, store: Path, draw: random.Random, files: int, n: int) -> str:
    options = HistoryOptions(path=str(store))
    with Sandbox(workspace, history=options) as sb:
        cp = sb.checkpoint("before")
        at_checkpoint = tree_of(workspace)
        others(workspace, files, draw, n)
        corrals(sb, draw, n)
        started = time.monotonic()
        sb.checkpoint("measure")  # a rewind takes about three of these
        took = time.monotonic() - started
    changed = tree_of(workspace)
    host(workspace, store, "checkpoint", cp, draw.uniform(0.05, 1.0))
    with Sandbox(workspace, history=options) as sb:
        assert tree_of(workspace) == changed, "a checkpoint changed the tree"
        count = check_checkpoints(sb)
    others(workspace, files, draw, n + 1000)  # for the rewind's own snapshot to copy
    changed = tree_of(workspace)
    finished = host(workspace, store, "rewind", cp, draw.uniform(0, took * 4))
    outcome = reopened(workspace, options, changed, at_checkpoint)
    with Sandbox(workspace, history=options) as sb:
        again = sb.rewind(cp, force=True)
        assert again["ok"] and not again["result"]["conflicts"], again["result"]["reasons"]
    assert tree_of(workspace) == at_checkpoint, "not all after"
    return (f"host: {count} checkpoints whole; rewind {'finished' if finished else 'killed'}; "
            f"reopened: {outcome}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--files", type=int, default=300)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}")
    draw = random.Random(seed)
    outcomes: collections.Counter[str] = collections.Counter()
    for n in range(args.rounds):
        base = Path(tempfile.mkdtemp(prefix="crash-snap-"))
        try:
            workspace = base / "ws"
            workspace.mkdir()
            make(workspace, args.files)
            run = worker_round if n % 2 == 0 else host_round
            said = run(workspace, base / "hist", draw, args.files, n)
            outcomes[f"{said.split(':')[0]}: {said.rsplit('reopened: ', 1)[1]}"] += 1
            print(f"round {n}: {said}", flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    for outcome, count in sorted(outcomes.items()):
        print(f"{count:4d}  {outcome}")
    print(f"{args.rounds} rounds: every tree all before or all after, no mix")


if __name__ == "__main__":
    main()
