"""What a compromised worker could do with the calls and capabilities it keeps,
on the real kernel: SIGIO to a chosen pid, set-id bits, fds sent back over its
socket, a root host's capabilities. Each seccomp denial has a control run
without seccomp where the call gets through, so the test fails if the filter
ever loses the argument check."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import seccomp
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker
from tests.helpers.confined import ConfinedChild, run_confined

pytestmark = pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filters")


@pytest.fixture
def roots(workspace: Path) -> list[tuple[str, str]]:
    return [(str(workspace), "rw")]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield ours, theirs
    ours.close()
    theirs.close()


def _denied_then_allowed(roots, fn, *args, **options):
    confined = run_confined(fn, *args, roots=roots, **options)
    assert confined.errno == errno.EPERM, confined
    control = run_confined(fn, *args, roots=roots, drop=("seccomp",), **options)
    assert control.ok, control
    return control


def _own_sigio(path: str, owner: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETOWN, owner)  # SIGIO would go to `owner`
        return fcntl.fcntl(fd, fcntl.F_GETOWN)
    finally:
        os.close(fd)


def test_fcntl_cannot_aim_sigio_at_another_process(roots, workspace: Path) -> None:
    control = _denied_then_allowed(roots, _own_sigio, str(workspace / "hello.txt"), os.getpid())
    assert control.value == os.getpid()


def _fd_flags(path: str) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.set_blocking(fd, False)  # F_GETFL + F_SETFL
        copy = os.dup(fd)  # F_DUPFD_CLOEXEC
        os.close(copy)
        return os.get_inheritable(fd)  # F_GETFD
    finally:
        os.close(fd)


def test_fcntl_keeps_what_python_needs(roots, workspace: Path) -> None:
    assert run_confined(_fd_flags, str(workspace / "hello.txt"), roots=roots).value is False


def _set_id(path: str, mode: int) -> int:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fchmod(fd, mode)
        return os.fstat(fd).st_mode & 0o7777
    finally:
        os.close(fd)


@pytest.mark.parametrize("bit", [0o4000, 0o2000])
def test_fchmod_cannot_set_a_set_id_bit(roots, workspace: Path, bit: int) -> None:
    target = str(workspace / "hello.txt")
    assert _denied_then_allowed(roots, _set_id, target, bit | 0o755).value == bit | 0o755


def _send_fd(sock_fd: int, path: str) -> int:
    sock = socket.socket(fileno=sock_fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        return socket.send_fds(sock, [b"x"], [fd])
    finally:
        os.close(fd)
        sock.detach()


def test_a_worker_cannot_send_an_fd_over_its_socket(
    roots, workspace: Path, pair: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = pair
    _denied_then_allowed(
        roots, _send_fd, theirs.fileno(), str(workspace / "hello.txt"), keep_fds=[theirs.fileno()]
    )
    _, fds, _, _ = socket.recv_fds(ours, 1, 4)  # only the control run's fd arrived
    assert len(fds) == 1
    os.close(fds[0])


# --- capabilities: a root host's worker keeps DAC_OVERRIDE and FOWNER only --------

KEPT = (1 << 1) | (1 << 3)  # CAP_DAC_OVERRIDE | CAP_FOWNER
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the host holds no capabilities")


def capabilities(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {name: int(fields[name], 16) for name in ("CapInh", "CapPrm", "CapEff", "CapBnd",
                                                      "CapAmb")}


def _host_caps() -> dict[str, int]:
    return capabilities(os.getpid())


@root_only
def test_a_confined_child_keeps_only_the_file_capabilities(roots) -> None:
    assert _host_caps()["CapEff"] & KEPT == KEPT
    go_read, go_write = os.pipe()
    try:
        child = ConfinedChild(os.read, go_read, 1, roots=roots, keep_fds=[go_read])
        child.ready()
        assert capabilities(child.pid) == {
            "CapInh": 0, "CapPrm": KEPT, "CapEff": KEPT, "CapBnd": KEPT, "CapAmb": 0,
        }
        os.write(go_write, b"x")
        assert child.outcome().ok
    finally:
        os.close(go_read)
        os.close(go_write)


@root_only
def test_pool_workers_keep_only_the_file_capabilities(workspace: Path) -> None:
    broker = Broker([RootSpec(str(workspace), "rw")], Limits(), Policy(), SandboxOptions())
    try:
        for pid in broker.pids()["workers"]:
            assert capabilities(pid)["CapEff"] == KEPT
            assert capabilities(pid)["CapBnd"] == KEPT
        zygote = capabilities(broker.pids()["zygote"])
        assert zygote["CapEff"] == _host_caps()["CapEff"]  # only workers are confined
    finally:
        broker.close()


@root_only
def test_a_root_worker_still_reads_and_writes_what_root_may(workspace: Path) -> None:
    locked = workspace / "locked.txt"
    locked.write_text("mode 000\n")
    locked.chmod(0o000)
    setuid = workspace / "setuid.sh"
    setuid.write_text("#!/bin/sh\n")
    setuid.chmod(0o4755)
    sticky = workspace / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "theirs.txt").write_text("another user's\n")
    os.chown(sticky / "theirs.txt", NOBODY, NOBODY)
    os.chown(sticky, NOBODY, NOBODY)  # neither file nor directory is root's
    policy = Policy(tool_modes={"delete_file": "allow"})
    broker = Broker([RootSpec(str(workspace), "rw")], Limits(), policy, SandboxOptions())
    try:
        def call(tool: str, **arguments: Any) -> dict[str, Any]:
            return broker.submit(CallRequest(tool, arguments)).public()

        assert call("read_file", path="locked.txt")["ok"]  # CAP_DAC_OVERRIDE kept
        assert call("append_file", path="locked.txt", content="more\n")["ok"]
        assert call("append_file", path="setuid.sh", content="true\n")["ok"]
        assert call("delete_file", path="sticky/theirs.txt")["ok"]  # CAP_FOWNER kept
    finally:
        broker.close()
    assert locked.read_text() == "mode 000\nmore\n"
    assert not (sticky / "theirs.txt").exists()
    # without CAP_FSETID the kernel clears set-user-id on a write, as for any user
    assert setuid.stat().st_mode & 0o7777 == 0o755


NOBODY = 65534


# A fresh interpreter, not a fork of pytest: confine() acts on the whole process
# (address-space cap, fds, Landlock), so the child should not carry the test
# session's state. (A forked child failed here once in a clean-clone run, cause
# unknown; on failure the child's stderr now says why.)
CONFINE_AS_NOBODY = """
import os, sys
from corral.config import Limits
from corral.sandbox import confine
root, ready, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.setgroups([])
os.setgid(65534)
os.setuid(65534)  # the kernel clears every set but the bounding one
confine.confine([(root, "rw")], keep_fds=[ready, wait], limits=Limits())
os.write(ready, b"confined")
os.read(wait, 1)
"""


@root_only
def test_an_unprivileged_host_confines_without_cap_setpcap() -> None:
    root = tempfile.mkdtemp()  # under /tmp: nobody can reach it
    os.chmod(root, 0o777)
    ready_r, ready_w = os.pipe()
    wait_r, wait_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", CONFINE_AS_NOBODY, root, str(ready_w), str(wait_r)],
        pass_fds=(ready_w, wait_r), stderr=subprocess.PIPE,
    )
    try:
        os.close(ready_w)
        os.close(wait_r)
        assert os.read(ready_r, 16) == b"confined", child.stderr.read()  # type: ignore[union-attr]
        caps = capabilities(child.pid)
        assert (caps["CapEff"], caps["CapPrm"], caps["CapInh"], caps["CapAmb"]) == (0, 0, 0, 0)
        assert caps["CapBnd"] == _host_caps()["CapBnd"]  # unchanged: dropping takes CAP_SETPCAP
    finally:
        os.close(wait_w)
        os.close(ready_r)
        child.wait(timeout=30)
        child.stderr.close()  # type: ignore[union-attr]
        os.rmdir(root)
