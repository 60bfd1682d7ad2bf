"""Calls through a Broker and waits for its processes, shared by the pool, fault
and malloc tests (the `make_broker` fixture is in conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from corral.calls.messages import Answer, CallRequest
from corral.sandbox.broker import Broker
from corral.sandbox.launcher import template_pids

GONE_WAIT_S = 20.0  # only a safety net for a broken test: processes normally vanish in ms

MakeBroker = Callable[..., Broker]


def call(broker: Broker, tool: str, **arguments: Any) -> dict[str, Any]:
    return as_result(broker.submit(CallRequest(tool, arguments)))


def as_result(answer: Answer) -> dict[str, Any]:
    """An answer as the result dict and its meta (the id is the broker's own)."""
    return {**answer.public(), "meta": answer.meta}


def wait_gone(pids: list[int]) -> list[int]:
    """The pids still running (zombies count as gone) once all vanish or time runs out."""
    deadline = time.monotonic() + GONE_WAIT_S
    while True:
        alive = [pid for pid in pids if running(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def left_running() -> list[int]:
    """This process's running descendants, but the zygote templates (which live as
    long as the process, whatever its sandboxes do)."""
    templates = template_pids()
    return [p.pid for p in psutil.Process().children(recursive=True)
            if running(p.pid) and p.pid not in templates]


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# What the kernel says of a process's confinement, beside its boot report.
KERNEL_STATUS = ("NoNewPrivs", "Seccomp", "Seccomp_filters", "CapEff", "CapPrm", "CapBnd")


def kernel_view(pid: int) -> dict[str, str]:
    """KERNEL_STATUS of /proc/PID/status, its limits and how many mounts it sees: two
    workers confined alike show the same view."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    status = {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}
    view = {key: status[key] for key in KERNEL_STATUS}
    view["limits"] = Path(f"/proc/{pid}/limits").read_text()
    view["mounts"] = str(len(Path(f"/proc/{pid}/mounts").read_text().splitlines()))
    return view
