"""Workers start with a minimal environment: the host's API keys and tokens never
reach the zygote or a worker (a compromised worker could otherwise read them
from its own memory and put them in any file it may write)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker
from corral.sandbox.launcher import zygote_environment

SECRET_VALUE = "sk-test-not-a-real-key-0123456789"


def _environ(pid: int) -> dict[str, str]:
    """A process's environment as the kernel holds it: what its os.environ was built from."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode().split("\0") if "=" in entry)


def test_host_secrets_never_reach_a_worker(workspace: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_VALUE)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_VALUE)
    monkeypatch.setenv("PYTHONSTARTUP", "/tmp/evil.py")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    broker = Broker([RootSpec(str(workspace), "rw")], Limits(), Policy(), SandboxOptions())
    try:
        pids = broker.pids()
        for pid in [pids["zygote"], *pids["workers"]]:
            environ = _environ(pid)
            assert SECRET_VALUE.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
            assert "OPENAI_API_KEY" not in environ
            assert "PYTHONSTARTUP" not in environ
            assert environ.get("LC_ALL") == "C.UTF-8"  # the locale does travel
        assert broker.submit(CallRequest("list_directory", {"path": "."})).ok
    finally:
        broker.close()


@pytest.mark.parametrize(("name", "kept"), [
    ("LANG", True), ("LC_CTYPE", True), ("LC_ALL", True), ("PYTHONUTF8", True),
    ("PYTHONHOME", True), ("PATH", False), ("HOME", False), ("PYTHONPATH", False),
    ("OPENAI_API_KEY", False), ("GITHUB_TOKEN", False), ("LD_PRELOAD", False),
])
def test_the_environment_a_zygote_gets(name: str, kept: bool) -> None:
    assert (name in zygote_environment({name: "x", "OTHER": "y"})) is kept
