"""Waking a sleeping worker when a request is on its way (Sandbox.wake, a POKE on
its socket): the worker wakes, finds no request, sleeps again, and serves the
next call as before; a face calls wake as soon as a line's first bytes are in."""

from __future__ import annotations

import io
import os
import socket
import time
from pathlib import Path

import pytest

from corral import Sandbox, testing
from corral.config import SandboxOptions
from corral.faces.stdio import read_lines
from corral.sandbox.handles import Worker
from corral.sandbox.protocol import POKE, POKED, ProtocolError, encode, read_sole_frame

LIMIT = 1024 * 1024


def _status(pid: int) -> tuple[str, int]:
    """(state letter, voluntary context switches) of a process."""
    with open(f"/proc/{pid}/stat") as stat:
        state = stat.read().rsplit(")", 1)[1].split()[0]
    with open(f"/proc/{pid}/status") as status:
        switches = next(int(line.split()[1]) for line in status
                        if line.startswith("voluntary_ctxt_switches"))
    return state, switches


def _asleep(pid: int, after: int = -1) -> int:
    """Wait until the worker sleeps in its blocking read (state S: polling with
    sched_yield keeps it runnable) with more than `after` voluntary context switches
    (a poked worker may not have run yet: its old sleep is not the new one); its
    switches then."""
    for _ in range(5000):
        state, switches = _status(pid)
        if state == "S" and switches > after:
            return switches
        time.sleep(0.001)
    raise AssertionError(f"worker {pid} never went to sleep again (state {state}, "
                         f"{switches} switches)")


def _idle_worker(sb: Sandbox) -> Worker:
    """The sandbox's idle worker, once it has one: right after its first call, that
    call's worker sweeps stale temps before it is idle again."""
    idle = testing.idle_workers(testing.broker(sb))
    for _ in range(5000):
        if idle:
            return idle[-1]
        time.sleep(0.001)
    raise AssertionError("no worker became idle")


def test_read_sole_frame_skips_pokes() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(POKE)
        assert read_sole_frame(ours.fileno(), LIMIT, pokes=True) is POKED
        theirs.sendall(POKE + POKE + encode({"id": 1}, LIMIT))  # one read holds them all
        assert read_sole_frame(ours.fileno(), LIMIT, pokes=True) == {"id": 1}
        theirs.sendall(encode({"id": 2}, LIMIT))
        assert read_sole_frame(ours.fileno(), LIMIT, pokes=True) == {"id": 2}
        theirs.sendall(POKE)  # to anyone but a worker an empty frame is no message
        with pytest.raises(ProtocolError):
            read_sole_frame(ours.fileno(), LIMIT)


def test_a_poked_worker_without_a_request_sleeps_again_and_serves(sb: Sandbox, ws: Path) -> None:
    (ws / "a.txt").write_text("one\n")
    assert sb.call("stat_file", {"path": "a.txt"})["ok"]
    worker = _idle_worker(sb)
    for _ in range(3):
        before = _asleep(worker.pid)
        sb.wake()
        assert worker.poked
        _asleep(worker.pid, after=before)  # it woke up, found no request, and slept again
        assert worker.looks_alive()  # and said nothing on its socket
        sb.wake()  # poked already: nothing more is sent until its next call
        worker.poked = False  # as if its next call had come: it may be poked again
    result = sb.call("read_file", {"path": "a.txt"})
    assert result["ok"] and result["result"]["content"] == "one\n"
    assert sb.pids()["workers"] == [worker.pid]  # the same worker, never replaced


def test_pokes_beside_a_request_are_skipped(sb: Sandbox, ws: Path) -> None:
    """Pokes that land with a request (the worker was slow to wake) are skipped."""
    (ws / "a.txt").write_text("two\n")
    worker = _idle_worker(sb)
    os.write(worker.sock.fileno(), POKE * 3)
    assert sb.call("read_file", {"path": "a.txt"})["result"]["content"] == "two\n"
    assert sb.pids()["workers"] == [worker.pid]


def test_an_awake_worker_is_not_poked(sb: Sandbox, ws: Path) -> None:
    (ws / "a.txt").write_text("x")
    sb.call("stat_file", {"path": "a.txt"})
    worker = _idle_worker(sb)
    worker.idle_since = time.monotonic() + 60  # just answered: it is still polling
    sb.wake()
    assert not worker.poked


def test_no_poke_without_spin(ws: Path) -> None:
    with Sandbox(ws, workers=1, options=SandboxOptions(spin=False)) as quiet:
        quiet.call("list_directory", {})
        worker = _idle_worker(quiet)
        _asleep(worker.pid)
        quiet.wake()
        assert not worker.poked


def test_wake_after_close_is_a_no_op(ws: Path) -> None:
    sandbox = Sandbox(ws)
    sandbox.close()
    sandbox.wake()


def test_read_lines_calls_arrived_before_each_line() -> None:
    seen: list[str] = []
    stream = io.BufferedReader(io.BytesIO(b'{"a": 1}\n\n{"b": 2}\n'))  # type: ignore[arg-type]
    lines = read_lines(stream, arrived=lambda: seen.append("arrived"))
    for line in lines:
        seen.append(line.decode() if line else "")
    assert seen == ["arrived", '{"a": 1}', "arrived", "arrived", '{"b": 2}']  # one for the blank
