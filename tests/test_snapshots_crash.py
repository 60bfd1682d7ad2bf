"""Workspace checkpoints survive kill -9 at any instant: the worker or the host
killed during a checkpoint leaves the tree as it was and either a checkpoint with
its whole snapshot or none; killed during a whole-workspace rewind, the tree holds
each path old or new, and the rewind run again gives the checkpoint's tree (all
after), while the rewind's own checkpoint, if it was made, gives the tree as it
was before (all before). scripts/crash_snapshots.py runs the long version."""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import HistoryOptions
from corral.errors import CorralError
from corral.history.store import new_id
from tests.helpers.history_helpers import snapshot
from tests.helpers.scripts_loader import load_script

crash_snapshots = load_script("crash_snapshots")  # its kill, wait and host steps

FILES = 120
SIZE = 16 * 1024


def _tree(root: Path) -> None:
    for i in range(FILES):
        folder = root / f"d{i % 6}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_bytes(f"{i}\n".encode() * (SIZE // 4))


def _others(root: Path, n: int) -> None:
    """A shell's work: rewrites, renames, a deleted directory, new files."""
    for i in range(0, FILES, 3):
        path = root / f"d{i % 6}" / f"f{i}.txt"
        if path.exists():
            with open(path, "wb") as file:
                file.write(f"round {n} {i}\n".encode() * (SIZE // 16))
    if (root / "d1" / "f1.txt").exists():
        os.rename(root / "d1" / "f1.txt", root / "d1" / "renamed.txt")
    shutil.rmtree(root / "d5", ignore_errors=True)
    (root / "fresh").mkdir(exist_ok=True)
    for i in range(10):
        (root / "fresh" / f"n{i}.txt").write_text(f"new {n} {i}\n")


def _timed(run: Callable[[], Any]) -> float:
    started = time.monotonic()
    run()
    return time.monotonic() - started


def _checkpoints(sb: Sandbox) -> list[dict[str, Any]]:
    return [e for e in sb.history(limit=1000) if e["action"] == "checkpoint"]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_worker_killed_during_a_checkpoint_leaves_a_whole_one_or_none(
    workspace: Path, seed: int
) -> None:
    _tree(workspace)
    draw = random.Random(seed)
    with Sandbox(workspace, workers=1) as sb:
        took = _timed(lambda: sb.checkpoint("warm"))
        _others(workspace, 0)
        before = snapshot(workspace)
        pid = sb.pids()["workers"][0]
        wait = crash_snapshots.kill_after(pid, draw.uniform(0, took * 1.5))
        try:
            sb.checkpoint("killed")
        except CorralError as error:
            assert error.code == "worker_crashed", error
        finally:
            wait()
            crash_snapshots.dead(pid)
        assert snapshot(workspace) == before  # a checkpoint writes nothing of the tree
        for entry in _checkpoints(sb):  # each checkpoint there has its whole snapshot
            sb.diff(entry["id"])
        cp = sb.checkpoint("after")
        _others(workspace, 1)
        forced = sb.rewind(cp, force=True)
        assert forced["ok"] and forced["result"]["conflicts"] == [], forced
    assert snapshot(workspace) == before


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_worker_killed_during_a_rewind_all_before_or_all_after(
    workspace: Path, seed: int
) -> None:
    _tree(workspace)
    at_checkpoint = snapshot(workspace)
    draw = random.Random(seed)
    with Sandbox(workspace, workers=1) as sb:
        cp = sb.checkpoint("before")
        _others(workspace, 0)
        took = _timed(lambda: sb.rewind(cp, force=True))
        _others(workspace, 1)
        changed = snapshot(workspace)
        pid = sb.pids()["workers"][0]
        mark = new_id()
        wait = crash_snapshots.kill_after(pid, draw.uniform(0, took * 1.2))
        try:
            killed = sb.rewind(cp, force=True)
        finally:
            wait()
            crash_snapshots.dead(pid)
        assert killed["ok"] or killed["error"]["code"] == "worker_crashed", killed
        made = [e["id"] for e in _checkpoints(sb)
                if e["checkpoint"] == f"before rewind to {cp}" and e["id"] > mark]
        if not killed["ok"] and made:
            # all before: the rewind's own checkpoint takes the tree back as it was
            back = sb.rewind(made[0], force=True)
            assert back["ok"] and back["result"]["conflicts"] == [], back["result"]["reasons"]
            assert snapshot(workspace) == changed
        again = sb.rewind(cp, force=True)  # all after
        assert again["ok"] and again["result"]["conflicts"] == [], again["result"]["reasons"]
    assert snapshot(workspace) == at_checkpoint


@pytest.mark.parametrize("seed", [1])
def test_a_host_killed_during_checkpoints_and_a_rewind(
    workspace: Path, tmp_path: Path, seed: int
) -> None:
    _tree(workspace)
    at_checkpoint = snapshot(workspace)
    store = tmp_path / "hist"
    options = HistoryOptions(path=str(store))
    draw = random.Random(seed)
    with Sandbox(workspace, history=options) as sb:
        cp = sb.checkpoint("before")
    _others(workspace, 0)
    crash_snapshots.host(workspace, store, "checkpoint", cp, draw.uniform(0.05, 0.6))
    changed = snapshot(workspace)
    with Sandbox(workspace, history=options) as sb:
        assert snapshot(workspace) == changed
        for entry in _checkpoints(sb):
            sb.diff(entry["id"])
    crash_snapshots.host(workspace, store, "rewind", cp, draw.uniform(0.05, 0.6))
    with Sandbox(workspace, history=options) as sb:
        again = sb.rewind(cp, force=True)
        assert again["ok"] and again["result"]["conflicts"] == [], again
    assert snapshot(workspace) == at_checkpoint
