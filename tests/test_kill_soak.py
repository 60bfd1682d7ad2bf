"""Short version of scripts/kill_soak.py (SIGKILL of the worker or the host in the
middle of write/edit/append/move: nothing torn, no temp file left), and the start-up
sweep that removes the temp files of writers that died unseen by any pool."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral import Sandbox
from corral.policy import RootSpec
from tests.helpers.scripts_loader import load_script

kill_soak = load_script("kill_soak")

HEX = "0123456789abcdef"


def test_worker_killed_mid_call_tears_nothing(tmp_path: Path):
    outcomes = kill_soak.worker_kills(tmp_path / "ws", kills=8)  # raises on a torn file
    assert outcomes["worker_crashed"] == 8


def test_host_killed_mid_call_tears_nothing(tmp_path: Path):
    outcomes = kill_soak.host_kills(tmp_path / "ws", kills=2, seed=3)  # raises as above
    assert outcomes["kills"] == 2


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process now
    return child.pid


def test_start_removes_temps_of_dead_writers_only(tmp_path: Path):
    ws, ro = tmp_path / "ws", tmp_path / "ro"
    (ws / "sub" / "deep").mkdir(parents=True)
    ro.mkdir()
    dead = _dead_pid()
    gone = [ws / f".corral-tmp-{dead}-{HEX}", ws / "sub" / "deep" / f".corral-tmp-{dead}-{HEX}"]
    kept = [
        ws / f".corral-tmp-{os.getpid()}-{HEX}",  # a live writer's (another sandbox's)
        ws / f".corral-tmp-{dead}-{HEX}.bak",  # not a name corral makes
        ws / f".corral-tmp-{dead}-xyz",
        ws / "sub" / "corral-tmp-1",
        ro / f".corral-tmp-{dead}-{HEX}",  # a read-only root is never written
    ]
    for path in gone + kept:
        path.write_text("partial")
    with Sandbox(ws, allowed_paths=[RootSpec(str(ro), "ro")]):
        pass  # the sweep runs in the background; close() waits for it
    assert [p for p in gone if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []


@pytest.mark.parametrize("calls", [0, 1, 3])
def test_a_private_sandbox_sweeps_on_a_worker_of_its_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls: int,
):
    # after its first call (on that call's worker, idle again) or at close: a one-shot
    # call forks no worker for the sweep
    from corral.sandbox import worker_set

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("a\n")
    temp = tmp_path / "ws" / f".corral-tmp-{_dead_pid()}-{HEX}"
    temp.write_text("partial")
    forked = []
    fork = worker_set.fork_worker
    monkeypatch.setattr(worker_set, "fork_worker", lambda *a: forked.append(1) or fork(*a))
    with Sandbox(tmp_path / "ws", workers=1) as sandbox:
        for _ in range(calls):
            assert sandbox.call("read_file", {"path": "a.txt"})["ok"]
    assert not temp.exists()
    assert len(forked) == 1


def test_start_keeps_the_temp_of_another_sandboxs_running_write(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    with Sandbox(tmp_path / "ws", workers=1) as first:
        writer = first.pids()["workers"][0]
        in_flight = tmp_path / "ws" / f".corral-tmp-{writer}-{HEX}"
        in_flight.write_text("half of a write")
        with Sandbox(tmp_path / "ws"):
            pass
        assert in_flight.exists()
    with Sandbox(tmp_path / "ws"):
        pass  # its writer is gone now
    assert not in_flight.exists()


def test_a_temp_listing_of_the_wrong_shape_loses_the_worker():
    from corral.calls.messages import FindTemps, Malformed, TempList

    request = FindTemps(0)
    assert TempList.from_wire({"id": 0, "temps": [[0, "a/.corral-tmp-1-x", 1]]}, request)
    for temps in (None, [[0, "x"]], [["0", "x", 1]], [[0, "x", -1]], [[0, 1, 1]], {"0": 1}):
        with pytest.raises(Malformed):
            TempList.from_wire({"id": 0, "temps": temps}, request)


def test_a_sandbox_of_a_shared_pool_sweeps_and_closes(tmp_path: Path):
    from corral import Pool

    (tmp_path / "ws").mkdir()
    stale = tmp_path / "ws" / f".corral-tmp-{_dead_pid()}-{HEX}"
    stale.write_text("partial")
    with Pool(max_workers=2) as pool:
        sandbox = pool.sandbox(tmp_path / "ws")
        assert sandbox.call("stat_file", {"path": "x"})["ok"]
        deadline = time.monotonic() + 30  # the sweep runs on one of the pool's threads
        while stale.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not stale.exists()
        sandbox.close()
