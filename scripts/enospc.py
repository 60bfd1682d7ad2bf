"""A full disk and a vanished workspace under a running sandbox.

Disk full: the workspace lies on a 1 MiB tmpfs (mounted here: needs root) that
is filled until less than one write's worth is free; every tool that writes is
then called with content that does not fit, round after round. Each must fail
`io_error` saying the device is full, leave the old content byte-identical (an
append adds nothing, not even part of its record) and leave no temp file.

Workspace removed: the workspace directory is deleted while the sandbox runs;
every tool must answer a stable error code whose message says the workspace
itself is gone, and the sandbox must keep answering.

    python scripts/enospc.py [--rounds 200]

tests/test_enospc.py runs one round of each.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral import Sandbox
from corral.fs import TEMP_PREFIX
from corral.policy import Policy

TMPFS_BYTES = 1024 * 1024
OLD = "old line\n" * 10_000  # 90 KB in every file the writers aim at
FREE_BYTES = 48 * 1024  # left free on the device: less than any write below
NEW = "new line\n" * 20_000  # 180 KB: never fits
FILES = ("w.txt", "e.txt", "a.txt", "c.txt")
POLICY = Policy(tool_modes={"delete_file": "allow"})


class CannotMount(Exception):
    """No tmpfs could be mounted (not root, or no mount namespace rights)."""


@contextlib.contextmanager
def small_tmpfs(base: Path) -> Iterator[Path]:
    """A fresh 1 MiB tmpfs at base/tmpfs, unmounted on exit."""
    mount = base / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        raise CannotMount(done.stderr.strip() or f"mount exited {done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path) -> Path:
    """The workspace on `mount`, its files written, the device then filled up to
    FREE_BYTES."""
    ws = mount / "ws"
    ws.mkdir()
    for name in FILES:
        (ws / name).write_text(OLD)
    free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    (mount / "filler").write_bytes(b"\0" * max(0, free - FREE_BYTES))
    return ws


def writers(i: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("write_file", {"path": "w.txt", "content": NEW}),
        ("write_file", {"path": f"new{i}.txt", "content": NEW}),
        ("edit_file", {"path": "e.txt", "old_string": OLD, "new_string": NEW}),
        ("append_file", {"path": "a.txt", "content": NEW}),
        ("copy_file", {"source": "c.txt", "destination": f"copy{i}.txt"}),
        ("copy_file", {"source": "c.txt", "destination": "w.txt", "overwrite": True}),
    ]


def disk_full(ws: Path, rounds: int) -> Counter[str]:
    """Every writer `rounds` times on the full device; AssertionError on a broken promise."""
    outcomes: Counter[str] = Counter()
    with Sandbox(ws, policy=POLICY) as sb:
        for i in range(rounds):
            for tool, arguments in writers(i):
                response = sb.call(tool, arguments)
                error = response.get("error") or {}
                message = error.get("message", "").lower()
                if error.get("code") != "io_error" or "no space left" not in message:
                    raise AssertionError(f"{tool} on a full disk answered {response}")
                outcomes[f"{tool}:{error['code']}"] += 1
            check_intact(ws)
    return outcomes


def check_intact(ws: Path) -> None:
    changed = [name for name in FILES if (ws / name).read_text() != OLD]
    extra = sorted(p.name for p in ws.iterdir() if p.name not in FILES)
    if changed or extra:
        raise AssertionError(f"changed: {changed}; left behind: {extra}")
    temps = list(ws.rglob(TEMP_PREFIX + "*"))
    if temps:
        raise AssertionError(f"temp files left: {temps}")


def removed_workspace(base: Path, rounds: int) -> Counter[str]:
    """Every tool on a sandbox whose workspace was deleted under it."""
    ws = base / "gone"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    calls = [
        ("read_file", {"path": "a.txt"}), ("write_file", {"path": "b.txt", "content": "b"}),
        ("edit_file", {"path": "a.txt", "old_string": "a", "new_string": "b"}),
        ("append_file", {"path": "a.txt", "content": "b"}),
        ("list_directory", {"path": "."}), ("search_files", {"pattern": "*"}),
        ("grep", {"pattern": "a"}), ("create_directory", {"path": "d"}),
        ("move_file", {"source": "a.txt", "destination": "b.txt"}),
        ("copy_file", {"source": "a.txt", "destination": "b.txt"}),
        ("delete_file", {"path": "a.txt"}), ("read_multiple_files", {"paths": ["a.txt"]}),
    ]
    outcomes: Counter[str] = Counter()
    with Sandbox(ws, policy=POLICY) as sb:
        assert sb.call("read_file", {"path": "a.txt"})["ok"]
        shutil.rmtree(ws)
        for _ in range(rounds):
            for tool, arguments in calls:
                response = sb.call(tool, arguments)
                if tool == "read_multiple_files" and response["ok"]:
                    response = response["result"]["files"][0]
                error = response.get("error") or {}
                if response["ok"] or "workspace directory was removed" not in error["message"]:
                    raise AssertionError(f"{tool} on a removed workspace answered {response}")
                outcomes[f"{tool}:{error['code']}"] += 1
        ws.mkdir()  # a new directory at the old path is not the sandbox's workspace
        response = sb.call("write_file", {"path": "b.txt", "content": "b"})
        if response["ok"] or list(ws.iterdir()):
            raise AssertionError(f"a write reached the new directory: {response}")
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        try:
            with small_tmpfs(Path(tmp)) as mount:
                outcomes = disk_full(fill(mount), args.rounds)
            print(f"disk full: {sum(outcomes.values())} writes in {time.monotonic() - start:.1f}"
                  f" s, all io_error 'no space left', old content intact, no temp left; "
                  f"{dict(outcomes)}")
        except CannotMount as exc:
            print(f"disk full: skipped, cannot mount a tmpfs ({exc})")
        start = time.monotonic()
        outcomes = removed_workspace(Path(tmp), args.rounds)
        print(f"workspace removed: {sum(outcomes.values())} calls in "
              f"{time.monotonic() - start:.1f} s, each a clear error; {dict(outcomes)}")


if __name__ == "__main__":
    main()
