"""deploy/seccomp.json, the container's seccomp profile: what its script writes,
an allow-list with every call a worker's own profile allows and none of the
denied ones; and `corral doctor` under a filter that refuses unshare (as the
default profiles of Docker and containerd do) says why there is no mount
namespace. The image run under the profile itself: scripts/container_test.py."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pyseccomp

from corral.seccomp.profile import load_profile
from tests.helpers.mcp_helpers import REPO
from tests.helpers.scripts_loader import load_script

PROFILE = REPO / "deploy" / "seccomp.json"


def test_the_profile_is_what_its_script_writes() -> None:
    assert PROFILE.read_text() == load_script("seccomp_profile").text(), (
        "run: python scripts/seccomp_profile.py")


def test_the_profile_allows_what_corral_does_and_nothing_denied() -> None:
    load_profile(PROFILE)  # corral's loader: every name a syscall of x86_64 or aarch64
    profile = json.loads(PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["defaultErrnoRet"] == 1
    allowed = {name for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW"
               for name in rule["names"]}
    worker = load_profile()  # the worker's own
    for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
                 "seccomp", "prctl", "openat2", "unshare", "clone3", "accept4", "execve"):
        assert name in allowed, name
    worker_allowed = {name for rule in worker.rules if rule.action == "SCMP_ACT_ALLOW"
                      for name in rule.names}
    assert worker_allowed <= allowed, sorted(worker_allowed - allowed)
    denied = set(load_script("seccomp_profile").DENIED)
    assert {"ptrace", "bpf", "keyctl", "io_uring_setup", "kexec_load", "setns"} <= denied
    assert not allowed & denied


def _refuse_unshare() -> None:
    """In the child before exec: unshare fails EPERM, everything else is allowed."""
    refusal = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    refusal.add_rule(pyseccomp.ERRNO(errno.EPERM), "unshare")
    refusal.load()


def test_doctor_says_why_there_is_no_mount_namespace(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "corral", "doctor", "--workspace", str(tmp_path)],
        capture_output=True, text=True, check=False, preexec_fn=_refuse_unshare,
        env={**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path / "state")},
        timeout=120)
    kernel = done.stdout.split("the kernel offers:")[1].split("a worker for")[0]
    line = next(line for line in kernel.splitlines() if "mount_namespace" in line)
    assert line.split()[1] == "no", done.stdout
    assert "(unshare: EPERM: " in line and "seccomp profile that refuses unshare" in line, line
