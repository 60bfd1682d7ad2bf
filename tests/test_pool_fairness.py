"""A private Sandbox shared by threads serves their calls in arrival order: a
thread's one call waits behind the calls already queued, not behind every call
that busy threads keep issuing (they used to take each freed worker back at once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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
SAFETY_NET_S = 120.0  # a wait that never ends fails the test instead of hanging it


def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SAFETY_NET_S
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {SAFETY_NET_S} s"
        threading.Event().wait(0.001)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_call_is_served_after_the_calls_queued_before_it(workspace: Path, workers: int) -> None:
    """Every worker held, each busy thread queues its first call, then the probe
    queues; one worker is given back and serves the line alone. Each busy call
    writes its own file and the probe lists them, so what it sees is the order the
    worker served the calls in, whatever the scheduler does to the threads: the
    four first calls queued before it, and none of the calls issued after them."""
    (workspace / "calls").mkdir()
    with Sandbox(workspace, options=SandboxOptions(workers=workers)) as sandbox:
        supply = testing.supply(testing.broker(sandbox))
        held = [supply.take() for _ in range(workers)]  # a second take forks the second
        stop = threading.Event()
        listing: list[dict[str, Any]] = []

        def busy(thread: int) -> None:
            for call in range(BUSY_CALLS):
                if stop.is_set():
                    return
                path = f"calls/t{thread}-{call}.txt"
                assert sandbox.call("write_file", {"path": path, "content": "x"})["ok"]

        def probe() -> None:
            listing.append(sandbox.call("list_directory", {"path": "calls"}))

        threads = [threading.Thread(target=busy, args=(i,)) for i in range(BUSY_THREADS)]
        prober = threading.Thread(target=probe)
        try:
            for thread in threads:
                thread.start()
            _until(lambda: sandbox.stats()["queued_calls"] == BUSY_THREADS, "busy calls queued")
            prober.start()
            _until(lambda: sandbox.stats()["queued_calls"] == BUSY_THREADS + 1, "probe queued")
            supply.give_back(held.pop())  # the others stay held: one worker serves the line
            prober.join(SAFETY_NET_S)
        finally:
            stop.set()
            for worker in held:
                supply.give_back(worker)
            for thread in threads:
                thread.join()
            prober.join()
    (answer,) = listing
    assert answer["ok"], answer
    seen = sorted(entry["name"] for entry in answer["result"]["entries"])
    assert seen == [f"t{i}-0.txt" for i in range(BUSY_THREADS)]


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
