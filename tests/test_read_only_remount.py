"""A worker forked while its workspace's file system was read-only copied that
into its mount namespace; once the file system is remounted read-write, the
worker that answered read_only is recycled and the next write lands (as root: a
tmpfs of the test's own, remounted; skipped only where it cannot be mounted)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Pool, Sandbox
from corral.config import HistoryOptions
from tests.helpers.scripts_loader import load_script

enospc = load_script("enospc")


def _remount(mount: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mount)], check=True)


def _write(sb: Sandbox, content: str) -> dict[str, Any]:
    """write_file, past the call that meets a worker killed by the test."""
    for _ in range(2):
        answer = sb.call("write_file", {"path": "a.txt", "content": content})
        if answer["ok"] or answer["error"]["code"] != "worker_crashed":
            break
    return answer


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    try:
        with enospc.small_tmpfs(tmp_path) as mount:
            yield mount
    except enospc.CannotMount as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")


@pytest.mark.parametrize("pooled", [False, True], ids=["private", "pooled"])
def test_a_worker_forked_read_only_is_recycled_after_the_remount(
    tmpfs: Path, pooled: bool
) -> None:
    ws = tmpfs / "ws"
    ws.mkdir()
    pool = Pool() if pooled else None
    off = HistoryOptions(enabled=False)
    sb = pool.sandbox(ws, history=off) if pool is not None else Sandbox(ws, history=off)
    try:
        assert _write(sb, "1")["ok"]
        _remount(tmpfs, "ro")
        try:
            for pid in sb.pids()["workers"]:  # the next worker is forked read-only
                os.kill(pid, signal.SIGKILL)
            refused = _write(sb, "2")
            assert refused["error"]["code"] == "read_only", refused
        finally:
            _remount(tmpfs, "rw")
        # the worker that answered read_only is gone; at most one more answers it (a
        # private sandbox's spare, forked before the remount), then writes land
        answers = [_write(sb, "3") for _ in range(2)]
        assert answers[-1]["ok"], answers
        assert (ws / "a.txt").read_text() == "3"
    finally:
        sb.close()
        if pool is not None:
            pool.close()
