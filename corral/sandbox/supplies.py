"""What both supplies of workers (worker_set.WorkerSet, hub.Lane) do alike:
fork a worker, check its boot report (and halt, failing closed, on a worker
that is not confined as its supply's), note a death the host did not cause,
and the start-up sweep of the temp files of writers that died unseen. Each
supply owns its own worker table; these verbs own none (gunicorn's arbiter.py
and dirty/arbiter.py: the same verbs, one owner per table).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from corral.calls.control import SandboxSetup
from corral.calls.messages import FindTemps, Malformed, Removed, RemoveTemps, TempList
from corral.calls.waiting import PLAIN
from corral.config import SandboxOptions
from corral.observe import Observer
from corral.sandbox.call_path import Supply
from corral.sandbox.handles import (
    Worker,
    WorkerLost,
    WorkerMisbehaved,
    ZygoteHandle,
    describe_exit,
)
from corral.sandbox.protocol import EXIT_CONFINE_FAILED, ProtocolError, encode

# A worker that reported it could not confine itself exits at once; its own exit code
# (EXIT_CONFINE_FAILED) is awaited this long before it is killed, so the halt names it.
CONFINE_FAILED_EXIT_S = 5.0
# Workers recycle after max_calls plus up to this fraction more, so they do not all go at once.
RECYCLE_JITTER = 0.1
# Starting workers killed from outside (OOM killer, an operator) are replaced this
# many times in a row; more means something keeps killing them: halt, do not loop.
MAX_BOOT_KILLS = 3

# Every worker's end an operator should see (a halt, a kill at boot, a recycle, an
# eviction, an idle reap), with its decoded exit; a call's crash too (call_path.py).
log = logging.getLogger("corral.workers")

# What a sweep's exchange may fail with: the sweep then removes nothing.
SWEEP_FAILURES = (WorkerLost, TimeoutError, ProtocolError, Malformed)


class BootKilled(Exception):
    """A new worker was SIGKILLed from outside before it reported: not its own failure."""


def fork_worker(
    zygote: ZygoteHandle, options: SandboxOptions, setup: SandboxSetup | None = None,
    root_fds: Sequence[int] = (), jitter: bool = True,
) -> Worker:
    """Have the zygote fork one worker (for a shared pool's sandbox: its `setup` and
    root fds). jitter: recycle it up to RECYCLE_JITTER later than max_calls_per_worker."""
    pid, sock, pidfd = zygote.spawn(setup, root_fds)
    limit = options.max_calls_per_worker
    # os.urandom, not random: that module costs `corral call` ~1.4 ms of CPU to import
    # (it loads hashlib and seeds a generator) for one number a worker
    spread = int(limit * RECYCLE_JITTER) + 1
    extra = int.from_bytes(os.urandom(4), "little") % spread if jitter else 0
    return Worker(pid, sock, pidfd, limit + extra, born=time.monotonic())


def check_boot(
    worker: Worker, max_bytes: int, confinement: dict[str, Any],
    kill: Callable[[Worker], int | None], halt: Callable[[str], None],
    died: Callable[[int | None], None],
) -> bool:
    """Read a new worker's report: True if it came up confined as `confinement` (any
    way, if that is still empty). Otherwise `kill` kills and reaps it, `halt` fails
    its supply closed with the worker's decoded exit, and False; BootKilled instead
    if something outside SIGKILLed it before it reported (the OOM killer, an
    operator): not its own failure. A worker that ended before it reported is told
    to `died` (Supply.died) either way: a SIGSYS while it starts is one too."""
    report = worker.boot(max_bytes)
    if worker.layers is None:
        ended_alone = report is None and not worker.looks_alive()
        if report is not None and report.confine_error:
            worker.ended_within(CONFINE_FAILED_EXIT_S)  # its exit code, not our SIGKILL
        code = kill(worker)
        if ended_alone:
            died(code)
        ended = describe_exit(code, "it sent no report")
        if report is not None and report.confine_error:
            halt(f"a worker could not confine itself: {report.confine_error} ({ended})")
        elif code == EXIT_CONFINE_FAILED:
            halt(f"a worker could not confine itself ({ended})")
        elif ended_alone and code == -signal.SIGKILL:
            log.warning("corral: worker %d was %s while starting, before it reported",
                        worker.pid, ended)
            raise BootKilled(ended)
        else:
            halt(f"a worker did not start ({ended})")
        return False
    if confinement and worker.layers != confinement:
        code = kill(worker)
        halt(f"a worker came up confined differently ({worker.layers}; "
             f"{describe_exit(code, 'gone')})")
        return False
    return True


def halt_if_unconfined(code: int | None, halt: Callable[[str], None]) -> None:
    """A worker that ended with EXIT_CONFINE_FAILED halts its supply: one that
    respawned would either loop forever or, worse, serve unconfined."""
    if code == EXIT_CONFINE_FAILED:
        halt(f"a worker could not confine itself ({describe_exit(code, '')})")


def log_halt(reason: str) -> None:
    log.error("corral: a sandbox halted, failing closed: %s", reason)


def sweep_on(worker: Worker, max_bytes: int, timeout_s: float) -> int:
    """Remove the temp files of writers that died mid-write unseen (a killed host's
    workers die with it): `worker` lists every temp file; the host keeps those whose
    writer's pid is alive now (another sandbox's worker on the same workspace), and
    the worker removes exactly the other names: a pid reused since the listing can
    only keep a file. Returns how many were removed; SWEEP_FAILURES if a request fails."""
    find = FindTemps(1)
    listed = TempList.from_wire(_exchange(worker, find, max_bytes, timeout_s), find)
    dead = tuple((index, path) for index, path, pid in listed.temps if not _alive(pid))
    if not dead:
        return 0
    remove = RemoveTemps(dead, 2)
    return Removed.from_wire(_exchange(worker, remove, max_bytes, timeout_s), remove).removed


def sweep_taken(supply: Supply, worker: Worker, max_bytes: int, timeout_s: float) -> int:
    """sweep_on, on `worker` taken from `supply`: given back if the sweep went well,
    else lost (and a death the host did not cause told, as a call's would be)."""
    try:
        removed = sweep_on(worker, max_bytes, timeout_s)
    except WorkerLost as exc:  # it died under the sweep: of something outside, unless
        code = supply.lost(worker)  # it misbehaved (then the host killed it)
        if not isinstance(exc, WorkerMisbehaved):
            supply.died(code)
        return 0
    except SWEEP_FAILURES:
        supply.lost(worker)
        return 0
    supply.give_back(worker)
    return removed


def _exchange(
    worker: Worker, request: FindTemps | RemoveTemps, max_bytes: int, timeout_s: float,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    return worker.exchange(encode(request.to_wire(), max_bytes), deadline, max_bytes, PLAIN)


def _alive(pid: int) -> bool:
    """A process that can still write: a zombie (dead, not yet reaped) cannot."""
    import psutil  # here, as in Worker.rss_mb

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: keep its file


def note_death(observer: Observer | None, code: int | None) -> None:
    """Tell `observer` how a worker the host did not kill ended (Observer.on_worker_death)."""
    if observer is None:
        return
    if code is None:
        how = "unknown"
    elif code >= 0:
        how = "exit"
    else:
        try:
            how = signal.Signals(-code).name
        except ValueError:  # a real-time signal: a label of its own each would be unbounded
            how = "unknown"
    observer.on_worker_death(how)
