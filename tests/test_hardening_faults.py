"""Faults around a real sandbox: the zygote dying under a call in flight, and an
AsyncSandbox call cancelled while its worker runs. Neither may hang the host or
leak a worker checkout."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from corral import AsyncSandbox, testing
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker

SLOW_LINE = "a" * 40 + "!\n"  # (a+)+$ backtracks through every split of the run
SLOW = {"tool": "grep", "arguments": {"pattern": "(a+)+$", "path": "slow.txt"}, "approved": []}
READ = {"tool": "read_file", "arguments": {"path": "hello.txt"}, "approved": []}
SAFETY_NET_S = 60.0  # only a broken build waits this long; no test asserts a duration


def busy(pool_idle: list[Any]) -> None:
    """Wait until the only worker has been checked out (the slow call is running)."""
    deadline = time.monotonic() + SAFETY_NET_S
    while pool_idle and time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_zygote_killed_under_a_call_fails_it_at_once_and_halts(workspace: Path) -> None:
    (workspace / "slow.txt").write_text(SLOW_LINE)
    broker = Broker(
        [RootSpec(str(workspace), "rw")], Limits(timeout_s=SAFETY_NET_S), Policy(),
        SandboxOptions(workers=1),
    )
    answers: list[dict[str, Any]] = []
    slow = CallRequest(**SLOW)
    caller = threading.Thread(target=lambda: answers.append(broker.submit(slow).public()))
    caller.start()
    busy(testing.idle_workers(broker))
    os.kill(broker.pids()["zygote"], signal.SIGKILL)
    caller.join(SAFETY_NET_S)
    try:
        assert not caller.is_alive()
        # the worker died with its zygote (death signal): a crash, not a timeout
        assert answers[0]["error"]["code"] == "worker_crashed"
        again = broker.submit(CallRequest(**READ)).public()
        assert again["error"]["code"] == "worker_crashed"
        assert "halted" in again["error"]["message"]
    finally:
        broker.close()


def test_a_cancelled_async_call_does_not_leak_its_worker(workspace: Path) -> None:
    (workspace / "slow.txt").write_text(SLOW_LINE)

    async def scenario() -> dict[str, Any]:
        sandbox = AsyncSandbox(workspace, workers=1, limits=Limits(timeout_s=0.5))
        try:
            idle = testing.idle_workers(testing.broker(sandbox))
            slow = asyncio.create_task(sandbox.call("grep", SLOW["arguments"]))
            await asyncio.to_thread(busy, idle)
            assert not idle  # the slow call holds the only worker
            slow.cancel()
            await asyncio.gather(slow, return_exceptions=True)
            # the one worker comes back (replaced after its timeout), so this is served
            return await asyncio.wait_for(sandbox.call("read_file", {"path": "hello.txt"}),
                                          SAFETY_NET_S)
        finally:
            await sandbox.aclose()

    assert asyncio.run(scenario())["ok"] is True
