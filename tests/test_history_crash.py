"""Crash safety of recorded changes: a process killed at each instant of a recorded
change leaves the tree old or new and a history that agrees once settled; and a
short version of scripts/crash_history.py (kill -9 of a worker and of a host)."""

from __future__ import annotations

import errno
import fcntl
import os
import random
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from corral.config import Limits, SandboxOptions
from corral.fs import Root, Roots, content_version
from corral.history import keeper as keeper_module
from corral.history import recover, restore, revert
from corral.history.keeper import Keeper
from corral.history.store import Store, new_id
from corral.policy import Policy, RootSpec
from tests.helpers.history_helpers import (
    commit_done,
    die_after,
    left,
    promoted,
    renames_into_the_store_cross_mounts,
    settled,
    snapshot,
    work_store,
)
from tests.helpers.scripts_loader import load_script

crash_history = load_script("crash_history")

OLD, NEW = b"old content\n", b"new content, longer\n"


def _die_before(target: Any, name: str) -> None:
    setattr(target, name, lambda *args, **kwargs: os._exit(9))


def _die_creating(self: Store, record: dict[str, Any]) -> None:
    name = f"r-{record['id']}.pending"
    os.close(os.open(name, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=self.fd))
    os._exit(9)  # the record's file exists, empty: torn


def _copy_half_and_die(self: Store, src_fd: int, blob: str) -> int:
    """The old file copied into the store (as across mounts), cut short by a kill."""
    fd = os.open(blob, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=self.fd)
    os.write(fd, os.pread(src_fd, len(OLD) // 2, 0))
    os._exit(9)


def _copies_across_mounts() -> None:
    """Renames into the store fail as across mounts (EXDEV): the old file is copied,
    and the copy dies half way."""
    renames_into_the_store_cross_mounts()
    Store.stash_copy = _copy_half_and_die  # type: ignore[method-assign]


CRASH_POINTS: dict[str, Callable[[], None]] = {
    "old file half copied": _copies_across_mounts,
    "record torn": lambda: setattr(Store, "write_pending", _die_creating),
    "record written": lambda: die_after(Store, "write_pending"),
    "new file swapped in": lambda: die_after(keeper_module, "renameat2"),
    "old file taken": lambda: die_after(Keeper, "_take"),
    "before the commit": lambda: _die_before(Store, "commit"),
    "committed": lambda: die_after(Store, "commit"),
}


def _change(workspace: Path, store_dir: Path, action: str) -> None:
    """In a child: one recorded change, crashing where CRASH_POINTS says."""
    root, store = Root(str(workspace)), Store.open(str(store_dir))
    keep = Keeper(store, root.path, action)
    if action == "write":
        root.write_atomic("f.txt", NEW, keep=keep)
    elif action == "append":
        root.append("f.txt", NEW, max_file_bytes=1 << 20, keep=keep)
    elif action == "delete":
        root.unlink("f.txt", keep=keep)
    elif action == "move":
        root.rename("f.txt", root, "g.txt", keep=keep)


def _crashed_change(workspace: Path, store_dir: Path, point: str, action: str) -> int:
    """f.txt holding OLD, then `action` on it in a forked child that dies at `point`;
    returns the dead child's pid."""
    workspace.mkdir()
    store_dir.mkdir(parents=True)
    (workspace / "f.txt").write_bytes(OLD)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child dies at the crash point or exits
        try:
            CRASH_POINTS[point]()
            _change(workspace, store_dir, action)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return pid


EXPECTED_NEW = {"write": {"f.txt": NEW}, "append": {"f.txt": OLD + NEW}, "delete": {},
                "move": {"g.txt": OLD}}


@pytest.mark.parametrize("action", ["write", "append", "delete", "move"])
@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_a_kill_at_every_instant_of_a_change(tmp_path: Path, action: str, point: str) -> None:
    workspace, store_dir = tmp_path / "ws", tmp_path / "store" / "w-test"
    pid = _crashed_change(workspace, store_dir, point, action)
    files = {p.name: p.read_bytes() for p in workspace.iterdir() if not p.name.startswith(".")}
    assert files in ({"f.txt": OLD}, EXPECTED_NEW[action])  # old or new, never torn
    store = settled(workspace, store_dir, [pid])
    with closing(store), Root(str(workspace)) as root:
        roots = Roots(root)
        listing = store.listing()
        assert left(store_dir, ".pending", ".done") == []
        if files == {"f.txt": OLD}:
            # nothing landed, nothing recorded
            assert listing.records == [] and [p for p in store_dir.iterdir()] == []
            return
        assert len(listing.records) == 1  # it landed: its record says so, and undoes it
        outcome = restore.undo(roots, store, Policy(), Limits(), "f.txt", force=False)
        assert outcome["conflicts"] == [], outcome
        after = {p.name: p.read_bytes() for p in workspace.iterdir()}
        assert after == {"f.txt": OLD}
        assert content_version(OLD) == content_version((workspace / "f.txt").read_bytes())


@pytest.mark.parametrize("who", ["worker", "host"])
def test_kill_9_at_random_points_of_recorded_writes(tmp_path: Path, who: str) -> None:
    workspace, store = tmp_path / "ws", tmp_path / "store"
    workspace.mkdir()
    store.mkdir()
    run = crash_history.kill_workers if who == "worker" else crash_history.kill_hosts
    counts = run(workspace, store, 4, random.Random(7))
    assert sum(counts.values()) >= 1


def test_settle_leaves_a_live_writers_record_alone(tmp_path: Path) -> None:
    """A pending record whose writer holds its lock may be in the middle of being
    written: left alone, whatever its pid says; once the lock is gone, settled."""
    workspace, work = tmp_path / "ws", tmp_path / "store" / "w-test"
    workspace.mkdir()
    work.mkdir(parents=True)
    being_written = work / f"r-{new_id()}.pending"
    being_written.write_text("")
    writer = os.open(being_written, os.O_RDONLY)
    fcntl.flock(writer, fcntl.LOCK_EX)  # as Store.write_pending holds it
    try:
        settled(workspace, work, None)
        assert being_written.exists()
    finally:
        os.close(writer)  # the writer dies: the kernel drops its lock
    settled(workspace, work, None)
    assert not being_written.exists()  # empty: torn as it was created, dropped


def test_the_start_up_sweep_keeps_a_dead_writers_old_file(tmp_path: Path) -> None:
    """A writer killed after swapping its new file in, before the old one went into
    the store, left the old file in its temp. The sweep of a later sandbox removes
    dead writers' temps: it must settle their history first (as the cleanup after a
    crash does), or the old file is gone and the write cannot be undone."""
    from corral.sandbox import worker

    workspace, work = tmp_path / "ws", tmp_path / "store" / "w-test"
    pid = _crashed_change(workspace, work, "new file swapped in", "write")
    assert (workspace / "f.txt").read_bytes() == NEW
    from corral.calls.control import SandboxSetup

    roots = [RootSpec(str(workspace), "rw")]
    setup = worker.Setup.open(
        SandboxSetup.of(roots, Limits(), Policy(), SandboxOptions(), str(work)), Policy())
    try:
        temps = worker.find_temps(setup)
        assert [owner for _, _, owner in temps] == [pid]  # the old file, in the dead one's temp
        assert worker.remove_temps(tuple((index, path) for index, path, _ in temps), setup) == 0
        store = settled(workspace, work, [])  # the host promotes what the sweep settled
        outcome = restore.undo(setup.roots, store, Policy(), Limits(), "f.txt", force=False)
    finally:
        setup.close()
    assert outcome["conflicts"] == [], outcome
    assert (workspace / "f.txt").read_bytes() == OLD


def _die_mid_append() -> None:
    """The append's write lands part-way, then the process dies (a kill -9 inside a
    big write(2): the kernel stops between pages)."""
    from corral.fs import _atomic

    def torn(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 3])
        os._exit(9)

    _atomic.append_whole = torn  # type: ignore[assignment]


def _torn_append(workspace: Path, work: Path, rel: str) -> int:
    """In a forked child, an append to `rel` that dies part-way; the dead child's pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - dies inside the append
        try:
            _die_mid_append()
            root = Root(str(workspace))
            keep = Keeper(Store.open(str(work)), root.path, "append_file")
            root.append(rel, NEW * 1000, max_file_bytes=1 << 20, keep=keep)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return pid


@pytest.mark.parametrize("exists", [True, False])
def test_a_torn_append_is_cut_back_when_settled(tmp_path: Path, exists: bool) -> None:
    """A writer killed inside its append left part of it: settling cuts the file
    back to what it held (removes a file the append created, and the directories it
    made), so history and tree agree and nothing half-written stays."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    work, store = work_store(tmp_path / "store")
    target = workspace / "log.txt" if exists else workspace / "new" / "log.txt"
    if exists:
        target.write_bytes(OLD)
    pid = _torn_append(workspace, work, str(target.relative_to(workspace)))
    assert target.exists() and target.stat().st_size not in (0, len(OLD))  # torn
    restorer = revert.Restorer(Roots(Root(str(workspace))), store, Policy(), 1 << 20, "settle")
    with store.settling():
        assert recover.settle(restorer, [pid]) == 1
    assert left(work, ".pending", ".done") == []  # dropped: there is nothing to promote
    assert promoted(store, work, workspace).listing().records == []
    if exists:
        assert target.read_bytes() == OLD
    else:
        assert list(workspace.iterdir()) == []


@pytest.mark.parametrize("later", ["committed", "done here", "done in another work directory"])
def test_a_torn_append_followed_by_another_is_left_alone(tmp_path: Path, later: str) -> None:
    """Cutting back would take a later append's bytes too: the torn one stays, and
    its record goes (an undo of it would be a conflict). The later append is seen
    whether the host has committed its record yet or not (it commits a call's
    records off the call's path, after the settle may have run), and whichever
    sandbox made it (one writing other roots too has a work directory of its own)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    work, store = work_store(tmp_path / "store")
    (workspace / "log.txt").write_bytes(OLD)
    pid = _torn_append(workspace, work, "log.txt")
    root = Root(str(workspace))
    other = tmp_path / "store" / "w-other"
    other.mkdir()
    writer = Store.open(str(other)) if later == "done in another work directory" else store
    root.append("log.txt", b"later\n", max_file_bytes=1 << 20,
                keep=Keeper(writer, root.path, "append_file"))
    if later == "committed":
        promoted(store, work, workspace)
    torn = (workspace / "log.txt").read_bytes()
    restorer = revert.Restorer(Roots(root), store, Policy(), 1 << 20, "settle")
    with store.settling():
        assert recover.settle(restorer, [pid]) == 1
    assert (workspace / "log.txt").read_bytes() == torn
    promoted(writer, other if writer is not store else work, workspace)
    assert len(store.listing().records) == 1  # the later append's
    assert left(work, ".pending", ".done") == left(other, ".pending", ".done") == []


def _fs_calls_die_at(n: int, exdev: bool) -> None:
    """In a forked child: the n-th of the file-system calls a restore makes kills
    the process; with `exdev`, the store is another mount (as in a worker's mount
    namespace): a rename into it fails EXDEV, so what is kept is copied."""
    count = [0]
    for module, name in ((os, "rename"), (os, "unlink"), (os, "rmdir"), (os, "mkdir"),
                         (os, "write"), (os, "open"), (keeper_module, "renameat2")):
        real = getattr(module, name)

        def dying(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n:
                os._exit(9)
            return _real(*args, **kwargs)

        setattr(module, name, dying)
    if exdev:
        counted = os.rename

        def rename(src: str, dst: str, *, src_dir_fd: int | None = None,
                   dst_dir_fd: int | None = None) -> None:
            if src_dir_fd != dst_dir_fd:
                raise OSError(errno.EXDEV, "another mount")
            counted(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

        os.rename = rename  # type: ignore[assignment]


def _restore_scene(base: Path) -> tuple[Root, Path, Store, str, dict[str, Any]]:
    """A tree, a checkpoint, changes of every kind after it, committed; and the tree
    as it was."""
    workspace = base / "ws"
    (workspace / "d").mkdir(parents=True)
    work, store = work_store(base / "store")
    (workspace / "a.txt").write_bytes(OLD)
    (workspace / "log.txt").write_bytes(OLD)
    (workspace / "gone.txt").write_bytes(OLD)
    (workspace / "d" / "x.txt").write_bytes(OLD)
    root = Root(str(workspace), durable=False)
    at_checkpoint = snapshot(workspace)
    cp = store.checkpoint(None)
    root.write_atomic("a.txt", NEW, keep=Keeper(store, root.path, "write_file"))
    root.write_atomic("new/deep/n.txt", NEW, keep=Keeper(store, root.path, "write_file"))
    root.append("log.txt", NEW, max_file_bytes=1 << 20, keep=Keeper(store, root.path, "append"))
    root.rename("d", root, "e", keep=Keeper(store, root.path, "move_file"))
    root.unlink("gone.txt", keep=Keeper(store, root.path, "delete_file"))
    promoted(store, work, workspace)
    return root, work, store, cp, at_checkpoint


@pytest.mark.parametrize("exdev", [False, True])
def test_a_rewind_killed_at_any_step_then_run_again_gives_the_checkpoint(
    tmp_path: Path, exdev: bool
) -> None:
    """Killed at the n-th file-system call, for every n until one run finishes: once
    settled and what was done committed (as the host does before the next undo or
    rewind), no temp file is left and nothing is pending, and the same rewind again
    gives the checkpoint."""
    for n in range(1, 500):
        base = tmp_path / str(n)
        root, work, store, cp, at_checkpoint = _restore_scene(base)
        try:
            if _rewind_killed_at(n, exdev, base, root, work, store, cp, at_checkpoint):
                break
        finally:  # each case's root and store: ~500 cases would hold thousands of fds
            root.close()
            store.close()
    else:
        pytest.fail("the rewind never finished")


def _rewind_killed_at(
    n: int, exdev: bool, base: Path, root: Root, work: Path, store: Store, cp: str,
    at_checkpoint: dict[str, Any],
) -> bool:
    """One case of the test above; True once a rewind ran to its end."""
    at_rewind = snapshot(base / "ws")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - dies at the n-th call, or finishes
        _fs_calls_die_at(n, exdev)
        restore.rewind(Roots(root), store, Policy(), Limits(), cp, False)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    before_rewind = snapshot(base / "ws")
    with store.settling():
        recover.settle(revert.Restorer(Roots(root), store, Policy(), 1 << 20, "settle"),
                       [pid])
    refused = commit_done(store, work, root.path)
    if refused:  # killed writing its checkpoint, its first step: torn, and nothing changed
        assert [name[:2] for name in refused] == ["c-"], (n, refused)
        assert before_rewind == snapshot(base / "ws") == at_rewind, n
    assert left(work, ".pending", ".done") == [], n
    tree = snapshot(base / "ws")
    assert [p for p in tree if ".corral-tmp-" in p] == [], n
    if os.waitstatus_to_exitcode(status) == 0:
        return True
    again = restore.rewind(Roots(root), store, Policy(), Limits(), cp, False)
    assert again["conflicts"] == [], (n, again)
    assert snapshot(base / "ws") == at_checkpoint, n
    return False
