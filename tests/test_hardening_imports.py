"""A worker imports nothing at call time: after Landlock a lazy import fails, and
the call would come back as io_error. Every tool and every error path runs (a)
in a fresh interpreter that imported what the zygote imports, which must load
no further module, and (b) through a real confined pool, where each call must
give its expected code."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.policy import RootSpec
from corral.sandbox.broker import Broker
from tests.helpers.hardening_calls import CALLS, POLICY, code_of, make_tree

REPO = str(Path(__file__).resolve().parents[1])

# Runs like the zygote (-S, the host's sys.path), then like a worker: every call,
# a cleanup request and the encoding of every answer. Prints the modules it loaded
# after the zygote's preload, and the codes the calls gave.
CHILD = textwrap.dedent("""
    import json, sys
    sys.path[:] = {path!r}
    from corral.sandbox import confine, zygote
    from corral.sandbox.worker import Setup, answer
    from corral.calls.control import SandboxSetup
    from corral.calls.messages import request_from_wire
    from corral.config import Limits, SandboxOptions
    from corral.policy import RootSpec
    from corral.sandbox.protocol import encode
    from tests.helpers.hardening_calls import CALLS, POLICY, code_of
    sandbox = SandboxSetup.of([RootSpec({workspace!r}, "rw")], Limits(), POLICY, SandboxOptions())
    setup = Setup.open(sandbox, POLICY)
    confine.prepare()
    before = set(sys.modules)
    codes = []
    for i, (request, _) in enumerate(CALLS):
        response = answer(request_from_wire({{**request, "id": i}}), setup).to_wire()
        encode(response, 1 << 26)
        codes.append(code_of(response))
    cleanup = {{"pid": 1 << 22, "tool": "write_file", "arguments": {{"path": "new/x"}}}}
    encode(answer(request_from_wire({{"id": -1, "cleanup": cleanup}}), setup).to_wire(), 1 << 26)
    print(json.dumps({{"loaded": sorted(set(sys.modules) - before), "codes": codes}}))
""")


@pytest.fixture
def tree(workspace: Path) -> Path:
    make_tree(workspace)
    return workspace


def test_no_call_imports_a_module_the_zygote_did_not(tree: Path) -> None:
    # The helper modules are the test's own (imported before the snapshot).
    code = CHILD.format(path=[REPO, *sys.path], workspace=str(tree))
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["loaded"] == []
    assert report["codes"] == [expect for _, expect in CALLS]


@pytest.fixture
def broker(tree: Path) -> Iterator[Broker]:
    broker = Broker([RootSpec(str(tree), "rw")], Limits(), POLICY, SandboxOptions(workers=1))
    yield broker
    broker.close()


def test_every_tool_and_error_path_through_a_confined_worker(broker: Broker) -> None:
    pid = broker.pids()["workers"][0]
    got = [code_of(broker.submit(CallRequest(**request)).public()) for request, _ in CALLS]
    assert got == [expect for _, expect in CALLS]
    assert broker.pids()["workers"] == [pid]  # one worker served them all, none crashed
