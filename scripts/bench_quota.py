"""What counting quotas costs a call: a 4 KiB read_file through a Pool sandbox with
every quota set (high enough never to refuse) against the same read through a
sandbox of the same pool with none, taking turns call by call in one run; and the
quota accounting alone (admit + settle of that call, in-process).

    python scripts/bench_quota.py [--calls 2000]

Target: the accounting under 2% of the read through the pool.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_pool import make_workspace
from bench_tenants import timed

from corral import Pool, Sandbox
from corral.calls.messages import Answer, Meta
from corral.config import Limits, QuotaOptions
from corral.host.quota import Quotas, QuotaUsage

READ = {"path": "four_k.txt"}
WARMUP = 50  # calls before timing: first calls pay for lazy caches on both sides
# Every quota, far above what the run uses: counted, never refused.
QUOTA = QuotaOptions(calls_per_minute=10**9, write_bytes_per_hour=10**12,
                     files_created_per_hour=10**9)


def read(sb: Sandbox) -> Callable[[], Any]:
    def one() -> None:
        assert sb.call("read_file", READ)["ok"]
    return one


def accounting() -> Callable[[], Any]:
    """admit + settle of one read, as CallPlan does them, without the call."""
    quotas = Quotas(QUOTA, QuotaUsage(), Limits())
    answer = Answer(True, "read_file", {}, "", meta=Meta(bytes=4096))

    def one() -> None:
        reservation = quotas.admit("read_file", READ, ())
        assert isinstance(reservation, dict)
        quotas.settle(reservation, "read_file", READ, (), answer)
    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed reads per sandbox")
    args = parser.parse_args()
    workspace = make_workspace()  # READ's 4 KiB file
    with Pool(max_workers=4) as pool:
        # "again": a second sandbox without quotas, so the noise between two equal
        # sandboxes is there to compare with
        sandboxes = {"none": pool.sandbox(workspace, workers=1),
                     "quota": pool.sandbox(workspace, workers=1, quota=QUOTA),
                     "again": pool.sandbox(workspace, workers=1)}
        samples: dict[str, list[float]] = {name: [] for name in sandboxes}
        for sb in sandboxes.values():
            timed(read(sb), WARMUP)
        reads = {name: read(sb) for name, sb in sandboxes.items()}
        for _ in range(args.calls):  # one call each in turn: drift on a shared machine hits all
            for name, one in reads.items():
                samples[name] += timed(one, 1)
    account = accounting()
    timed(account, WARMUP)
    alone = timed(account, args.calls)
    none, quota, again = (statistics.median(samples[k]) * 1e6 for k in samples)
    cost = statistics.median(alone) * 1e6
    print(f"4 KiB read_file through a Pool, {len(samples['none'])} calls each, median:")
    print(f"  no quotas     {none:8.1f} us")
    print(f"  every quota   {quota:8.1f} us   ratio {quota / none:.3f}")
    print(f"  none, again   {again:8.1f} us   ratio {again / none:.3f} (the noise)")
    print(f"quota accounting alone (admit + settle): {cost:.2f} us = "
          f"{100 * cost / none:.2f}% of the read (target < 2%)")


if __name__ == "__main__":
    main()
