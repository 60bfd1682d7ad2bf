"""What remembered approvals cost a call: a 4 KiB write_file of a file a
supervised rule covers, let through by a grant (one grant held, or 256: the most
a sandbox holds, of which the write carries the one naming its file), against
the same write where the same rule allows it outright (no grant sent: the common
path), through a Sandbox and in-process (the worker's code, `execute`, without
the pool; there the 256 grants are all sent, the worst case for the worker's
check), in one run. Calls alternate between the set-ups so drift hits all of them; history is
off and writes skip fsync (in-process too) so the call is what is timed.

    python scripts/bench_approvals.py [--calls 200] [--rounds 3]

Reports the median per call in microseconds, each one's ratio to the allowed
write through a Sandbox, the in-process ratios (what checking 1 or 256 grants
costs the worker's access check) and the size of the request frames.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral import Approval, Sandbox, Submit
from corral.calls.messages import CallRequest, GrantRef
from corral.config import HistoryOptions, Limits, SandboxOptions
from corral.fs import Root, Roots
from corral.policy import Policy, Rule
from corral.tools.access import approval_key
from corral.tools.base import Context
from corral.tools.registry import execute

RULES = Policy(rules=(Rule("ask-docs", "supervised", ("write_file",), ("docs/**",)),))
# The same rule allowing: the policy's decision costs the same, only the grant differs.
ALLOWED = Policy(rules=(Rule("ask-docs", "allow", ("write_file",), ("docs/**",)),))
FAST = SandboxOptions(durability="none")  # no fsync: what differs is not lost in the disk's time
CONTENT = ("a" * 4095 + "\n", "b" * 4095 + "\n")
MANY = 256  # grants.MAX_GRANTS


def arguments(i: int) -> dict[str, Any]:
    return {"path": "docs/f.md", "content": CONTENT[i % 2]}


def granted_sandbox(workspace: Path, grants: int) -> Sandbox:
    """A sandbox holding `grants` path grants of write_file, docs/f.md's last."""
    sb = Sandbox(workspace, policy=RULES, approve=lambda request: Approval(True, "path"),
                 history=HistoryOptions(enabled=False), options=FAST)
    for i in range(grants - 1):
        sb.call("write_file", {"path": f"docs/other-{i}.md", "content": ""})
    assert sb.call("write_file", arguments(0))["ok"]
    assert len(sb.approvals()) == grants
    return sb


def in_process(workspace: Path, policy: Policy, grants: int) -> Callable[[int], Any]:
    """execute() in this process with `grants` grants sent (the match last)."""
    context = Context(Roots(Root(str(workspace), durable=False)), Limits(), policy)
    refs = tuple(GrantRef(f"g{i}", approval_key(str(workspace), f"docs/other-{i}.md"), None)
                 for i in range(grants - 1))
    if grants:
        refs += (GrantRef("g0", approval_key(str(workspace), "docs/f.md"), None),)

    def call(i: int) -> Any:
        answer = execute(context, CallRequest("write_file", arguments(i), grants=refs))
        assert answer.ok, answer
        return answer

    return call


def frame_bytes(sb: Sandbox) -> int:
    """The size of the first request frame of a write of docs/f.md."""
    with sb.flow("write_file", arguments(0)) as flow:
        step = flow.step()
        assert isinstance(step, Submit)
        return len(json.dumps(step.request.to_wire()))


def median_us(fn: Callable[[int], Any], calls: int, samples: list[float]) -> None:
    for i in range(calls):
        started = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per set-up per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spaces = {name: Path(tmp) / name for name in
                  ("allowed", "granted", "granted-256", "in-allowed", "in-1", "in-256")}
        for space in spaces.values():
            (space / "docs").mkdir(parents=True)
        allowed = Sandbox(spaces["allowed"], policy=ALLOWED, options=FAST,
                          history=HistoryOptions(enabled=False))
        one, many = granted_sandbox(spaces["granted"], 1), granted_sandbox(
            spaces["granted-256"], MANY)
        setups: dict[str, Callable[[int], Any]] = {
            "sandbox, allowed (no grant sent)": lambda i: allowed.call("write_file", arguments(i)),
            "sandbox, 1 grant": lambda i: one.call("write_file", arguments(i)),
            f"sandbox, {MANY} grants": lambda i: many.call("write_file", arguments(i)),
            "in-process, allowed": in_process(spaces["in-allowed"], ALLOWED, 0),
            "in-process, 1 grant": in_process(spaces["in-1"], RULES, 1),
            f"in-process, {MANY} grants": in_process(spaces["in-256"], RULES, MANY),
        }
        samples: dict[str, list[float]] = {name: [] for name in setups}
        try:
            for _ in range(args.rounds):
                for name, fn in setups.items():
                    median_us(fn, args.calls, samples[name])
            frames = [(name, frame_bytes(sb)) for name, sb in
                      (("allowed", allowed), ("1 grant held", one), (f"{MANY} held", many))]
        finally:
            for sb in (allowed, one, many):
                sb.close()
        medians = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
        base, local = medians["sandbox, allowed (no grant sent)"], medians["in-process, allowed"]
        print(f"{args.rounds} rounds x {args.calls} calls of a 4 KiB write_file, medians:")
        for name, value in medians.items():
            against = base if name.startswith("sandbox") else local
            print(f"  {name:34} {value:8.1f} us  x{value / against:5.2f}")
        for name, size in frames:
            print(f"  request frame, {name:13}: {size} bytes")
        refs = tuple(GrantRef(f"g{i}", approval_key(tmp, f"docs/other-{i}.md"), None)
                     for i in range(MANY))
        every = json.dumps(CallRequest("write_file", arguments(0), grants=refs).to_wire())
        print(f"  (a frame carrying all {MANY} grants would be {len(every)} bytes)")
        print(f"sandbox {MANY} grants / allowed: x{medians[f'sandbox, {MANY} grants'] / base:.2f}; "
              f"in-process 1 grant / allowed: x{medians['in-process, 1 grant'] / local:.2f}")


if __name__ == "__main__":
    main()
