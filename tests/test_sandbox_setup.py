"""SandboxSetup: the one typed value a sandbox's setup crosses to the zygote as,
checked where the zygote reads it (a private zygote's start frame, every spawn of
a shared pool's), through the real zygote."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from corral.calls.control import Reply, SandboxSetup, ZygoteStart
from corral.calls.messages import Malformed
from corral.config import Limits, SandboxOptions
from corral.errors import SandboxError
from corral.fs.syscalls import DIR_FLAGS
from corral.policy import Policy, RootSpec, Rule
from corral.sandbox.handles import ZygoteHandle
from corral.sandbox.protocol import EXIT_CONFINE_FAILED, read_frame


def setup_for(workspace: Path, **changes: Any) -> SandboxSetup:
    policy = Policy(rules=(Rule("keys", "deny", ("*",), ("*.key",)),))
    made = SandboxSetup.of([RootSpec(str(workspace), "rw")], Limits(max_read_bytes=4096),
                           policy, SandboxOptions(workers=2), history=None)
    return made._replace(**changes)


def test_a_setup_crosses_as_it_was_made(workspace: Path) -> None:
    setup = setup_for(workspace, history="/var/lib/corral/w-1")
    wire = json.loads(json.dumps(setup.to_wire()))  # as the frame carries it
    assert SandboxSetup.from_wire(wire) == setup
    assert Policy.from_dict(json.loads(setup.policy)).to_dict()["rules"][0]["action"] == "deny"


@pytest.mark.parametrize(("change", "says"), [
    ({"roots": []}, "roots"),
    ({"roots": [["relative/dir", "rw"]]}, "roots"),
    ({"roots": [["/abs", "rwx"]]}, "roots"),
    ({"roots": "/abs"}, "roots"),
    ({"policy": {"rules": []}}, "policy"),
    ({"history": "relative"}, "history"),
    ({"limits": {"max_read_bytes": 0}}, "limits"),
    ({"limits": {"no_such_limit": 1}}, "limits"),
    ({"limits": None}, "limits"),
    ({"options": {"workers": "2"}}, "options"),
])
def test_a_forged_setup_is_refused_saying_what_is_wrong(
    workspace: Path, change: dict[str, Any], says: str
) -> None:
    wire = {**setup_for(workspace).to_wire(), **change}
    with pytest.raises(Malformed, match=says):
        SandboxSetup.from_wire(wire)


def test_a_start_frame_and_a_reply_are_checked_too() -> None:
    with pytest.raises(Malformed):
        ZygoteStart.from_wire({"host_pid": 1})
    with pytest.raises(Malformed):
        Reply.from_wire({"pid": -1})
    assert Reply.from_wire({"pid": 7, "code": -9}) == Reply(7, -9)
    assert Reply.from_wire({"error": "no"}).error == "no"


def test_a_private_zygote_refuses_a_setup_it_cannot_serve(workspace: Path) -> None:
    forged = setup_for(workspace, roots=(RootSpec("relative/dir", "rw"),))
    with pytest.raises(SandboxError, match="could not start: a setup without its roots"):
        ZygoteHandle(forged)


def test_a_shared_pools_worker_refuses_a_bad_setup_and_the_next_spawn_serves(
    workspace: Path,
) -> None:
    zygote = ZygoteHandle(None)
    fd = os.open(workspace, DIR_FLAGS)
    try:
        forged = setup_for(workspace, roots=(RootSpec(str(workspace), "rwx"),))
        pid, sock, pidfd = zygote.spawn(forged, [fd])
        sock.setblocking(True)
        report = read_frame(sock.fileno(), 1 << 20)
        assert report is not None and "a setup without its roots" in report["confine_error"]
        sock.close()
        os.close(pidfd)
        assert zygote.wait(pid) == EXIT_CONFINE_FAILED
        pid, sock, pidfd = zygote.spawn(setup_for(workspace), [fd])
        sock.setblocking(True)
        report = read_frame(sock.fileno(), 1 << 20)
        assert report is not None and report["roots"] == [[str(workspace), "rw"]]
        sock.close()
        os.close(pidfd)
        zygote.wait(pid)
    finally:
        os.close(fd)
        zygote.stop()


def test_a_shared_pools_blank_worker_whose_host_sends_no_setup_exits_quietly() -> None:
    zygote = ZygoteHandle(None)
    try:
        pid, sock, pidfd = zygote.spawn()  # no setup: the worker waits for one
        sock.close()
        os.close(pidfd)
        assert zygote.wait(pid) == 0
    finally:
        zygote.stop()
