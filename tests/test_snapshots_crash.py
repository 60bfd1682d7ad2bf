"""Workspace checkpoints survive kill -9 at any instant: the worker or the host
killed during a checkpoint leaves the tree as it was and either a checkpoint with
its whole snapshot or none; killed during a whole-workspace rewind, the tree is,
once the workspace is opened again, exactly as it was before the rewind or
exactly the checkpoint's (the rewind's intent, finished: history/intent.py).
scripts/crash_snapshots.py runs the long version."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import HistoryOptions
from corral.errors import CorralError
from corral.history.intent import intent_name
from corral.history.store import kept_name
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


def _corrals(sb: Sandbox, n: int) -> None:
    """Changes through corral, for the rewind's record pass."""
    for i in range(3):
        sb.call("write_file", {"path": f"tool{n}/t{i}.txt", "content": f"tool {n} {i}\n"})
    sb.call("write_file", {"path": "d2/f2.txt", "content": f"by corral {n}\n"})


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_worker_killed_during_a_rewind_all_before_or_all_after(
    workspace: Path, tmp_path: Path, seed: int
) -> None:
    _tree(workspace)
    at_checkpoint = snapshot(workspace)
    options = HistoryOptions(path=str(tmp_path / "hist"))
    draw = random.Random(seed)
    with Sandbox(workspace, workers=1, history=options) as sb:
        cp = sb.checkpoint("before")
        _others(workspace, 0)
        took = _timed(lambda: sb.rewind(cp, force=True))
        _others(workspace, 1)
        _corrals(sb, 1)
        changed = snapshot(workspace)
        pid = sb.pids()["workers"][0]
        wait = crash_snapshots.kill_after(pid, draw.uniform(0, took * 1.2))
        try:
            killed = sb.rewind(cp, force=True)
        finally:
            wait()
            crash_snapshots.dead(pid)
        assert killed["ok"] or killed["error"]["code"] == "worker_crashed", killed
    with Sandbox(workspace, workers=1, history=options) as sb:
        assert snapshot(workspace) in (changed, at_checkpoint)  # all before or all after
        again = sb.rewind(cp, force=True)
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
        took = _timed(lambda: sb.checkpoint("measure"))
        _others(workspace, 0)
        _corrals(sb, 0)
    crash_snapshots.host(workspace, store, "checkpoint", cp, draw.uniform(0.05, 0.6))
    changed = snapshot(workspace)
    with Sandbox(workspace, history=options) as sb:
        assert snapshot(workspace) == changed
        for entry in _checkpoints(sb):
            sb.diff(entry["id"])
    for _ in range(2):
        crash_snapshots.host(workspace, store, "rewind", cp, draw.uniform(0, took * 4))
        with Sandbox(workspace, history=options):
            assert snapshot(workspace) in (changed, at_checkpoint)
    with Sandbox(workspace, history=options) as sb:
        again = sb.rewind(cp, force=True)
        assert again["ok"] and again["result"]["conflicts"] == [], again
    assert snapshot(workspace) == at_checkpoint


# -- killed at a fixed point -------------------------------------------------------

def _intent(store: Path, workspace: Path) -> Path:
    """Where the intent of a rewind of `workspace` lies in the store `store` (its
    options' path: the workspace's own store is the one directory beneath it)."""
    (home,) = [p for p in store.iterdir() if p.is_dir()]
    return home / intent_name(kept_name(os.path.realpath(workspace)))


def _restore_plan(store: Path) -> bool:
    """The snapshot pass's plan is there: the record pass has answered."""
    for plan in store.glob("*/k-*/p-*.json"):
        try:
            if b'"target"' in plan.read_bytes():
                return True
        except FileNotFoundError:
            continue
    return False


def _when(seen: Callable[[], bool], act: Callable[[], None]) -> Callable[[], None]:
    """Run `act` as soon as `seen()` holds (polled); the wait for it."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if seen():
                act()
                return
            time.sleep(0.0005)

    thread = threading.Thread(target=watch)
    thread.start()

    def wait() -> None:
        done.set()
        thread.join()

    return wait


def _rewind_host(workspace: Path, store: Path, cp: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", crash_snapshots._HOST, str(workspace), str(store), "rewind", cp],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert process.stdout is not None and process.stdout.readline() == "open\n"
    return process


@pytest.mark.parametrize("point", ["intent", "restore_plan"])
def test_a_host_killed_at_a_fixed_point_of_a_rewind_is_finished_at_the_next_open(
    workspace: Path, tmp_path: Path, point: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed once its intent is written (before the record pass), or once the
    record pass has answered (before the snapshot pass): the next sandbox opened
    rolls the rewind forward, whole."""
    _tree(workspace)
    at_checkpoint = snapshot(workspace)
    store = tmp_path / "hist"
    options = HistoryOptions(path=str(store))
    with Sandbox(workspace, history=options) as sb:
        cp = sb.checkpoint("before")
        _others(workspace, 0)
        _corrals(sb, 0)
    changed = snapshot(workspace)
    intent = _intent(store, workspace)
    seen = intent.exists if point == "intent" else lambda: _restore_plan(store)
    process = _rewind_host(workspace, store, cp)
    wait = _when(seen, lambda: os.killpg(process.pid, signal.SIGKILL))
    process.wait()
    wait()
    assert process.returncode == -signal.SIGKILL
    assert intent.exists()  # killed mid-rewind: its intent is left
    if point == "restore_plan":  # corral's own changes were taken back already
        assert snapshot(workspace) != changed
    with caplog.at_level("WARNING", logger="corral"), Sandbox(workspace, history=options) as sb:
        assert snapshot(workspace) == at_checkpoint  # all after, before any call
        assert not intent.exists()
        assert "finishing a rewind" in caplog.text
        rewinds = [e for e in sb.history(limit=1000) if e["tool"] == "rewind"]
        assert rewinds  # the finished rewind's changes are recorded
        back = sb.rewind(cp, force=True)
        assert back["ok"] and back["result"]["conflicts"] == [], back["result"]["reasons"]
    assert snapshot(workspace) == at_checkpoint


def test_a_worker_killed_between_the_passes_the_rewind_runs_again(
    workspace: Path, tmp_path: Path
) -> None:
    """The sandbox whose rewind's worker is killed (after the record pass, before
    the snapshot pass) runs it again with a new worker: one answer, the whole tree."""
    _tree(workspace)
    at_checkpoint = snapshot(workspace)
    store = tmp_path / "hist"
    with Sandbox(workspace, workers=1, history=HistoryOptions(path=str(store))) as sb:
        cp = sb.checkpoint("before")
        _others(workspace, 0)
        _corrals(sb, 0)
        pid = sb.pids()["workers"][0]
        wait = _when(lambda: _restore_plan(store), lambda: os.kill(pid, signal.SIGKILL))
        try:
            rewound = sb.rewind(cp, force=True)
        finally:
            wait()
        crash_snapshots.dead(pid)
        assert pid not in sb.pids()["workers"]
        assert rewound["ok"] and rewound["result"]["conflicts"] == [], rewound
        assert snapshot(workspace) == at_checkpoint
        assert not _intent(store, workspace).exists()
