"""The cost of the wire messages and history records: decoding and encoding one
(timeit), the import of their modules, and whole calls through a Sandbox (CPU of
the host and its workers per call, and wall time).

    python scripts/bench_wire.py --tree OLD --tree NEW [--rounds 5] [--calls 300]

Each round runs every tree once, in a fresh interpreter with PYTHONPATH on it,
in alternating order (a busy machine slows each alike); reports the median of the
rounds per tree and the ratio of the last tree to the first. CPU per call is the
steadier figure on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

# Run in the tree's interpreter: prints {measure: seconds}.
MEASURE = r"""
import json, os, sys, tempfile, time, timeit
import psutil

def best(fn, number):
    return min(timeit.repeat(fn, number=number, repeat=5)) / number

out = {}
# -- import: the two modules' own bodies, their imports loaded first (fresh process each)
import subprocess
# (msgspec is loaded first: every process that loads either has it, through jsonfast)
DEPS = "import json, math, time, msgspec, msgspec.json, msgspec.structs, corral.jsonfast"
for name, deps in (("corral.calls.messages", "import corral.errors"),
                   ("corral.history.records", "import corral.fs, corral.fs._tree")):
    code = (f"{DEPS}, {deps[7:]}\nt = time.process_time()\nimport {name}\n"
            "print(time.process_time() - t)")  # CPU: a busy machine stretches wall time
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout) for _ in range(15)]
    out[f"import {name}"] = sorted(runs)[7]

import msgspec
from corral import jsonfast
from corral.calls.messages import Answer, CallRequest, Meta
from corral.history.records import Record, dump, record_from_bytes

touched = [{"path": "a.txt", "root": "/w", "resolved": "a.txt", "decision": "allow",
            "rule": None}]
read_meta = {"touched": touched, "bytes": 4096}
write_meta = {"touched": touched, "bytes": 4096, "history_bytes": 700,
              "seen": {"/w\0a.txt": "a" * 24}, "history_ids": ["0" * 26]}
result = {"path": "a.txt", "content": "x" * 4096, "encoding": "utf-8", "total_lines": 1,
          "start_line": 1, "lines_read": 1, "truncated": False, "next_offset": None,
          "size": 4096, "version": "a" * 24}
request = CallRequest("read_file", {"path": "a.txt"}, id=1)
answer = {"ok": True, "tool": "read_file", "result": result, "text": "x" * 4096,
          "meta": read_meta, "id": 1}
entry = {"root": "/w", "rel": "a.txt", "path": "a.txt", "kind": "replace", "action": "modify",
         "before": {"type": "file", "mode": 420, "size": 4096, "blob": "w-1/b-" + "0" * 26 + "-0",
                    "hash": "b" * 24},
         "after": {"type": "file", "mode": 420, "size": 4097, "version": "c" * 24}}
record_wire = {"v": 1, "id": "0" * 26, "time": 1700000000.25, "tool": "write_file", "pid": 77,
               "entries": [entry]}
record_bytes = json.dumps(record_wire).encode()
record = record_from_bytes(record_bytes)
meta = Meta.from_wire(write_meta)
decoded = Answer.from_wire(answer, request)
n = 20000
out["Meta.from_wire (read)"] = best(lambda: Meta.from_wire(read_meta), n)
out["Meta.from_wire (write)"] = best(lambda: Meta.from_wire(write_meta), n)
out["Answer.from_wire (read 4 KiB)"] = best(lambda: Answer.from_wire(answer, request), n)
out["Answer to JSON (read 4 KiB)"] = best(lambda: jsonfast.dumps(decoded.to_wire(), finite=True), n)
out["Meta to JSON (write)"] = best(lambda: jsonfast.dumps(meta.to_wire(), finite=True), n)
out["record_from_bytes"] = best(lambda: record_from_bytes(record_bytes), n)
out["Record.from_wire (dict)"] = best(lambda: Record.from_wire(record_wire), n)
out["dump(record)"] = best(lambda: dump(record), n)

# -- whole calls
from corral import Sandbox
calls = int(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    ws = os.path.join(tmp, "ws")
    os.mkdir(ws)
    with open(os.path.join(ws, "a.txt"), "w") as f:
        f.write("x" * 4096)
    with Sandbox(ws) as sb:
        me = psutil.Process()
        def cpu():
            total = sum(me.cpu_times()[:2])
            for child in me.children(recursive=True):
                try:
                    total += sum(child.cpu_times()[:2])
                except psutil.Error:
                    pass
            return total
        for tool, args in (("read_file", {"path": "a.txt"}),
                           ("write_file", {"path": "b.txt", "content": "y" * 4096})):
            for _ in range(20):
                assert sb.call(tool, args)["ok"]
            walls = []
            began = cpu()
            for _ in range(calls):
                t = time.perf_counter()
                assert sb.call(tool, args)["ok"]
                walls.append(time.perf_counter() - t)
            out[f"{tool} 4 KiB CPU/call"] = (cpu() - began) / calls
            out[f"{tool} 4 KiB wall median"] = sorted(walls)[len(walls) // 2]
print(json.dumps(out))
"""


def run(tree: Path, calls: int, home: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree), XDG_CONFIG_HOME=str(home / "config"),
               XDG_STATE_HOME=str(home / "state"), PYTHONPYCACHEPREFIX=str(home / "pycache"))
    done = subprocess.run([sys.executable, "-c", MEASURE, str(calls)], env=env, cwd=home,
                          capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def shown(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.2f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", help="a checkout to measure")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="calls per tool per round")
    options = parser.parse_args()
    trees = options.tree or [HERE]
    samples: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(options.rounds):
            order = trees if number % 2 == 0 else trees[::-1]
            for tree in order:
                samples[tree].append(run(tree, options.calls, Path(tmp)))
            print(f"round {number + 1} of {options.rounds}", file=sys.stderr)
    names = list(samples[trees[0]][0])
    print("| measure | " + " | ".join(str(tree) for tree in trees)
          + (" | last / first |" if len(trees) > 1 else " |"))
    print("|---" * (len(trees) + 1 + (len(trees) > 1)) + "|")
    for name in names:
        medians = [statistics.median(s[name] for s in samples[tree]) for tree in trees]
        spread = [max(s[name] for s in samples[tree]) - min(s[name] for s in samples[tree])
                  for tree in trees]
        cells = [f"{shown(m)} (±{shown(d / 2)})" for m, d in zip(medians, spread, strict=True)]
        ratio = f" | {medians[-1] / medians[0]:.2f}x" if len(trees) > 1 else ""
        print(f"| {name} | " + " | ".join(cells) + ratio + " |")


if __name__ == "__main__":
    main()
