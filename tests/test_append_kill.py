"""A worker killed by SIGKILL inside a big append_file: the append is whole or cut
back once the pool has settled the dead worker's record, and history agrees with
the file (scripts/kill_soak.py --record-bytes runs the long version)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

from corral import Sandbox, testing
from corral.config import Limits

RECORD = 8 << 20  # a write long enough that a kill lands inside it
TRIES = 6


def _kill_when_growing(path: Path, old: int, pid: int, done: threading.Event) -> list[int]:
    """SIGKILL `pid` once `path` holds part of the append; the size it saw."""
    seen: list[int] = []

    def watch() -> None:
        while not done.is_set():
            size = path.stat().st_size
            if old < size < old + RECORD:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                seen.append(size)
                return

    threading.Thread(target=watch, daemon=True).start()
    return seen


def test_a_worker_killed_mid_append_leaves_it_whole_or_cut_back(workspace: Path) -> None:
    log = workspace / "log.txt"
    log.write_bytes(b"first\n")
    limits = Limits(max_write_bytes=RECORD, max_file_bytes=TRIES * RECORD + 1024)
    landed_inside = 0
    with Sandbox(workspace, workers=1, limits=limits) as sb:
        for n in range(TRIES):
            old = log.stat().st_size
            before = log.read_bytes()
            record = f"{n:07d}\n" * (RECORD // 8)
            done = threading.Event()
            seen = _kill_when_growing(log, old, sb.pids()["workers"][0], done)
            answer = sb.call("append_file", {"path": "log.txt", "content": record})
            done.set()
            now = log.read_bytes()
            assert now in (before, before + record.encode()), (n, len(before), len(now))
            if not answer["ok"]:
                assert answer["error"]["code"] == "worker_crashed", answer
                landed_inside += bool(seen)
            last = sb.history("log.txt", limit=1)
            work = Path(testing.history(sb).work_path)  # where workers write their records
            assert not [p for p in work.iterdir() if p.name.endswith((".pending", ".done"))]
            if now != before:  # the append landed: its record says so
                assert last and last[0]["after"]["size"] == len(now)
    assert landed_inside >= 1  # at least one kill found the append half-written
