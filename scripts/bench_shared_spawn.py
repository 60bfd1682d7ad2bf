"""Benchmark of a shared pool's worker start (fork + setup + policy + confine).

    python scripts/bench_shared_spawn.py [--sandboxes 6] [--calls 120]

A corral.Pool of 2 workers and more sandboxes, called in turn: every call finds
no worker of its sandbox and forks one (evicting another's idle worker). Reports,
in one run, for sandboxes with no rules of their own and with the workspace
config's most (64 rules of 16 globs): that cold call's median and p99, beside a
warm call through the pool and the same stat_file run in-process (same tool
code, no IPC, no fork); and what building the policy from its JSON text costs
(what each shared pool's worker now does once, after its fork).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_tenants import STAT, in_process, make_workspaces, ms, percentile, timed

from corral import Pool
from corral.config import WORKSPACE_MAX_GLOBS_PER_RULE, WORKSPACE_MAX_RULES
from corral.policy import Policy, Rule


def policy_with(rules: int) -> Policy:
    return Policy(rules=tuple(
        Rule(f"r{i}", "deny", ("*",),
             tuple(f"d{i}/g{j}/**" for j in range(WORKSPACE_MAX_GLOBS_PER_RULE)))
        for i in range(rules)
    ))


def bench_cold(workspaces: list[str], policy: Policy, calls: int) -> dict[str, list[float]]:
    with Pool(max_workers=2, idle_timeout_s=60.0) as pool:
        sandboxes = [pool.sandbox(path, policy=policy) for path in workspaces]
        for sb in sandboxes:
            sb._executor._sweep.result()
        cold = []
        for index in range(calls):
            sb = sandboxes[index % len(sandboxes)]
            start = time.perf_counter()
            assert sb.call("stat_file", dict(STAT))["ok"]
            cold.append(time.perf_counter() - start)
        warm = timed(lambda: sandboxes[0].call("stat_file", dict(STAT)), calls)
    return {"cold": cold, "warm": warm}


def build_cost(policy: Policy, count: int) -> list[float]:
    """As in a new worker: re's cache of compiled patterns purged first (a fork
    inherits the zygote's, which holds no sandbox's globs)."""
    text = json.dumps(policy.to_dict())

    def build() -> None:
        re.purge()
        Policy()  # the built-in rules, compiled in the template: not this build's cost
        start = time.perf_counter()
        Policy.from_dict(json.loads(text))
        samples.append(time.perf_counter() - start)

    samples: list[float] = []
    for _ in range(count):
        build()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=6)
    parser.add_argument("--calls", type=int, default=120)
    args = parser.parse_args()
    Policy()  # the built-in rules, compiled once per process as the template does
    with tempfile.TemporaryDirectory() as top:
        workspaces = make_workspaces(top, args.sandboxes)
        reference = statistics.median(timed(in_process(workspaces[0]), 500))
        print(f"in-process stat_file: median {ms(reference)}")
        for rules in (0, WORKSPACE_MAX_RULES):
            policy = policy_with(rules)
            run = bench_cold(workspaces, policy, args.calls)
            cold, warm = statistics.median(run["cold"]), statistics.median(run["warm"])
            build = statistics.median(build_cost(policy, 20))
            print(f"{rules:2d} rules: cold call median {ms(cold)} p99 "
                  f"{ms(percentile(run['cold'], 0.99))} ({cold / reference:5.0f}x in-process, "
                  f"{cold / warm:4.1f}x warm {ms(warm)}); policy build {ms(build)}")


if __name__ == "__main__":
    main()
