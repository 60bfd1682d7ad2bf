"""The worker's mount namespace, on the real kernel: a compromised worker (a child
that confined itself exactly as a pool worker does, then runs attacker code)
cannot even stat or readlink host paths, which Landlock does not govern; the
control run without the namespace can. Pool workers run in one (as root, or
through an unprivileged user namespace), report it, and `require` can demand it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.calls.messages import CallRequest
from corral.config import HistoryOptions, Limits, SandboxOptions
from corral.errors import SandboxError
from corral.faces.cli import main as cli_main
from corral.fs import Root
from corral.policy import Policy, RootSpec
from corral.sandbox import _mountns, probe
from corral.sandbox.broker import Broker, check_required, summarise
from tests.helpers.confined import run_confined

KERNEL = probe.probe()
pytestmark = pytest.mark.skipif(not KERNEL["mount_namespace"], reason="no mount namespaces")
HOST_PATHS = ["/etc/passwd", "/home", "/usr/bin/python3", "/root", "/proc/1/status"]


def _what_a_worker_sees(root_fd: int, workspace: str) -> dict[str, Any]:
    """Attacker code in the worker: stat and readlink host paths, absolute and by
    `..` from the root fd it holds; and use its roots as corral does."""
    seen: dict[str, Any] = {}
    for path in HOST_PATHS:
        try:
            os.stat(path, follow_symlinks=False)
            seen[path] = True
        except OSError:
            seen[path] = False
    try:
        os.stat("../../../../../../etc/passwd", dir_fd=root_fd)
        seen["dotdot"] = True
    except OSError:
        seen["dotdot"] = False
    try:
        os.readlink("/proc/self/exe")
        seen["exe"] = True
    except OSError:
        seen["exe"] = False
    seen["inside"] = os.stat("hello.txt", dir_fd=root_fd).st_size
    seen["root_path"] = os.readlink(f"/proc/self/fd/{root_fd}")
    seen["by_path"] = Path(workspace, "hello.txt").read_text()
    return seen


def test_a_compromised_worker_sees_no_host_path(workspace: Path) -> None:
    root = Root(str(workspace))
    try:
        confined = run_confined(_what_a_worker_sees, root.fd, str(workspace), roots=[root],
                                keep_fds=[root.fd])
        control = run_confined(_what_a_worker_sees, root.fd, str(workspace), roots=[root],
                               keep_fds=[root.fd], drop=("mount_namespace",))
    finally:
        root.close()
    assert confined.layers is not None and confined.layers["mount_namespace"] is True
    hidden = [*HOST_PATHS, "dotdot", "exe"]
    assert {key: confined.value[key] for key in hidden} == dict.fromkeys(hidden, False)
    # the roots keep working, by fd and by their absolute path, which stays the same
    assert confined.value["inside"] == (workspace / "hello.txt").stat().st_size
    assert confined.value["root_path"] == str(workspace)
    assert confined.value["by_path"] == (workspace / "hello.txt").read_text()
    # control: the same code without the namespace sees the host
    assert control.ok, control
    assert {key: control.value[key] for key in hidden} == dict.fromkeys(hidden, True)


def _listing(path: str) -> list[str]:
    return sorted(os.listdir(path))


def test_a_root_where_the_namespace_is_staged_shows_its_own_files(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the workspace first among the places the new `/` may be assembled: its bind
    # would show the staging tmpfs, not its files, unless another place is taken
    monkeypatch.setattr(_mountns, "STAGING_CANDIDATES",
                        (str(workspace), *_mountns.STAGING_CANDIDATES))
    seen = run_confined(_listing, str(workspace), roots=[(str(workspace), "rw")])
    assert seen.ok, seen
    assert seen.value == ["hello.txt"]


def test_a_sandbox_on_tmp_itself() -> None:
    # /tmp is where the namespace is staged by default; read-only, so nothing is written
    marker = tempfile.mkdtemp(prefix="corral-tmp-root-")
    try:
        # no history: the tests' state directory lies inside /tmp
        with Sandbox("/tmp", policy=Policy(read_only=True),
                     history=HistoryOptions(enabled=False)) as sandbox:
            assert sandbox.confinement["mount_namespace"] is True
            listed = sandbox.call("list_directory", {"path": "."})
    finally:
        os.rmdir(marker)
    assert listed["ok"], listed
    assert os.path.basename(marker) in listed["text"]


def test_pool_workers_run_in_it_and_report_it(workspace: Path, outside: Path) -> None:
    broker = Broker([RootSpec(str(workspace), "rw")], Limits(), Policy(),
                    SandboxOptions(require=("mount_namespace",)))
    try:
        assert broker.confinement["mount_namespace"] is True
        assert broker.confinement["level"] == "full"
        for pid in broker.pids()["workers"]:
            # the worker's `/` seen from the host: its roots, its own fds, nothing else
            view = Path(f"/proc/{pid}/root")
            assert sorted(os.listdir(view)) == sorted({"proc", str(workspace).split("/")[1]})
            assert not (view / "etc").exists() and not (view / str(outside)[1:]).exists()
            assert (view / str(workspace)[1:] / "hello.txt").is_file()
        listed = broker.submit(CallRequest("list_directory", {"path": "."}))
        assert listed.ok, listed
        wrote = broker.submit(CallRequest("write_file", {"path": "sub/new.txt", "content": "x"}))
        assert wrote.ok, wrote
        assert (workspace / "sub" / "new.txt").read_text() == "x"
    finally:
        broker.close()


def _mount_options(pid: int) -> dict[str, str]:
    """Mount point -> per-mount options (rw/ro, ...) in process `pid`'s namespace."""
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8") as mountinfo:
        return {line.split()[4]: line.split()[5] for line in mountinfo}


def test_pool_workers_bind_a_read_only_root_read_only(workspace: Path, outside: Path) -> None:
    broker = Broker([RootSpec(str(workspace), "rw"), RootSpec(str(outside), "ro")], Limits(),
                    Policy(), SandboxOptions(require=("mount_namespace",)))
    try:
        for pid in broker.pids()["workers"]:
            options = _mount_options(pid)
            assert options[str(outside)].split(",")[0] == "ro"
            assert options[str(workspace)].split(",")[0] == "rw"
        wrote = broker.submit(CallRequest("write_file", {"path": "new.txt", "content": "x"}))
        assert wrote.ok, wrote
    finally:
        broker.close()


def test_require_fails_closed_without_it() -> None:
    report = summarise({"landlock_abi": 7, "seccomp": True, "no_new_privs": True,
                        "openat2": True, "rlimits": True, "mount_namespace": False})
    assert report["level"] == "full"  # the stage-1 layers; the namespace is reported beside
    check_required(report, ["landlock", "seccomp"])
    with pytest.raises(SandboxError, match="mount_namespace not active"):
        check_required(report, ["mount_namespace"])


def test_doctor_reports_it(capsys: pytest.CaptureFixture[str], workspace: Path) -> None:
    code = cli_main(["doctor", "--json", "--workspace", str(workspace)])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["kernel"]["mount_namespace"] is True
    assert report["worker"]["mount_namespace"] is True
    assert report["verdict"].endswith(", a mount namespace")


# A host that is not root: the worker enters a user namespace of its own first.
# (setuid clears the dumpable flag, which a process started as nobody would have.)
CONFINE_AS_NOBODY = """
import ctypes, json, os, sys
from corral.config import Limits
from corral.fs import Root
from corral.sandbox import confine
workspace = sys.argv[1]
root = Root(workspace)
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
layers = confine.confine([root], keep_fds=[root.fd, 1, 2], limits=Limits())
seen = {p: os.path.lexists(p) for p in ("/etc/passwd", "/home")}
seen["uid"] = os.getuid()
seen["inside"] = os.stat("hello.txt", dir_fd=root.fd).st_size
print(json.dumps({"layers": layers, "seen": seen}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become nobody")
def test_an_unprivileged_worker_gets_it_through_a_user_namespace() -> None:
    workspace = tempfile.mkdtemp()
    try:
        os.chmod(workspace, 0o755)
        Path(workspace, "hello.txt").write_text("hello\n")
        os.chmod(Path(workspace, "hello.txt"), 0o644)
        done = subprocess.run([sys.executable, "-c", CONFINE_AS_NOBODY, workspace],
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        Path(workspace, "hello.txt").unlink()
        os.rmdir(workspace)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    if not report["layers"]["mount_namespace"]:
        pytest.skip("this kernel refuses unprivileged user namespaces")
    assert report["seen"] == {"/etc/passwd": False, "/home": False, "uid": 65534, "inside": 6}
