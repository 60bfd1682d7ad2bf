"""What metrics cost a call: a 4 KiB read_file through a Pool sandbox with the
HTTP face's observer (the tally behind `--metrics`: a count by tool and code, a
latency bucket) against the same sandbox without one, in one run, beside the
same read in-process (the tool's code run in the host: no worker, no IPC).
The calls take turns call by call, so drift hits each alike.

    python scripts/bench_metrics.py [--calls 1000] [--rounds 5]

Reports each median in microseconds, its ratio to the in-process read, and the
observer's overhead (the target: under 2%): the ratio of the medians, and the
median of the differences between the two calls of each turn. A call's time varies more between
runs than the tally costs, so it also times the observer alone (the same
on_call, in-process) and reports it as a share of the unobserved call.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corral import Pool
from corral.calls.messages import CallRequest
from corral.config import HistoryOptions, Limits
from corral.faces.metrics import Metrics
from corral.fs import Root, Roots
from corral.observe import Observer
from corral.policy import Policy
from corral.tools.base import Context
from corral.tools.registry import execute

READ = {"path": "four_k.txt"}
WARMUP = 50  # calls before timing: the first ones pay for lazy caches


def interleaved(runs: dict[str, Callable[[], Any]], count: int) -> dict[str, list[float]]:
    """`count` calls of each run, taking turns call by call (so drift in the machine's
    load hits each alike), in a new random order each turn (a call runs faster or
    slower after another kind of call; a rotation would keep each run's predecessor):
    seconds per call, by run."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    shuffler = random.Random(1)  # the same orders every run
    for _ in range(count):
        shuffler.shuffle(names)
        for name in names:
            start = time.perf_counter()
            runs[name]()
            samples[name].append(time.perf_counter() - start)
    return samples


def observer_cost(count: int) -> float:
    """Seconds per on_call of the HTTP face's tenant observer."""
    observer = Metrics().observer("alice")
    started = time.perf_counter()
    for _ in range(count):
        observer.on_call("read_file", "ok", 0.0001)
    return (time.perf_counter() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per sandbox per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workspace:
        Path(workspace, "four_k.txt").write_text(("x" * 63 + "\n") * 64)  # 4096 bytes
        root = Root(workspace)
        context = Context(Roots(root), Limits(), Policy())
        request = CallRequest("read_file", READ)
        off = HistoryOptions(enabled=False)  # a read records nothing; keep it out entirely
        with Pool(max_workers=2) as pool:
            sandbox = pool.sandbox(workspace, history=off, workers=1)
            observer = Metrics().observer("alice")

            def read(watching: Observer | None) -> Any:
                # One sandbox, its observer set before each call (a private attribute,
                # read for each call, which it hears the end of): two sandboxes' workers are
                # scheduled apart on a loaded machine, and an A/A run of two plain
                # sandboxes differed by up to 3x there.
                sandbox._observer = watching
                return sandbox.call("read_file", READ)

            runs: dict[str, Callable[[], Any]] = {
                "plain": lambda: read(None), "observed": lambda: read(observer),
                "in-process": lambda: execute(context, request),
            }
            interleaved(runs, WARMUP)
            samples: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, times in interleaved(runs, args.calls).items():
                    samples[name] += times
        root.close()
    medians = {name: statistics.median(times) * 1e6 for name, times in samples.items()}
    for name, median in medians.items():
        ratio = median / medians["in-process"]
        print(f"{name:<11} median {median:8.1f} us  ratio to in-process {ratio:5.1f}x")
    overhead = medians["observed"] / medians["plain"] - 1
    # the two calls of one turn ran within a millisecond of each other: their
    # difference is what the observer added, freer of the machine's drift
    paired = statistics.median(
        o - p for o, p in zip(samples["observed"], samples["plain"], strict=True)) * 1e6
    alone = observer_cost(100_000) * 1e6
    plain_us = medians["plain"]
    print(f"observer overhead: {overhead:+.1%} of a pooled call (medians), "
          f"{paired / plain_us:+.1%} (median of paired differences, {paired:+.1f} us); "
          f"on_call alone {alone:.2f} us = {alone / plain_us:.2%} of it (target < 2%)")


if __name__ == "__main__":
    main()
