"""A private Sandbox shared by threads serves their calls in arrival order: a
thread's one call waits behind the calls already queued, not behind every call
that busy threads keep issuing (they used to take each freed worker back at once)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox, testing
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker

BUSY_THREADS = 4
BUSY_CALLS = 200  # each; the busy threads stop after these whatever happens


@pytest.mark.parametrize("workers", [1, 2])
def test_a_call_is_served_after_the_calls_queued_before_it(workspace: Path, workers: int) -> None:
    served = 0  # busy calls answered so far
    lock = threading.Lock()
    started = threading.Barrier(BUSY_THREADS + 1)
    with Sandbox(workspace, options=SandboxOptions(workers=workers)) as sandbox:

        def busy() -> None:
            nonlocal served
            started.wait()
            for _ in range(BUSY_CALLS):
                assert sandbox.call("stat_file", {"path": "hello.txt"})["ok"]
                with lock:
                    served += 1

        threads = [threading.Thread(target=busy) for _ in range(BUSY_THREADS)]
        for thread in threads:
            thread.start()
        started.wait()
        while served < 20:  # every busy thread is looping by now
            threading.Event().wait(0.001)
        with lock:
            before = served
        assert sandbox.call("stat_file", {"path": "hello.txt"})["ok"]
        with lock:
            overtaken = served - before
        for thread in threads:
            thread.join()
    # FIFO: the busy calls queued ahead of it and those in flight, at most one per
    # thread and worker, plus the few answered while it was being queued
    assert overtaken <= BUSY_THREADS + workers + 2, overtaken


@pytest.mark.parametrize("stop", ["halt", "close"])
def test_a_call_waiting_in_line_fails_when_the_pool_stops(workspace: Path, stop: str) -> None:
    broker = Broker([RootSpec(str(workspace), "rw")], Limits(), Policy(), SandboxOptions(workers=1))
    pool = testing.supply(broker)
    held = pool.take()  # the only worker: the next call waits in line
    answers: list[Any] = []
    waiting = threading.Thread(
        target=lambda: answers.append(broker.submit(CallRequest("stat_file", {"path": "."}))))
    try:
        waiting.start()
        while not pool.stats()["queued_calls"]:
            threading.Event().wait(0.001)
        pool.halt("stopped by the test") if stop == "halt" else pool.close()
        waiting.join(30)
        assert not waiting.is_alive()
        assert answers[0].ok is False and answers[0].error["code"] == "worker_crashed"
        pool.give_back(held)  # handed to nobody: the pool has stopped
        assert pool.stats()["idle_workers"] == pool.stats()["queued_calls"] == 0
    finally:
        broker.close()
