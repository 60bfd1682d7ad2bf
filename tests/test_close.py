"""Closing a sandbox waits on the processes it ends (their pidfds), never polls
with sleeps, and leaves none of them behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from corral.api import Sandbox
from corral.config import Limits
from corral.sandbox.launcher import wait_for_exit


def _no_sleeping(*_: object) -> None:
    raise AssertionError("time.sleep was called while closing")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_close_waits_on_its_processes_without_sleeping(
    workspace: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sandbox = Sandbox(str(workspace))
    assert sandbox.call("read_file", {"path": "hello.txt"})["ok"]
    pids = sandbox.pids()
    zygote, workers = pids["zygote"], pids["workers"]
    monkeypatch.setattr(time, "sleep", _no_sleeping)
    sandbox.close()
    monkeypatch.undo()
    # gone the moment close returns: nothing to wait for
    assert all(_gone(pid) for pid in [zygote, *workers])
    assert zygote not in {child.pid for child in psutil.Process().children()}
    with pytest.raises(ChildProcessError):  # reaped by close, not left a zombie
        os.waitpid(zygote, os.WNOHANG)


def test_wait_for_exit_without_pidfd_asks_the_kernel_until_it_exits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a kernel before 5.3 has no pidfd_open: the wait still ends, and leaves the
    # child unreaped, as the pidfd wait does (its exit code is still there to take)
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    def enosys(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", enosys)
    assert wait_for_exit(process.pid, 30.0)
    assert process.wait(0) == 3


def test_wait_for_exit_gives_up_at_its_timeout() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not wait_for_exit(process.pid, 0.05)
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()
    assert wait_for_exit(process.pid, 0.05)  # already reaped: nothing to wait on


def test_stop_calls_ends_a_running_call_at_once(workspace: Path) -> None:
    """Sandbox.stop_calls (a server's ^C): the call in flight fails worker_crashed
    long before its timeout, and the sandbox still closes cleanly."""
    (workspace / "slow.txt").write_text("a" * 40 + "b\n")
    with Sandbox(workspace, limits=Limits(timeout_s=60)) as sandbox, \
            ThreadPoolExecutor(1) as threads:
        slow = threads.submit(sandbox.call, "grep", {"pattern": "(a+)+$"})  # backtracks
        while not busy(sandbox):
            time.sleep(0.01)
        sandbox.stop_calls()
        assert slow.result(timeout=30)["error"]["code"] == "worker_crashed"


def busy(sandbox: Sandbox) -> bool:
    return sandbox.stats()["busy_workers"] > 0
