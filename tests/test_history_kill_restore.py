"""Undo and rewind are crash-safe like every other change: SIGKILL of the real
confined worker running one, at the instant its k-th record appears in the store,
then the same undo or rewind again gives the state it promised, and no temp file
is left (scripts/crash_history.py --restore runs the long version)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import HistoryOptions
from corral.fs import TEMP_PREFIX
from corral.history.store import id_pid
from tests.helpers.calls import ok
from tests.helpers.history_helpers import snapshot

SIZE = 256 * 1024  # each restoring write takes a while: a kill lands inside one


def kill_at_record(sb: Sandbox, k: int, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """run() (an undo or a rewind) with its worker killed once the k-th record
    that worker writes shows in the store."""
    store = Path(sb.history_path)
    pid = sb.pids()["workers"][0]
    done = threading.Event()

    def ids() -> set[str]:  # the worker writes its records in its work directory
        names = [n for work in store.glob("w-*") for n in os.listdir(work)]
        return {n[2:28] for n in names if n.startswith("r-")}

    earlier = ids()

    def watch() -> None:
        while not done.is_set():
            if len([i for i in ids() - earlier if id_pid(i) == pid]) >= k:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.set()
                return

    killed = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        return run()
    finally:
        done.set()
        watcher.join()
        if killed.is_set():
            _wait_dead(pid)


def _wait_dead(pid: int) -> None:
    """A kill that landed just as run() returned leaves an idle worker dying, which
    the next call could still take (and crash with): wait until it is dead."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)


def temps(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


def _changes(sb: Sandbox, n: int) -> None:
    for i in range(4):
        ok(sb, "write_file", path=f"f{i}.txt", content=f"{n}-{i}\n" * (SIZE // 8))
    ok(sb, "write_file", path=f"new{n}/deep/g.txt", content="made\n")
    ok(sb, "append_file", path="log.txt", content=f"{n}\n" * (SIZE // 4))
    ok(sb, "move_file", source="d", destination="e")
    ok(sb, "delete_file", path="f0.txt")


@pytest.fixture
def tree(workspace: Path) -> Path:
    for i in range(4):
        (workspace / f"f{i}.txt").write_text(f"old {i}\n" * (SIZE // 8))
    (workspace / "log.txt").write_text("start\n")
    (workspace / "d").mkdir()
    (workspace / "d" / "x.txt").write_text("x\n")
    return workspace


ENABLE_DELETE = {"tool_modes": {"delete_file": "allow"}}


@pytest.mark.parametrize("snapshots", [False, True])
@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_a_killed_rewind_run_again_gives_the_checkpoint(
    tree: Path, k: int, snapshots: bool
) -> None:
    """Without snapshots the killed rewind fails, and run again gives the
    checkpoint; with them, the sandbox runs it again itself (its intent:
    history/intent.py), and it answers as one."""
    from corral.policy import Policy

    history = HistoryOptions(snapshots=snapshots)
    with Sandbox(tree, workers=1, policy=Policy(**ENABLE_DELETE), history=history) as sb:
        at_checkpoint = snapshot(tree)
        cp = sb.checkpoint()
        _changes(sb, k)
        killed = kill_at_record(sb, k, lambda: sb.rewind(cp))
        if snapshots:
            assert killed["ok"] and killed["result"]["conflicts"] == [], killed
            assert snapshot(tree) == at_checkpoint
        else:
            assert killed["error"]["code"] == "worker_crashed", killed
        assert temps(tree) == []  # the pool settled the dead worker's records, and cleaned
        again = sb.rewind(cp)
        assert again["ok"] and again["result"]["conflicts"] == [], again
    assert snapshot(tree) == at_checkpoint


@pytest.mark.parametrize("k", [1, 2])
def test_a_killed_undo_run_again_finishes_it(tree: Path, k: int) -> None:
    """The undo of a write that made its parents is three changes (the file, two
    directories); killed after the k-th, the next undo of the path resumes it."""
    before = snapshot(tree)
    with Sandbox(tree, workers=1) as sb:
        ok(sb, "write_file", path="new/deep/g.txt", content="x\n" * SIZE)
        killed = kill_at_record(sb, k, lambda: sb.undo("new/deep/g.txt"))
        assert killed["ok"] or killed["error"]["code"] == "worker_crashed", killed
        assert temps(tree) == []
        again = sb.undo("new/deep/g.txt")
        if again["ok"]:  # resumed (else: it had finished, and there is nothing before it)
            assert again["result"]["conflicts"] == [], again
            assert sb.undo("new/deep/g.txt")["error"]["code"] == "not_found"
        else:
            assert again["error"]["code"] == "not_found", again
    assert snapshot(tree) == before
