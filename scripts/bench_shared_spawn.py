"""Benchmark of a shared pool's worker start: fork, setup, policy build, confinement.

    python scripts/bench_shared_spawn.py [--starts 25]

Asks a shared pool's zygote (handles.ZygoteHandle(None), as corral.Pool does) for
workers of one sandbox and times each from the request to the worker's boot
report (it has its setup, built its policy and confined itself), for a sandbox
with no rules of its own and one with the workspace config's most (64 rules of
16 globs), taking turns, in one run; beside the same stat_file run in-process
(same tool code, no IPC, no fork) as the unit. Also times building that policy
in a fresh interpreter (what each such worker pays after its fork).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_tenants import in_process, make_workspaces, ms, percentile, timed

import corral
from corral.calls.control import SandboxSetup
from corral.config import WORKSPACE_MAX_GLOBS_PER_RULE, WORKSPACE_MAX_RULES, Limits, SandboxOptions
from corral.policy import Policy, RootSpec, Rule
from corral.sandbox.handles import ZygoteHandle
from corral.sandbox.protocol import read_frame

# A fresh interpreter that has done what the template does, timing one policy build.
BUILD = """
import json, sys, time
from corral.sandbox import zygote
zygote.prepare()
from corral.policy import Policy
text = sys.stdin.read()
start = time.perf_counter()
Policy.from_dict(json.loads(text))
print(time.perf_counter() - start)
"""


def policy_with(rules: int) -> Policy:
    return Policy(rules=tuple(
        Rule(f"r{i}", "deny", ("*",),
             tuple(f"d{i}/g{j}/**" for j in range(WORKSPACE_MAX_GLOBS_PER_RULE)))
        for i in range(rules)
    ))


def start_worker(zygote: ZygoteHandle, setup: SandboxSetup, root_fd: int) -> float:
    """One worker asked for, its boot report read, the worker reaped: seconds."""
    start = time.perf_counter()
    pid, sock, pidfd = zygote.spawn(setup, [root_fd])
    sock.setblocking(True)
    report = read_frame(sock.fileno(), 1 << 20)
    took = time.perf_counter() - start
    assert report is not None and "confinement" in report, report
    sock.close()
    os.close(pidfd)
    zygote.wait(pid)
    return took


def cold_build(policy: Policy) -> float:
    done = subprocess.run(
        [sys.executable, "-c", BUILD], input=json.dumps(policy.to_dict()), text=True,
        capture_output=True, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(corral.__file__).resolve().parents[1])},
    )
    return float(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as top:
        (workspace,) = make_workspaces(top, 1)
        reference = statistics.median(timed(in_process(workspace), 500))
        print(f"in-process stat_file: median {ms(reference)}")
        root_fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY)
        zygote = ZygoteHandle(None)
        try:
            counts = (0, WORKSPACE_MAX_RULES)
            setups = {rules: SandboxSetup.of([RootSpec(workspace, "rw")], Limits(),
                                             policy_with(rules), SandboxOptions())
                      for rules in counts}
            starts: dict[int, list[float]] = {rules: [] for rules in counts}
            for _ in range(args.starts):
                for rules in counts:
                    starts[rules].append(start_worker(zygote, setups[rules], root_fd))
        finally:
            zygote.stop()
            os.close(root_fd)
    for rules in counts:
        median = statistics.median(starts[rules])
        build = statistics.median(cold_build(policy_with(rules)) for _ in range(3))
        print(f"{rules:2d} rules: worker start median {ms(median)} p99 "
              f"{ms(percentile(starts[rules], 0.99))} ({median / reference:5.0f}x in-process "
              f"stat_file); policy build in a fresh interpreter {ms(build)}")


if __name__ == "__main__":
    main()
