"""What the framework adapters add to a call: a 4 KiB read_file through each
adapter against the same read through `sb.call` (or `await asb.call`).

    python scripts/bench_integrations.py [--rounds 30] [--calls 100]

Needs the frameworks installed (the test extra, or the four extras). Each
variant is timed in rounds that alternate with the baseline's (a round is
`--calls` calls back to back, after a warm-up), and the report is each
variant's median per-call time and the median of its ratios to the baseline
round it was paired with (in a random order), which cancels most of a shared
machine's drift. Two rows per adapter where they differ:

- "adapter": the adapter's own code, called as the framework would call it
  (StructuredTool's function, the toolset's call_tool, the FunctionTool's
  on_invoke_tool, the backend's read). Target: at most 1.05x the baseline.
- "framework": the framework's own tool entry around it (LangChain's
  `tool.invoke`), which is the framework's cost, for scale.

The async adapters are measured over an AsyncSandbox against `await asb.call`,
and over a blocking Sandbox (whose calls they run on a thread) against
`sb.call`.

On a loaded machine a round's time drifts by more than the 5% in question, so
the last table is each adapter's own cost alone: the same adapter calls over a
stand-in sandbox whose call answers the recorded read at once (no worker), in
microseconds per call and as a share of the measured `sb.call`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corral import AsyncSandbox, Sandbox
from corral.integrations.deepagents import CorralBackend
from corral.integrations.langchain import CorralToolkit
from corral.integrations.openai_agents import tools as openai_tools
from corral.integrations.pydantic_ai import CorralToolset

READ = {"path": "four_k.txt"}
WARMUP = 50  # calls before timing: the first calls pay for lazy caches on both sides
TARGET = 1.05
OWN_CALLS = 20000  # calls of an adapter over the stand-in: microseconds each


def sync_round(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


async def async_round(fn: Callable[[], Awaitable[Any]], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        await fn()
    return (time.perf_counter() - start) / calls


def compare_sync(baseline: Callable[[], Any], variants: dict[str, Callable[[], Any]],
                 rounds: int, calls: int) -> dict[str, tuple[float, float]]:
    for fn in (baseline, *variants.values()):
        for _ in range(WARMUP):
            fn()
    pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            # each round pairs the variant with a baseline round, in a random order
            first, second = random.sample([baseline, fn], 2)
            times = {id(first): sync_round(first, calls), id(second): sync_round(second, calls)}
            pairs[name].append((times[id(baseline)], times[id(fn)]))
    return summary(pairs)


async def compare_async(baseline: Callable[[], Awaitable[Any]],
                        variants: dict[str, Callable[[], Awaitable[Any]]],
                        rounds: int, calls: int) -> dict[str, tuple[float, float]]:
    for fn in (baseline, *variants.values()):
        for _ in range(WARMUP):
            await fn()
    pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            first, second = random.sample([baseline, fn], 2)
            times = {id(first): await async_round(first, calls),
                     id(second): await async_round(second, calls)}
            pairs[name].append((times[id(baseline)], times[id(fn)]))
    return summary(pairs)


def summary(pairs: dict[str, list[tuple[float, float]]]) -> dict[str, tuple[float, float]]:
    """Per variant: its median per-call time and the median of its per-round ratios
    to the baseline round it was paired with (pairs cancel the machine's drift)."""
    rows = {"baseline": (statistics.median(b for p in pairs.values() for b, _ in p), 1.0)}
    for name, paired in pairs.items():
        rows[name] = (statistics.median(v for _, v in paired),
                      statistics.median(v / b for b, v in paired))
    return rows


def report(title: str, rows: dict[str, tuple[float, float]]) -> None:
    print(f"\n{title}")
    for name, (seconds, ratio) in rows.items():
        mark = "" if name == "baseline" or "framework" in name else (
            "  ok" if ratio <= TARGET else f"  over {TARGET}x")
        print(f"  {name:<44} {seconds * 1e6:8.1f} us  {ratio:5.3f}x{mark}")


def sync_variants(sb: Sandbox) -> dict[str, Callable[[], Any]]:
    tool = {t.name: t for t in CorralToolkit(sb).get_tools()}["read_file"]
    function = tool.func
    assert function is not None
    backend = CorralBackend(sb)
    return {
        "langchain adapter (StructuredTool.func)": lambda: function(**READ),
        "langchain framework (tool.invoke)": lambda: tool.invoke(READ),
        "deepagents adapter (CorralBackend.read)": lambda: backend.read("/four_k.txt"),
    }


def async_variants(sb: Sandbox | AsyncSandbox) -> dict[str, Callable[[], Awaitable[Any]]]:
    toolset = CorralToolset(sb)
    context: Any = SimpleNamespace(tool_call_approved=False)  # read only on an approval
    function_tool = {t.name: t for t in openai_tools(sb)}["read_file"]
    arguments = json.dumps({**READ, "offset": None, "limit": None, "max_bytes": None,
                            "encoding": None, "byte_offset": None})
    lc_tool = {t.name: t for t in CorralToolkit(sb).get_tools()}["read_file"]
    coroutine = lc_tool.coroutine
    assert coroutine is not None
    return {
        "pydantic-ai adapter (call_tool)":
            lambda: toolset.call_tool("read_file", READ, context, None),  # type: ignore[arg-type]
        "openai-agents adapter (on_invoke_tool)":
            lambda: function_tool.on_invoke_tool(context, arguments),
        "langchain adapter (StructuredTool.coroutine)": lambda: coroutine(**READ),
    }


class InstantSandbox(Sandbox):
    """A stand-in that answers `answer` at once: the adapter's own code, timed
    without a worker. Made without starting (no zygote, no worker)."""

    answer: dict[str, Any]
    specs: list[dict[str, Any]]
    real_policy: Any

    def call(self, tool: str, arguments: dict[str, Any] | None = None, *,
             within: Any = None) -> dict[str, Any]:
        return self.answer

    def tools(self, format: str | None = None, strict: bool = False) -> list[dict[str, Any]]:
        return self.specs

    @property
    def policy(self) -> Any:
        return self.real_policy


class InstantAsyncSandbox(AsyncSandbox):
    answer: dict[str, Any]
    specs: list[dict[str, Any]]
    real_policy: Any

    async def call(self, tool: str, arguments: dict[str, Any] | None = None, *,
                   within: Any = None) -> dict[str, Any]:
        return self.answer

    async def run(self, flow: Any, **kwargs: Any) -> dict[str, Any]:
        return self.answer

    def flow(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def tools(self, format: str | None = None, strict: bool = False) -> list[dict[str, Any]]:
        return self.specs

    @property
    def policy(self) -> Any:
        return self.real_policy


def instant(kind: type[Any], sb: Sandbox, answer: dict[str, Any], strict: bool) -> Any:
    stand_in = object.__new__(kind)
    stand_in.answer = answer
    stand_in.specs = sb.tools(strict=strict)
    stand_in.real_policy = sb.policy
    return stand_in


def own_costs(sb: Sandbox, calls: int) -> dict[str, float]:
    """Microseconds per call of each adapter's own code (no worker behind it)."""
    answer = sb.call("read_file", READ)
    lc_tool = {t.name: t for t in CorralToolkit(instant(InstantSandbox, sb, answer, False))
               .get_tools()}["read_file"]
    function = lc_tool.func
    assert function is not None
    backend = CorralBackend(instant(InstantSandbox, sb, answer, False))
    costs = {"langchain (StructuredTool.func)": time_sync(lambda: function(**READ), calls),
             "deepagents (CorralBackend.read)": time_sync(
                 lambda: backend.read("/four_k.txt"), calls)}
    asb = instant(InstantAsyncSandbox, sb, answer, False)
    strict_asb = instant(InstantAsyncSandbox, sb, answer, True)
    costs.update(asyncio.run(async_own_costs(asb, strict_asb, calls)))
    return costs


async def async_own_costs(asb: AsyncSandbox, strict_asb: AsyncSandbox,
                          calls: int) -> dict[str, float]:
    variants = async_variants(asb)
    variants["openai-agents adapter (on_invoke_tool)"] = async_variants(strict_asb)[
        "openai-agents adapter (on_invoke_tool)"]
    costs = {}
    for name, fn in variants.items():
        for _ in range(WARMUP):
            await fn()
        costs[name.replace(" adapter", "")] = await async_round(fn, calls)
    return costs


def time_sync(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(WARMUP):
        fn()
    return sync_round(fn, calls)


async def run_async(ws: Path, rounds: int, calls: int) -> None:
    async with AsyncSandbox(ws) as asb:
        report("over an AsyncSandbox, against await asb.call", await compare_async(
            lambda: asb.call("read_file", READ), async_variants(asb), rounds, calls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / "four_k.txt").write_text(("x" * 63 + "\n") * 64)  # 4 KiB, 64 lines
        with Sandbox(ws) as sb:
            report("over a Sandbox, against sb.call", compare_sync(
                lambda: sb.call("read_file", READ), sync_variants(sb), args.rounds, args.calls))

            async def threaded() -> dict[str, tuple[float, float]]:
                async def baseline() -> Any:
                    return sb.call("read_file", READ)
                return await compare_async(baseline, async_variants(sb), args.rounds, args.calls)

            report("async adapters over a Sandbox (a thread per call), against sb.call",
                   asyncio.run(threaded()))
        asyncio.run(run_async(ws, args.rounds, args.calls))
        with Sandbox(ws) as sb:
            real = statistics.median(sync_round(lambda: sb.call("read_file", READ), args.calls)
                                     for _ in range(args.rounds))
            costs = own_costs(sb, OWN_CALLS)
        print(f"\neach adapter's own code, against sb.call's {real * 1e6:.1f} us")
        for name, seconds in costs.items():
            share = seconds / real
            print(f"  {name:<44} {seconds * 1e6:8.2f} us  {share:6.2%}"
                  f"{'  ok' if share <= TARGET - 1 else '  over'}")


if __name__ == "__main__":
    main()
