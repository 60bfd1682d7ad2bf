"""What a compromised worker reaches of its workspace's history store, tried from
inside a real confined worker of one sandbox while another sandbox, on the same
workspace with a root of its own, keeps copies there: its own work directory, and
the kept directories of its own roots, read only; not the store's own files, not
another sandbox's work directory, not the copies of a root it does not have, by
no route (the store's fds, absolute paths, `..` from a root's descriptor)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox, testing
from corral.calls.control import SandboxSetup
from corral.config import HistoryOptions, SandboxOptions
from corral.history.store import work_name
from corral.policy import RootSpec
from corral.sandbox import worker
from tests.helpers.calls import ok
from tests.helpers.confined import run_confined


@pytest.fixture
def two(workspace: Path, tmp_path: Path) -> Iterator[tuple[Sandbox, Sandbox, Path]]:
    """A: the workspace alone. B: the workspace and `private`, which only B has; B
    rewrote private/diary.txt, so the store keeps its old text."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "diary.txt").write_text("dear diary: the old secret\n")
    with Sandbox(workspace) as a, Sandbox(
        workspace, allowed_paths=[RootSpec(str(private), "rw")]
    ) as b:
        ok(b, "write_file", path=str(private / "diary.txt"), content="nothing to see\n")
        ok(a, "write_file", path="hello.txt", content="A's own change\n")
        a.history(), b.history()  # both committed
        yield a, b, private


def _setup(sb: Sandbox) -> worker.Setup:
    """What a worker of `sb` serves with, as its zygote builds it."""
    return worker.Setup.open(SandboxSetup.of(
        sb.roots, sb.limits, sb.policy, SandboxOptions(), testing.history(sb).work_path), sb.policy)


def _reads(paths: dict[str, str], root_fd: int) -> dict[str, Any]:
    """In the confined worker: open each path for reading ("..": from the root fd)."""
    found: dict[str, Any] = {}
    for name, path in paths.items():
        try:
            fd = os.open(path, os.O_RDONLY, dir_fd=root_fd)
        except OSError as exc:
            found[name] = exc.errno
            continue
        try:
            found[name] = os.read(fd, 100) if not os.path.isdir(f"/proc/self/fd/{fd}") else "dir"
        finally:
            os.close(fd)
    return found


@pytest.mark.parametrize("drop", [(), ("mount_namespace",)])
def test_a_worker_reads_only_its_own_roots_copies(
    two: tuple[Sandbox, Sandbox, Path], workspace: Path, drop: tuple[str, ...]
) -> None:
    a, _, private = two
    home = Path(a.history_path)
    kept = {p.read_bytes(): p for p in home.rglob("b-*")}
    secret = kept[b"dear diary: the old secret\n"]
    mine = kept[b"hello\nworld\n"]
    theirs = home / work_name([str(workspace), str(private)])
    (theirs / "b-0-0").write_text("a copy B's worker left, not committed yet\n")
    record = next(home.glob("r-*.json"))
    setup = _setup(a)
    try:
        dirs = setup.confined_dirs()
        root_fd = setup.roots.workspace.fd
        paths = {
            "own kept copy": str(mine),
            "B's kept copy": str(secret),
            "B's kept copy, by .. from the root": os.path.relpath(secret, workspace),
            "B's work directory": str(theirs / "b-0-0"),
            "the store's own record": str(record),
            "the store, by .. from the root": os.path.relpath(record, workspace),
        }
        outcome = run_confined(_reads, paths, root_fd, roots=dirs,
                               keep_fds=[d.fd for d in dirs], drop=drop)
    finally:
        setup.close()
    assert outcome.ok, outcome
    found = outcome.value
    assert found.pop("own kept copy") == b"hello\nworld\n"
    # Landlock refuses (EACCES); the mount namespace, where it is, hides them (ENOENT)
    refused = {errno.EACCES} if drop else {errno.ENOENT, errno.EACCES}
    assert all(why in refused for why in found.values()), found
    if drop:
        assert set(found.values()) == {errno.EACCES}, found


def test_a_change_another_sandbox_made_to_a_shared_root_is_undone(
    two: tuple[Sandbox, Sandbox, Path], workspace: Path
) -> None:
    """B's copy of a workspace file lies in the workspace's kept directory, which A's
    workers read: A undoes B's change (in a worker that cannot see B's private root)."""
    a, b, _ = two
    ok(b, "write_file", path="shared.txt", content="one\n")
    ok(b, "write_file", path="shared.txt", content="two\n")
    b.history()
    undone = a.undo("shared.txt")
    assert undone["result"]["restored"] == ["shared.txt"], undone
    assert (workspace / "shared.txt").read_text() == "one\n"


def test_a_store_written_before_kept_directories_is_moved_into_them(
    workspace: Path, tmp_path: Path
) -> None:
    """A store an earlier version wrote (kept copies in the work directory, no kept
    directory, no mirror): the next sandbox moves them, and its workers undo."""
    options = HistoryOptions(path=str(tmp_path / "hist"))
    # (an earlier version took no snapshots, which live in the kept directories)
    with Sandbox(workspace, history=dataclasses.replace(options, snapshots=False)) as sb:
        ok(sb, "write_file", path="hello.txt", content="two\n")
        cp = sb.checkpoint()
        ok(sb, "write_file", path="hello.txt", content="three\n")
        assert testing.history(sb).work_path is not None
        home, work = Path(testing.history(sb).path), Path(testing.history(sb).work_path)
    for record in home.glob("r-*.json"):  # as the earlier version left it
        data = json.loads(record.read_text())
        for entry in data["entries"]:
            blob = entry["before"]["blob"]
            (home / blob).rename(work / blob.partition("/")[2])
            entry["before"]["blob"] = f"{work.name}/{blob.partition('/')[2]}"
        record.write_text(json.dumps(data))
    for kept in home.glob("k-*"):
        shutil.rmtree(kept)
    (home / "kept-dirs").unlink()
    with Sandbox(workspace, history=options) as sb:
        assert sb.undo("hello.txt")["result"]["restored"] == ["hello.txt"]
        assert (workspace / "hello.txt").read_text() == "two\n"
        assert sb.rewind(cp)["result"]["conflicts"] == []  # its checkpoint is found too
    assert (workspace / "hello.txt").read_text() == "two\n"
    assert not list(work.glob("b-*"))  # every copy in the kept directory
