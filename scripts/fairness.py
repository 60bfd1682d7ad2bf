"""Thread fairness of one sandbox shared by threads: BUSY threads call stat_file in a
loop while a probe thread makes one call at a time, with a pause between; for each
probe call, how many busy calls were answered while it waited, and how long it
waited. Run for a private Sandbox, a Pool's sandbox and an AsyncSandbox (busy
tasks on one event loop).
    python scripts/fairness.py [--busy 4] [--probes 200] [--workers 1]
A fair queue answers each probe after at most the calls queued before it (about
one per busy thread and worker); tests/test_pool_fairness.py is the short version.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral import AsyncSandbox, Pool, Sandbox
from corral.config import SandboxOptions

ARGS = {"path": "f.txt"}


def measure(call: Callable[[], Any], busy: int, probes: int) -> tuple[list[int], list[float]]:
    """(busy calls overtaking each probe, each probe's wait in ms)."""
    served = 0
    lock = threading.Lock()
    stop = threading.Event()

    def loop() -> None:
        nonlocal served
        while not stop.is_set():
            call()
            with lock:
                served += 1

    threads = [threading.Thread(target=loop) for _ in range(busy)]
    for thread in threads:
        thread.start()
    overtaken, waits = [], []
    try:
        time.sleep(0.2)
        for _ in range(probes):
            with lock:
                before = served
            start = time.perf_counter()
            call()
            waits.append((time.perf_counter() - start) * 1e3)
            with lock:
                overtaken.append(served - before)
            time.sleep(0.002)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return overtaken, waits


def measure_async(sandbox: AsyncSandbox, busy: int, probes: int) -> tuple[list[int], list[float]]:
    async def run() -> tuple[list[int], list[float]]:
        served = 0
        stop = asyncio.Event()

        async def loop() -> None:
            nonlocal served
            while not stop.is_set():
                await sandbox.call("stat_file", ARGS)
                served += 1

        tasks = [asyncio.create_task(loop()) for _ in range(busy)]
        overtaken, waits = [], []
        await asyncio.sleep(0.2)
        for _ in range(probes):
            before, start = served, time.perf_counter()
            await sandbox.call("stat_file", ARGS)
            waits.append((time.perf_counter() - start) * 1e3)
            overtaken.append(served - before)
            await asyncio.sleep(0.002)
        stop.set()
        await asyncio.gather(*tasks)
        return overtaken, waits

    return asyncio.run(run())


def report(name: str, overtaken: list[int], waits: list[float]) -> None:
    print(f"{name:16} overtaken: median {statistics.median(overtaken):4.0f} max "
          f"{max(overtaken):4d} | wait ms: median {statistics.median(waits):6.2f} max "
          f"{max(waits):7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / "f.txt").write_text("x\n")
        options = SandboxOptions(workers=args.workers)
        with Sandbox(ws, options=options) as sandbox:
            report("Sandbox", *measure(lambda: sandbox.call("stat_file", ARGS),
                                       args.busy, args.probes))
        with Pool(max_workers=args.workers) as pool:
            shared = pool.sandbox(ws)
            report("Pool sandbox", *measure(lambda: shared.call("stat_file", ARGS),
                                            args.busy, args.probes))

        async def open_async() -> AsyncSandbox:
            return AsyncSandbox(ws, options=options)

        async_sandbox = asyncio.run(open_async())
        try:
            report("AsyncSandbox", *measure_async(async_sandbox, args.busy, args.probes))
        finally:
            asyncio.run(async_sandbox.aclose())


if __name__ == "__main__":
    main()
