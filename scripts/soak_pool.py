"""Soak the confined pool: mixed calls from several threads while a killer thread
SIGKILLs workers at random. The pool must heal and leak nothing.

    python scripts/soak_pool.py [--calls 5000] [--threads 6] [--kills 200] [--seed 1]

Checks: every answer is ok, or worker_crashed for a call whose worker was
killed; at the end the pool is back to size and serves, the workspace holds no
temp file, and after close() the host has the fds and threads it had before
and no child process but the zygote template (which lives as long as the host).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.fs._atomic import TEMP_PREFIX
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker
from corral.sandbox.launcher import template_pids, warm

WORKERS = 3
# The killer pauses this long between kills, so calls also run on settled workers.
KILL_GAP_S = 0.01
# A worker first seen this recently is spared: it may still be starting.
SPARE_NEW_S = 0.1
# A round's write that was killed leaves the old file (or none): its reads may then
# miss the file, its edits the text the write would have brought.
AFTER_A_CRASH = ("not_found", "no_match")


class SoakError(AssertionError):
    """The pool did not heal, or something leaked."""


def requests_for(thread: int, i: int) -> list[dict[str, Any]]:
    """A mix of the tools on this thread's own files (answers are then predictable)."""
    own = f"t{thread}/f{i % 5}.txt"
    calls = [
        ("write_file", {"path": own, "content": f"thread {thread} call {i}\n" * 50}),
        ("read_file", {"path": own}),
        ("append_file", {"path": f"t{thread}/log.txt", "content": f"{i}\n"}),
        ("edit_file", {"path": own, "old_string": "call", "new_string": "CALL",
                       "replace_all": True}),
        ("list_directory", {"path": f"t{thread}"}),
        ("grep", {"pattern": r"CALL \d+", "path": f"t{thread}", "max_results": 5}),
        ("stat_file", {"path": own}),
        ("copy_file", {"source": own, "destination": f"t{thread}/copy.txt", "overwrite": True}),
    ]
    return [{"tool": tool, "arguments": arguments, "approved": []} for tool, arguments in calls]


def caller(broker: Broker, thread: int, calls: int, tally: Counter[str], lock: threading.Lock,
           problems: list[str]) -> None:
    done = 0
    i = 0
    while done < calls:
        crashed = False  # a write killed this round: later calls may miss its file or text
        for request in requests_for(thread, i):
            if done >= calls:
                break
            answer = broker.submit(CallRequest(**request)).public()
            done += 1
            code = "ok" if answer["ok"] else answer["error"]["code"]
            crashed = crashed or code == "worker_crashed"
            with lock:
                tally[code] += 1
                if code not in ("ok", "worker_crashed") and not (
                    crashed and code in AFTER_A_CRASH
                ):
                    problems.append(f"{request['tool']}: {answer['error']}")
        i += 1


def killer(broker: Broker, kills: int, rng: random.Random, stop: threading.Event) -> int:
    """Kill workers seen for at least SPARE_NEW_S: a worker killed again and again
    while it starts halts the pool by design (pool.MAX_BOOT_KILLS), which on a
    loaded machine a 10 ms killer would otherwise do to it."""
    done = 0
    first_seen: dict[int, float] = {}
    while done < kills and not stop.is_set():
        now = time.monotonic()
        first_seen = {pid: first_seen.get(pid, now) for pid in broker.pids()["workers"]}
        workers = [pid for pid, seen in first_seen.items() if now - seen >= SPARE_NEW_S]
        if workers:
            try:
                os.kill(rng.choice(workers), signal.SIGKILL)
                done += 1
            except ProcessLookupError:
                pass
        time.sleep(KILL_GAP_S * rng.random() * 2)
    return done


def soak(workspace: Path, calls: int, threads: int, kills: int, seed: int) -> dict[str, Any]:
    """Run the soak; SoakError on the first broken promise. Returns the tally."""
    rng = random.Random(seed)
    for thread in range(threads):
        (workspace / f"t{thread}").mkdir(exist_ok=True)
    host = psutil.Process()
    warm()  # the zygote template and its channel live as long as this process
    fds_before = set(os.listdir("/proc/self/fd"))
    threads_before = threading.active_count()
    broker = Broker(
        [RootSpec(str(workspace), "rw")], Limits(), Policy(), SandboxOptions(workers=WORKERS)
    )
    tally: Counter[str] = Counter()
    lock = threading.Lock()
    problems: list[str] = []
    stop = threading.Event()
    killed: list[int] = []
    try:
        callers = [
            threading.Thread(target=caller, args=(broker, t, calls // threads, tally, lock,
                                                  problems))
            for t in range(threads)
        ]
        kill_thread = threading.Thread(
            target=lambda: killed.append(killer(broker, kills, rng, stop))
        )
        for thread in [*callers, kill_thread]:
            thread.start()
        for thread in callers:
            thread.join()
        stop.set()
        kill_thread.join()
        if problems:
            raise SoakError(f"unexpected errors: {problems[:5]}")
        if tally["worker_crashed"] > killed[0]:
            raise SoakError(f"{tally['worker_crashed']} crashes from {killed[0]} kills")
        healed = broker.submit(CallRequest("read_file", {"path": "t0/log.txt"}))
        if not healed.ok or len(broker.pids()["workers"]) != WORKERS:
            raise SoakError(f"the pool did not heal: {healed}, {broker.pids()}")
        temps = [p for p in workspace.rglob(f"{TEMP_PREFIX}*")]
        if temps:
            raise SoakError(f"temp files left behind: {temps[:5]}")
    finally:
        stop.set()
        broker.close()
    leaked_fds = set(os.listdir("/proc/self/fd")) ^ fds_before
    if leaked_fds:
        raise SoakError(f"the host's fds changed: {sorted(leaked_fds)}")
    # (a zygote the template has not reaped yet is a zombie: it runs nothing)
    left = [p for p in host.children(recursive=True)
            if p.pid not in template_pids() and p.status() != psutil.STATUS_ZOMBIE]
    if left:
        raise SoakError(f"processes left behind: {left}")
    if threading.active_count() != threads_before:
        raise SoakError(f"threads left behind: {threading.enumerate()}")
    return {"answers": dict(tally), "kills": killed[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-soak-") as workspace:
        started = time.perf_counter()
        report = soak(Path(workspace), args.calls, args.threads, args.kills, args.seed)
    print(f"{args.calls} calls, {report['kills']} kills in {time.perf_counter() - started:.1f} s:"
          f" {report['answers']}; healed, nothing leaked")


if __name__ == "__main__":
    main()
