"""A shared pool's sandbox closing while one of its workers is being forked: the
root fds that fork sends stay the sandbox's own until it has sent them (closed
under it, their numbers could be reused by another sandbox's roots)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.calls.control import SandboxSetup
from corral.config import Limits, SandboxOptions
from corral.errors import SandboxError
from corral.policy import Policy, RootSpec
from corral.sandbox import hub as hub_module
from corral.sandbox.hub import Hub


def test_closing_a_lane_waits_for_a_fork_that_holds_its_root_fds(
    ws: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_fork = hub_module.fork_worker
    forking, resume = threading.Event(), threading.Event()
    seen: list[Any] = []

    def paused_fork(zygote: Any, options: Any, setup: Any = None,
                    root_fds: Sequence[int] = (), jitter: bool = True) -> Any:
        forking.set()
        resume.wait()
        for fd in root_fds:  # what the worker is about to be sent
            try:
                seen.append(os.fstat(fd).st_ino)
            except OSError as exc:
                seen.append(exc)
        return real_fork(zygote, options, setup, root_fds, jitter=jitter)

    hub = Hub(max_workers=2, idle_timeout_s=30.0)
    try:
        setup = SandboxSetup.of([RootSpec(str(ws), "rw")], Limits(), Policy(), SandboxOptions())
        lane = hub.open_lane(setup)
        monkeypatch.setattr(hub_module, "fork_worker", paused_fork)

        def take() -> None:
            # the lane may close under it: that is fine, sending closed fds is not
            with contextlib.suppress(SandboxError):
                lane.give_back(lane.take())

        taker = threading.Thread(target=take)
        taker.start()
        assert forking.wait(30)
        closer = threading.Thread(target=lane.close)
        closer.start()
        closer.join(1.0)  # time for close() to reach the fds (it must wait instead)
        resume.set()
        taker.join(30)
        closer.join(30)
        assert not taker.is_alive() and not closer.is_alive()
        assert seen == [os.stat(ws).st_ino]
        assert lane.root_fds == []
    finally:
        resume.set()
        hub.close()
