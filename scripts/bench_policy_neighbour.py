"""A quiet tenant's first call beside a neighbour with a large policy, in one corral.Pool.

    python scripts/bench_policy_neighbour.py [--rules 10000] [--rounds 10]

Every round starts with no worker alive (the pool's idle timeout has reaped them);
then the neighbour makes two calls at once (two forks) and, right after, the quiet
tenant makes a call, which needs a fork of its own from the same zygote. Its
latency is one fork plus whatever the zygote spends on the neighbour meanwhile.
The neighbour's policy: none; a workspace corral.toml at its bounds
(WORKSPACE_MAX_RULES rules of WORKSPACE_MAX_GLOBS_PER_RULE globs); `--rules`
rules given by the operator (Sandbox's `policy=`). Median and max per kind.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corral import Pool, Sandbox
from corral.config import WORKSPACE_MAX_GLOBS_PER_RULE, WORKSPACE_MAX_RULES
from corral.policy import Policy, Rule

IDLE_S = 0.2
STAT = {"path": "f.txt"}


def workspace(top: str, name: str, config: str = "") -> str:
    path = os.path.join(top, name)
    os.mkdir(path)
    Path(path, "f.txt").write_text(f"{name}\n")
    if config:
        Path(path, "corral.toml").write_text(config)
    return path


def bounded_config() -> str:
    return "".join(
        f'[[rules]]\nname = "r{i}"\naction = "deny"\npaths = ['
        + ", ".join(f'"d{i}/g{j}/**/*.x{j}"' for j in range(WORKSPACE_MAX_GLOBS_PER_RULE))
        + "]\n"
        for i in range(WORKSPACE_MAX_RULES)
    )


def operator_policy(count: int) -> Policy:
    return Policy(rules=tuple(
        Rule(f"r{i}", "deny", ("*",), (f"d{i}/**", f"**/*.x{i}")) for i in range(count)
    ))


def wait_reaped(pool: Pool) -> None:
    deadline = time.monotonic() + 120
    while pool.stats()["workers"] and time.monotonic() < deadline:
        time.sleep(0.02)


def call(sandbox: Sandbox) -> float:
    start = time.perf_counter()
    assert sandbox.call("stat_file", dict(STAT))["ok"]
    return time.perf_counter() - start


def rounds(neighbour_ws: str, quiet_ws: str, count: int, **neighbour: Any) -> list[float]:
    """The quiet tenant's call latency in each round."""
    quiet_times = []
    with Pool(max_workers=8, idle_timeout_s=IDLE_S) as pool:
        noisy = pool.sandbox(neighbour_ws, **neighbour)
        quiet = pool.sandbox(quiet_ws)
        for _ in range(count):
            wait_reaped(pool)
            threads = [threading.Thread(target=call, args=(noisy,)) for _ in range(2)]
            for thread in threads:
                thread.start()
            time.sleep(0.001)  # the neighbour's forks are asked for first
            quiet_times.append(call(quiet))
            for thread in threads:
                thread.join()
        noisy.close()
        quiet.close()
    return quiet_times


def ms(value: float) -> str:
    return f"{value * 1e3:9.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as top:
        quiet = workspace(top, "quiet")
        kinds: list[tuple[str, str, dict[str, Any]]] = [
            ("no rules", workspace(top, "plain"), {}),
            (f"workspace config, {WORKSPACE_MAX_RULES}x{WORKSPACE_MAX_GLOBS_PER_RULE} globs",
             workspace(top, "bounded", bounded_config()), {}),
            (f"operator policy, {args.rules} rules", workspace(top, "big"),
             {"policy": operator_policy(args.rules)}),
        ]
        print(f"the quiet tenant's call beside the neighbour's two forks ({args.rounds} rounds)")
        for name, path, kwargs in kinds:
            times = rounds(path, quiet, args.rounds, **kwargs)
            print(f"  {name:<42} median {ms(statistics.median(times))}  max {ms(max(times))}")


if __name__ == "__main__":
    main()
