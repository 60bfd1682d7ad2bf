"""Short version of scripts/enospc.py (a full tmpfs, a workspace deleted under a
running sandbox), and an append cut short by a file size limit."""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

import pytest

from corral.errors import CorralError
from corral.fs import Root
from tests.helpers.scripts_loader import load_script

enospc = load_script("enospc")


def test_a_full_disk_fails_every_writer_clearly_and_changes_nothing(tmp_path: Path):
    try:
        with enospc.small_tmpfs(tmp_path) as mount:
            outcomes = enospc.disk_full(enospc.fill(mount), rounds=1)  # raises on a failure
    except enospc.CannotMount as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
    assert sum(outcomes.values()) == len(enospc.writers(0))


def test_a_removed_workspace_is_named_in_every_error(tmp_path: Path):
    outcomes = enospc.removed_workspace(tmp_path, rounds=1)  # raises on a failure
    assert set(outcomes) == {
        f"{tool}:not_found" for tool in (
            "read_file", "write_file", "edit_file", "append_file", "list_directory",
            "search_files", "grep", "create_directory", "move_file", "copy_file",
            "delete_file", "read_multiple_files",
        )
    }


def test_an_append_cut_short_leaves_no_part_of_its_record(tmp_path: Path):
    """RLIMIT_FSIZE makes the kernel write part of the record, then fail (EFBIG), as a
    full disk does; the part must be gone again. In a child: the limit is per process."""
    (tmp_path / "log.txt").write_bytes(b"old record\n")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
            with Root(str(tmp_path)) as root:
                try:
                    root.append("log.txt", b"x" * 10_000, max_file_bytes=1 << 20)
                except CorralError as exc:
                    code = 0 if exc.code == "io_error" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / "log.txt").read_bytes() == b"old record\n"


def test_a_worker_started_after_the_workspace_was_removed_names_it(tmp_path: Path):
    """A worker forked once the workspace is gone (its path cannot be bound in the
    mount namespace) stands an empty removed directory in for it: the call fails
    not_found naming the removal, and the sandbox keeps answering."""
    from corral import Sandbox

    ws = tmp_path / "gone"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    with Sandbox(ws) as sb:
        assert sb.call("read_file", {"path": "a.txt"})["ok"]
        (ws / "a.txt").unlink()
        ws.rmdir()
        for pid in sb.pids()["workers"]:  # every later call needs a newly forked worker
            os.kill(pid, signal.SIGKILL)
        for _ in range(2):
            answer = sb.call("read_file", {"path": "a.txt"})
            if answer["error"]["code"] != "worker_crashed":  # the call that met the kill
                break
        assert answer["error"]["code"] == "not_found", answer
        assert "workspace directory was removed" in answer["error"]["message"]
        assert sb.call("list_directory", {"path": "."})["error"]["code"] == "not_found"
