"""[sandbox] durability: "fsync" (the default) syncs every write's file and
directory before the write is reported; "none" skips both syncs and stays
atomic. Counted at the kernel: strace of a real sandbox's processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from corral.fs import Root
from corral.fs._atomic import TEMP_PREFIX

REPO = str(Path(__file__).resolve().parents[1])

CHILD = textwrap.dedent("""
    import sys
    from corral import Sandbox
    from corral.config import SandboxOptions
    with Sandbox(sys.argv[1], workers=1,
                 options=SandboxOptions(workers=1, durability=sys.argv[2])) as sb:
        print("MARK", flush=True)
        for n in range(3):
            result = sb.call("write_file", {"path": f"d/f{n}.txt", "content": "x" * 5000})
            assert result["ok"], result
        result = sb.call("edit_file", {"path": "d/f0.txt", "old_string": "x" * 5000,
                                       "new_string": "y"})
        assert result["ok"], result
""")


def syncs(workspace: Path, durability: str) -> int:
    """fsync/fdatasync calls of a sandbox's processes during 3 writes and an edit."""
    log = workspace.parent / f"strace-{durability}.log"
    subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync,write", "-o", str(log),
         sys.executable, "-c", CHILD, str(workspace), durability],
        check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True,
        timeout=120,
    )
    lines = log.read_text().splitlines()
    after = next(i for i, line in enumerate(lines) if "MARK" in line)
    return sum(" fsync(" in line or " fdatasync(" in line for line in lines[after:])


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_fsync_by_default_and_none_when_configured(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    assert syncs(workspace, "fsync") == 4 * 2  # file and directory, per write
    assert syncs(workspace, "none") == 0
    assert (workspace / "d" / "f0.txt").read_text() == "y"
    assert (workspace / "d" / "f2.txt").read_text() == "x" * 5000
    assert not [p for p in (workspace / "d").iterdir() if p.name.startswith(TEMP_PREFIX)]


@pytest.mark.parametrize("durable", [True, False])
def test_a_write_without_fsync_is_still_atomic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    root = Root(str(tmp_path), durable=durable)
    try:
        root.write_atomic("a.txt", b"old")
        root.write_atomic("a.txt", b"new")
    finally:
        root.close()
    assert (tmp_path / "a.txt").read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["a.txt"]  # no temp file left behind
    assert len(calls) == (4 if durable else 0)
