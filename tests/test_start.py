"""Start-up does only what the first call needs: a sandbox starts one worker and
the rest as calls overlap, each confined exactly as the first; `corral call`
starts one worker whatever [sandbox] workers says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral import testing
from corral.cli import main
from corral.sandbox.worker_set import WorkerSet
from tests.helpers.broker_helpers import MakeBroker, call, kernel_view

REPO = Path(__file__).resolve().parents[1]

def test_a_sandbox_starts_one_worker_and_another_when_calls_overlap(
    make_broker: MakeBroker,
) -> None:
    broker = make_broker(workers=2)
    (first,) = broker.pids()["workers"]
    supply = testing.supply(broker)
    assert isinstance(supply, WorkerSet)
    held = supply.take()  # the first worker, busy with a call
    try:
        assert call(broker, "read_file", path="hello.txt")["ok"]  # every worker busy: one more
        (second,) = set(broker.pids()["workers"]) - {first}
        lazy = next(worker for worker in testing.workers(broker) if worker.pid == second)
        assert lazy.layers == held.layers and lazy.roots == held.roots
        assert kernel_view(second) == kernel_view(first)
        assert kernel_view(second)["Seccomp"] == "2" and kernel_view(second)["NoNewPrivs"] == "1"
        escape = call(broker, "read_file", path="../outside/secret.txt")
        assert not escape["ok"]
    finally:
        supply.give_back(held)
    # both idle now: calls one after another start nothing more
    for _ in range(3):
        assert call(broker, "read_file", path="hello.txt")["ok"]
    assert len(broker.pids()["workers"]) == 2


def test_a_lost_worker_is_replaced_at_the_size_the_set_reached(make_broker: MakeBroker) -> None:
    broker = make_broker(workers=3)
    supply = testing.supply(broker)
    assert isinstance(supply, WorkerSet)
    held = supply.take()
    assert call(broker, "read_file", path="hello.txt")["ok"]
    supply.lost(held)  # killed: replaced at once, the set stays at two
    assert len(broker.pids()["workers"]) == 2
    assert held.pid not in broker.pids()["workers"]


def test_corral_call_starts_one_worker(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "corral.toml"
    config.write_text(f'[workspace]\nroot = "{workspace}"\n\n[sandbox]\nworkers = 4\n')
    started: list[int] = []
    start = WorkerSet.start

    def counted(self: WorkerSet) -> None:
        start(self)
        started.append(len(self.pids()))

    monkeypatch.setattr(WorkerSet, "start", counted)
    code = main(["call", "read_file", '{"path": "hello.txt"}', "--config", str(config)])
    assert code == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out)["result"]["content"] == "hello\nworld\n"
    assert started == [1]


# A whole `corral call` in a fresh interpreter, then the modules it loaded that a
# call does not need: the servers, the audit verifier, asyncio (AsyncSandbox's),
# psutil (a worker's RSS is first read after a few calls, and a temp's writer looked
# up only if the sweep finds a temp), the shared pool's hub, shutil (argparse's way
# to the terminal's width: the parser is told it), hashlib (OpenSSL: an audit log's
# chain only), random.
UNNEEDED = ("asyncio", "corral.mcp_server", "corral.jsonl_server", "corral.audit_verify",
            "psutil", "corral.sandbox.hub", "shutil", "hashlib", "random")
CALL_AND_LIST = """
import sys
from corral.cli import main
assert main(["call", "read_file", '{"path": "hello.txt"}', "--workspace", sys.argv[1]]) == 0
print("loaded:", *sorted(name for name in sys.argv[2:] if name in sys.modules))
"""


def test_corral_call_imports_only_what_a_call_needs(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CALL_AND_LIST, str(workspace), *UNNEEDED],
        capture_output=True, text=True, check=True, cwd=REPO,
    )
    assert done.stdout.splitlines()[-1] == "loaded:"


# The command decides no path itself: the built-in rules' regexes are compiled in the
# zygote template, for the workers, and never in the command's process.
CALL_AND_COUNT = """
import sys
from corral.cli import main
from corral.policy import _builtin_matcher
assert main(["call", "read_file", '{"path": "hello.txt"}', "--workspace", sys.argv[1]]) == 0
print("builtins compiled:", _builtin_matcher.cache_info().currsize)
"""


def test_corral_call_compiles_no_built_in_rules_in_its_own_process(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CALL_AND_COUNT, str(workspace)],
        capture_output=True, text=True, check=True, cwd=REPO,
    )
    assert done.stdout.splitlines()[-1] == "builtins compiled: 0"


def test_a_policy_compiles_the_built_in_rules_at_its_first_decision() -> None:
    from corral.policy import Policy, RootSpec, _builtin_matcher

    _builtin_matcher.cache_clear()
    policy = Policy(tool_modes={"write_file": "allow"})
    assert _builtin_matcher.cache_info().currsize == 0
    root = RootSpec("/w", "rw")
    decision = policy.decide("write_file", root, ".git/config", write=True)
    assert decision.action == "deny" and _builtin_matcher.cache_info().currsize == 1


# The program (main() reading sys.argv) freezes what it has loaded for the collector.
# The program leaves by os._exit once its command is done (no teardown), after
# flushing its output and running the exit functions: this one reports.
FREEZE_COUNT = """
import atexit, gc, sys
from corral.cli import main
sys.argv = ["corral", "call", "read_file", '{"path": "hello.txt"}', "--workspace", sys.argv[1]]
atexit.register(lambda: print("frozen:", gc.get_freeze_count() > 0))
main()
"""


def buffered() -> dict[str, str]:
    """This environment, with stdout buffered as a program's usually is."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


def test_the_program_freezes_what_it_loaded_for_the_collector(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FREEZE_COUNT, str(workspace)],
        capture_output=True, text=True, check=True, cwd=REPO, env=buffered(),
    )
    # the answer and what the exit functions printed after it: all flushed at the end
    assert done.stdout.splitlines()[-1] == "frozen: True"
    assert '"ok": true' in done.stdout


def test_the_program_exits_cleanly_with_its_stderr_closed(workspace: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", f'exec "$0" -m corral call read_file \'{{"path": "hello.txt"}}\' '
                     f"--workspace {workspace} 2>&-", sys.executable],
        capture_output=True, text=True, cwd=REPO, env=buffered(),
    )
    assert done.returncode == 0, done.stderr
    assert '"ok": true' in done.stdout


def test_an_output_that_cannot_be_written_fails_the_program(workspace: Path) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "corral", "call", "read_file", '{"path": "hello.txt"}',
             "--workspace", str(workspace)],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO, env=buffered(),
        )
    assert done.returncode == 2
    assert "No space left on device" in done.stderr and "Traceback" not in done.stderr


# What `corral call` has loaded when it spawns the zygote template: only its entry
# modules and C modules, so that the template starts ~2 ms into the command.
AT_SPAWN = """
import os, sys
started = set(sys.modules)
spawn = os.posix_spawn

def spy(*args, **kwargs):
    print("loaded:", *sorted(set(sys.modules) - started), flush=True)
    os.posix_spawn = spawn
    return spawn(*args, **kwargs)

os.posix_spawn = spy
sys.argv = ["corral", "call", "read_file", '{"path": "hello.txt"}', "--workspace", sys.argv[1]]
from corral.cli import main
main()
"""
LIGHT = {"corral", "corral.cli", "corral.sandbox", "corral.sandbox.launcher", "__future__",
         "_socket", "_thread", "fcntl", "atexit", "time", "gc"}


def test_corral_call_spawns_the_template_before_it_imports_the_rest(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", AT_SPAWN, str(workspace)],
        capture_output=True, text=True, check=True, cwd=REPO,
    )
    loaded = done.stdout.splitlines()[0].split()
    assert loaded[0] == "loaded:" and set(loaded[1:]) <= LIGHT, loaded
    assert '"ok": true' in done.stdout  # and the call went on from there
