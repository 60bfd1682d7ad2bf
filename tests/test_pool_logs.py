"""What an operator sees on the `corral.workers` logger: one line per halt, worker
killed while starting, recycle, eviction and idle reap, each with the worker's
decoded exit. Private sandboxes run on the fake zygote of test_hardening_pool
(fast, and it can kill or fail its workers on cue); the shared pool's lines come
from the real kernel."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from corral import Pool, testing
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.errors import SandboxError
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker
from corral.sandbox.hub import MIN_LIFE_S
from corral.sandbox.protocol import EXIT_CONFINE_FAILED
from tests.helpers.evil_zygote import REQUEST, EvilZygote, Private, honest

LOGGER = "corral.workers"
SETTLE_S = 20.0  # only a safety net: what the tests wait for happens in ms


def lines(caplog: pytest.LogCaptureFixture, level: int, *words: str) -> list[str]:
    """The messages at `level` on LOGGER that contain every one of `words`."""
    return [
        record.getMessage() for record in caplog.records
        if record.name == LOGGER and record.levelno == level
        and all(word in record.getMessage() for word in words)
    ]


def private(**zygote: Any) -> Private:
    options = SandboxOptions(workers=1, max_calls_per_worker=2)
    return Private(EvilZygote(honest, **zygote), options, Limits())


def test_a_halt_is_logged_with_the_exit(caplog: pytest.LogCaptureFixture) -> None:
    pool = private(boot_exit=7)
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(SandboxError):
        pool.workers.start()
    pool.close()
    assert len(lines(caplog, logging.ERROR, "halted", "did not start (exit code 7)")) == 1


def test_a_worker_that_cannot_confine_itself_halts_with_its_exit_logged(
    workspace: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    limits = Limits(max_file_bytes=2**70)  # no rlimit can hold it: confine() fails
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(SandboxError):
        Broker([RootSpec(str(workspace), "rw")], limits, Policy(), SandboxOptions(workers=1))
    (line,) = lines(caplog, logging.ERROR, "halted", "could not confine itself")
    assert f"(exit code {EXIT_CONFINE_FAILED})" in line


def test_a_worker_killed_while_starting_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    pool = private(killed_at_boot=1)
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            pool.workers.start()
        logged = lines(caplog, logging.WARNING, "while starting", "killed by SIGKILL")
        assert len(logged) == 1
        assert not lines(caplog, logging.ERROR)  # replaced, not halted
    finally:
        pool.close()


def test_a_recycle_is_logged_with_the_exit(caplog: pytest.LogCaptureFixture) -> None:
    pool = private()
    try:
        pool.workers.start()
        (first,) = pool.pids()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            for number in (1, 2):  # max_calls_per_worker=2 (its jitter rounds to 0)
                assert pool.call(CallRequest(**REQUEST, id=number)).ok
        assert lines(caplog, logging.INFO, f"worker {first} recycled after 2 calls",
                     "killed by SIGKILL")
        assert pool.pids() != [first]
    finally:
        pool.close()


def wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_an_eviction_is_logged_with_the_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    with Pool(max_workers=1) as pool, caplog.at_level(logging.INFO, logger=LOGGER):
        first = pool.sandbox(tmp_path / "a")
        assert first.call("stat_file", {"path": "."})["ok"]
        (held,) = first.pids()["workers"]
        time.sleep(MIN_LIFE_S)  # the worker may be taken only once it has lived this long
        second = pool.sandbox(tmp_path / "b")  # its start sweep takes first's only worker
        assert second.call("stat_file", {"path": "."})["ok"]
        assert lines(caplog, logging.INFO, f"worker {held} evicted", "killed by SIGKILL")


def test_an_idle_reap_is_logged_with_the_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    with Pool(max_workers=1, idle_timeout_s=0.1) as pool, \
            caplog.at_level(logging.INFO, logger=LOGGER):
        sandbox = pool.sandbox(tmp_path)
        testing.sweep(testing.broker(sandbox)).result()  # its worker idle from now on
        (idle,) = sandbox.pids()["workers"]
        wait_for(lambda: lines(caplog, logging.INFO, f"worker {idle} reaped"), "the reap")
        assert lines(caplog, logging.INFO, f"worker {idle} reaped", "killed by SIGKILL")
