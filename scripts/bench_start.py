"""Start-up and close: `corral call` as a whole process against a bare Python
start, and a Sandbox's start to its first result and its close.

    python scripts/bench_start.py [--runs 20] [--starts 10] [--tree DIR ...] [--script PATH ...]

Each --tree is a checkout of corral to measure (default: this one, unless
--script is given); each --script an installed `corral` command, run as a user
runs it (its own interpreter and site-packages, no PYTHONPATH). With more than
one (say the code before and after a change) the runs alternate between them,
so a busy machine slows each alike. Reports medians (and min): the floor
(`python -c pass`, `python -c 'import corral'`, a fork and exec of /bin/true),
`python -m corral call read_file '{"path": "x.txt"}'` and its ratio to the bare
start, in wall time and in CPU time (the call's with its zygote template's,
zygote's and workers'); in one interpreter per tree, Sandbox(ws) to the first
call's result, and close(). Targets (issue 24): the call <= 10x a bare Python
start, the sandbox start <= 30 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CALL = ["call", "read_file", '{"path": "x.txt"}']
PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
# What any start costs on this machine, beside `python -c pass` (the first tree's corral).
FLOOR = {
    "python -c 'import corral'": [sys.executable, "-c", "import corral"],
    "fork+exec /bin/true": ["/bin/true"],
}
# Run in a fresh interpreter per tree: starts a sandbox `starts` times (after one
# not counted: the first pays for lazy caches) and prints [[start, close], ...].
STARTS = """
import json, sys, time
from corral.api import Sandbox
workspace, starts = sys.argv[1], int(sys.argv[2])
samples = []
for _ in range(starts + 1):
    began = time.perf_counter()
    sandbox = Sandbox(workspace)
    assert sandbox.call("read_file", {"path": "x.txt"})["ok"]
    answered = time.perf_counter()
    sandbox.close()
    samples.append([answered - began, time.perf_counter() - answered])
print(json.dumps(samples[1:]))
"""


def environment(tree: Path | None, home: Path) -> dict[str, str]:
    """Imports from `tree` (None: an installed corral, as its command finds it); no
    user config, a history store of its own. Bytecode is written and reused (under
    `home`), as an installed corral's is: with PYTHONDONTWRITEBYTECODE set, every
    command would compile the modules only the command imports (~20 of them) from
    source, every time."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(home / "pycache"))
    env.pop("PYTHONPATH", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(XDG_CONFIG_HOME=str(home / "config"), XDG_STATE_HOME=str(home / "state"))
    return env


def wall(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall time of a whole process, and the CPU time of it and every process it
    started (the zygote template, zygote and workers): a busy machine stretches
    the first, hardly the second. The template outlives the command by a moment
    (it exits when it sees the command gone): this process, their subreaper, waits
    for it so that its CPU is counted too."""
    used = _children_cpu()
    began = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - began
    with contextlib.suppress(ChildProcessError):
        while True:
            os.waitpid(-1, 0)
    return took, _children_cpu() - used


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summary(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1e3:6.1f} ms  min {min(samples) * 1e3:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="whole-process runs per tree")
    parser.add_argument("--starts", type=int, default=10, help="sandbox starts per tree")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout to measure")
    parser.add_argument("--script", type=Path, action="append",
                        help="an installed corral command to measure (say venv/bin/corral)")
    args = parser.parse_args()
    # orphaned descendants come back here to be reaped (and their CPU counted)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    trees = [tree.resolve() for tree in args.tree or ([] if args.script else [HERE])]
    scripts = [script.absolute() for script in args.script or []]
    hooks = sorted(name for name in sys.modules if name.startswith("__editable__"))
    if hooks:  # site ran them in this interpreter: it runs them in every one it starts
        print(f"note: this interpreter's site imports {', '.join(hooks)} at every start (an "
              "editable install), which inflates `python -c pass` two- or threefold; measure "
              "with a virtualenv where corral is not installed editable (--tree gives the "
              "checkouts)\n")
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        workspace = home / "ws"
        workspace.mkdir()
        (workspace / "x.txt").write_text("hello\n")
        envs = [environment(tree, home) for tree in trees]
        # what each runs: a tree's corral by `python -m corral`, a script as itself
        commands = [([sys.executable, "-m", "corral", *CALL], env) for env in envs] + [
            ([str(script), *CALL], environment(None, home)) for script in scripts
        ]
        bare: list[tuple[float, float]] = []
        # (`import corral` needs a tree on the path: scripts alone skip it)
        floors = {name: argv for name, argv in FLOOR.items() if trees or "import" not in name}
        floor: dict[str, list[tuple[float, float]]] = {name: [] for name in floors}
        calls: list[list[tuple[float, float]]] = [[] for _ in commands]
        for _ in range(2):  # warm the page cache and each one's bytecode
            for argv, env in commands:
                wall(argv, workspace, env)
        for _ in range(args.runs):
            bare.append(wall([sys.executable, "-c", "pass"], workspace, commands[0][1]))
            for name, argv in floors.items():
                floor[name].append(wall(argv, workspace, commands[0][1]))
            for samples, (argv, env) in zip(calls, commands, strict=True):
                samples.append(wall(argv, workspace, env))
        starts: list[list[list[float]]] = [[] for _ in trees]
        for _ in range(2):  # two interpreters per tree, alternating
            for samples, env in zip(starts, envs, strict=True):
                done = subprocess.run(
                    [sys.executable, "-c", STARTS, str(workspace), str(args.starts // 2 or 1)],
                    cwd=workspace, env=env, check=True, capture_output=True, text=True,
                )
                samples.extend(json.loads(done.stdout))
    bare_wall, bare_cpu = [w for w, _ in bare], [c for _, c in bare]
    print(f"python -c pass ({args.runs} runs): {summary(bare_wall)}; CPU {summary(bare_cpu)}")
    for name, samples in floor.items():
        walls = [w for w, _ in samples]
        ratio = statistics.median(walls) / statistics.median(bare_wall)
        print(f"{name} ({args.runs} runs): {summary(walls)}  = {ratio:.2f}x python -c pass; "
              f"CPU {summary([c for _, c in samples])}")
    labels = [*(str(tree) for tree in trees), *(f"{script} (installed)" for script in scripts)]
    for index, (label, call) in enumerate(zip(labels, calls, strict=True)):
        print(f"\n{label}")
        call_wall, call_cpu = [w for w, _ in call], [c for _, c in call]
        ratio = statistics.median(call_wall) / statistics.median(bare_wall)
        cpu_ratio = statistics.median(call_cpu) / statistics.median(bare_cpu)
        print(f"  corral call read_file ({args.runs} runs): {summary(call_wall)}  "
              f"= {ratio:.1f}x python -c pass")
        print(f"    its CPU, with its other processes': {summary(call_cpu)}  "
              f"= {cpu_ratio:.1f}x python -c pass")
        if index < len(starts):  # a tree's, measured in its own interpreter
            start = starts[index]
            print(f"  Sandbox(ws) to first result ({len(start)} starts): "
                  f"{summary([s for s, _ in start])}")
            print(f"  close ({len(start)} closes): {summary([c for _, c in start])}")


if __name__ == "__main__":
    main()
