"""The history store: bounds, a store that cannot be written, and that no tool and no
other workspace's worker can reach it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import Sandbox, testing
from corral.config import HistoryOptions, SandboxOptions, load_config
from corral.fs import Root
from corral.history import bounds, host
from corral.history.bounds import BOUND
from corral.history.host import BOUND_EVERY_S
from corral.history.keeper import Keeper
from corral.history.location import workspace_key
from corral.history.records import Entry, Record, State
from corral.history.store import Store, kept_name, new_id
from corral.policy import Policy
from corral.sandbox.worker import StoreDir
from tests.helpers.calls import ok
from tests.helpers.confined import run_confined
from tests.helpers.history_helpers import promoted, snapshot, work_store

EVERYTHING = Policy(tool_modes={"delete_file": "allow"})


def used(store: Path) -> int:
    """What the store holds: its records and the kept copies, each file once (the kept
    directories hold hard links of the records)."""
    return sum({(st.st_dev, st.st_ino): st.st_size
                for st in (p.stat() for p in store.rglob("*") if p.is_file())}.values())


def test_eviction_keeps_the_store_within_max_bytes(workspace: Path, tmp_path: Path) -> None:
    bound = 64 * 1024
    options = HistoryOptions(path=str(tmp_path / "hist"), max_bytes=bound)
    with Sandbox(workspace, history=options) as sb:
        store = Path(sb.history_path)
        for round_ in range(40):
            ok(sb, "write_file", path="big.txt", content=f"{round_:04d}" * 2048)  # 8 KiB
            assert used(store) <= bound
        assert len(sb.history()) < 40  # the oldest went
        assert sb.undo("big.txt")["result"]["restored"] == ["big.txt"]  # the newest stayed
        assert (workspace / "big.txt").read_text() == "0038" * 2048


def test_a_full_store_is_not_read_through_after_every_change(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = HistoryOptions(path=str(tmp_path / "hist"), max_bytes=400 * 1024)
    scans = []
    usage = bounds.usage_of
    monkeypatch.setattr(bounds, "usage_of", lambda store: scans.append(1) or usage(store))
    with Sandbox(workspace, history=options) as sb:
        for round_ in range(100):  # 8 KiB each: the bound is passed at about the 50th
            ok(sb, "write_file", path="big.txt", content=f"{round_:04d}" * 2048)
        assert used(Path(sb.history_path)) <= options.max_bytes
    # evicting down to 90% leaves room for four more changes before the next eviction
    # (evicting just under the bound read the store after each of the last ~50)
    assert len(scans) <= 1 + 50 // 3


def bounded_long_ago(store: Path) -> None:
    """As if the last host to read the store through did it before BOUND_EVERY_S."""
    held = store.joinpath(BOUND).read_text().split()[0]
    store.joinpath(BOUND).write_text(f"{held} {int(time.time()) - BOUND_EVERY_S - 1}\n")


def test_eviction_by_age_when_a_sandbox_opens(workspace: Path, tmp_path: Path) -> None:
    options = HistoryOptions(path=str(tmp_path / "hist"), max_age_days=1)
    with Sandbox(workspace, history=options) as sb:
        ok(sb, "write_file", path="a.txt", content="a")
        store, work = Path(sb.history_path), Path(testing.history(sb).work_path)
    old = f"{(1_000_000_000 * 10**9):016x}" + new_id()[16:]  # 2001
    (store / f"r-{old}.json").write_text(f'{{"id": "{old}", "entries": []}}')
    (work / f"b-{old}-0").write_text("old bytes")  # its kept copy, where its writer put it
    bounded_long_ago(store)
    with Sandbox(workspace, history=options) as sb:
        assert not (store / f"r-{old}.json").exists()
        assert not (work / f"b-{old}-0").exists()
        assert [e["path"] for e in sb.history()] == ["a.txt"]


def test_a_start_soon_after_a_bound_takes_its_note_and_reads_no_store(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bounding reads the whole store: a start within BOUND_EVERY_S of the last bound
    takes the bytes it found from the note it left, and reads nothing else."""
    options = HistoryOptions(path=str(tmp_path / "hist"), max_bytes=400 * 1024)
    with Sandbox(workspace, history=options) as sb:
        ok(sb, "write_file", path="a.txt", content="a" * 4096)
        store = Path(sb.history_path)
    held, when = map(int, store.joinpath(BOUND).read_text().split())
    assert held > 0 and abs(when - time.time()) < 60  # its record (a new file keeps no copy)
    scans = []
    usage = bounds.usage_of
    monkeypatch.setattr(bounds, "usage_of", lambda store: scans.append(1) or usage(store))
    with Sandbox(workspace, history=options) as sb:
        assert testing.history_usage(sb) == held
        ok(sb, "write_file", path="a.txt", content="b" * 4096)
    assert scans == []
    grown, same = map(int, store.joinpath(BOUND).read_text().split())
    assert grown > held + 4096 and same == when  # what it stored, counted at its close
    bounded_long_ago(store)
    Sandbox(workspace, history=options).close()
    assert scans == [1]  # read through again, and noted again
    assert time.time() - int(store.joinpath(BOUND).read_text().split()[1]) < 60


def test_one_shot_sandboxes_one_after_another_keep_the_store_bounded(
    workspace: Path, tmp_path: Path,
) -> None:
    """Each adds what it stored to the note at its close, and a start whose note is
    over the bound reads the store through at once: a loop of `corral call`s
    cannot grow the store past its bound by skipping the read."""
    bound = 64 * 1024
    options = HistoryOptions(path=str(tmp_path / "hist"), max_bytes=bound)
    for round_ in range(30):
        with Sandbox(workspace, history=options) as sb:
            ok(sb, "write_file", path="big.txt", content=f"{round_:04d}" * 2048)  # 8 KiB
            store = Path(sb.history_path)
        assert used(store) <= bound + 16 * 1024  # one change more, until the next start
    with Sandbox(workspace, history=options) as sb:
        assert used(store) <= bound
        assert len(sb.history()) < 30


@pytest.mark.parametrize("note", ["garbage", "-5 1", "12", "9" * 40 + " 1", "future",
                                  "symlink", "fifo", "directory"])
def test_a_note_that_is_not_one_bounds_the_store(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, note: str,
) -> None:
    """The note is in the store, which is input: anything but a plain number of bytes,
    noted no later than now, and the start bounds the store as if there were none."""
    options = HistoryOptions(path=str(tmp_path / "hist"))
    with Sandbox(workspace, history=options) as sb:
        store = Path(sb.history_path)
    path = store / BOUND
    path.unlink()
    if note == "symlink":
        (tmp_path / "elsewhere").write_text(f"12 {int(time.time())}\n")
        path.symlink_to(tmp_path / "elsewhere")
    elif note == "fifo":  # read without blocking, and refused
        os.mkfifo(path)
    elif note == "directory":
        path.mkdir()
    elif note == "future":  # it would put off reading the store through for good
        path.write_text(f"12 {int(time.time()) + 3600}\n")
    else:
        path.write_text(note)
    scans = []
    usage = bounds.usage_of
    monkeypatch.setattr(bounds, "usage_of", lambda store: scans.append(1) or usage(store))
    Sandbox(workspace, history=options).close()
    assert scans == [1]


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("needs a tmpfs mount (root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_store_fails_the_call_and_changes_nothing(workspace: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "256k") as mount:
        options = HistoryOptions(path=str(mount))
        with Sandbox(workspace, policy=EVERYTHING, history=options) as sb:
            filler = mount / "filler"
            with contextlib.suppress(OSError):
                filler.write_bytes(b"x" * 1024 * 1024)
            before = snapshot(workspace)
            for tool, arguments in (
                ("write_file", {"path": "hello.txt", "content": "new"}),
                ("append_file", {"path": "hello.txt", "content": "more"}),
                ("edit_file", {"path": "hello.txt", "old_string": "hello", "new_string": "bye"}),
                ("delete_file", {"path": "hello.txt"}),
                ("create_directory", {"path": "d"}),
                ("write_file", {"path": "new.txt", "content": "new"}),
            ):
                response = sb.call(tool, arguments)
                assert not response["ok"], (tool, response)
                assert response["error"]["code"] == "io_error"
                assert "history store cannot be written" in response["error"]["message"]
                assert snapshot(workspace) == before  # nothing changed, no temp left
            filler.unlink()
            ok(sb, "write_file", path="hello.txt", content="now it fits")


def test_a_read_only_store_fails_the_call_cleanly(workspace: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "1m") as mount, Sandbox(
        workspace, history=HistoryOptions(path=str(mount))
    ) as sb:
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        try:
            error = sb.call("write_file", {"path": "hello.txt", "content": "x"})["error"]
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
        assert error["code"] == "io_error" and "Read-only file system" in error["message"]
        assert (workspace / "hello.txt").read_text() == "hello\nworld\n"


def test_a_store_inside_a_root_is_refused(workspace: Path) -> None:
    with pytest.raises(ValueError, match="outside every root"):
        Sandbox(workspace, history=HistoryOptions(path=str(workspace / ".history")))
    config = workspace.parent / "corral.toml"
    config.write_text(f'[workspace]\nroot = "{workspace}"\n[history]\npath = "{workspace}/h"\n')
    assert load_config(config).history.path == f"{workspace}/h"
    with pytest.raises(ValueError, match="outside every root"):
        Sandbox.from_config(config)


def test_each_workspace_has_its_own_store(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with Sandbox(tmp_path / "a") as a, Sandbox(tmp_path / "b") as b:
        assert a.history_path != b.history_path
        assert a.history_path.endswith(workspace_key(str(tmp_path / "a")))
        ok(a, "write_file", path="x.txt", content="a")
        assert b.history() == []


def test_no_tool_reaches_the_store(workspace: Path) -> None:
    with Sandbox(workspace, policy=EVERYTHING) as sb:
        ok(sb, "write_file", path="hello.txt", content="recorded")
        testing.history(sb).flush()
        kept = next(Path(testing.history(sb).path).glob("k-*/b-*"))
        store, blob = str(kept.parent), kept.name
        relative = os.path.relpath(store, workspace)
        for path in (store, f"{store}/{blob}", f"{relative}/{blob}", relative):
            for tool, arguments in (
                ("read_file", {"path": path}), ("list_directory", {"path": path}),
                ("stat_file", {"path": path}), ("write_file", {"path": path, "content": "x"}),
                ("append_file", {"path": path, "content": "x"}), ("delete_file", {"path": path}),
                ("create_directory", {"path": path}), ("grep", {"pattern": "x", "path": path}),
                ("search_files", {"pattern": "*", "path": path}),
                ("copy_file", {"source": path, "destination": "stolen"}),
                ("move_file", {"source": path, "destination": "stolen"}),
                ("copy_file", {"source": "hello.txt", "destination": path}),
            ):
                response = sb.call(tool, arguments)
                assert not response["ok"], (tool, path, response)
                assert response["error"]["code"] == "outside_workspace", response
        assert os.path.exists(f"{store}/{blob}")


def _create_in(directory: str) -> bool:
    fd = os.open(f"{directory}/planted", os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    return True


def test_a_worker_reaches_only_its_own_workspace_store(tmp_path: Path) -> None:
    """Landlock: the store's rule is for that one directory, not its siblings."""
    mine, theirs = tmp_path / "state" / "mine", tmp_path / "state" / "theirs"
    mine.mkdir(parents=True)
    theirs.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    fd = os.open(mine, os.O_RDONLY | os.O_DIRECTORY)
    try:
        roots = [(str(workspace), "rw"), StoreDir(fd)]
        assert run_confined(_create_in, str(mine), roots=roots, keep_fds=[fd]).ok
        # Landlock's own refusal: the mount namespace would hide `theirs` outright (ENOENT)
        refused = run_confined(_create_in, str(theirs), roots=roots, keep_fds=[fd],
                               drop=("mount_namespace",))
        assert refused.errno == errno.EACCES
        assert not (theirs / "planted").exists()
        hidden = run_confined(_create_in, str(theirs), roots=roots, keep_fds=[fd])
        assert hidden.errno in (errno.ENOENT, errno.EACCES)  # ENOENT where namespaces exist
        assert not (theirs / "planted").exists()
        control = run_confined(_create_in, str(theirs), roots=roots, keep_fds=[fd],
                               drop=("landlock", "mount_namespace"))
        assert control.ok  # without Landlock the same call would have written there
    finally:
        os.close(fd)


def test_a_store_is_readable_after_a_torn_record(tmp_path: Path) -> None:
    store_dir = tmp_path / "s"
    store_dir.mkdir()
    store = Store.open(str(store_dir))
    try:
        (store_dir / f"r-{new_id()}.json").write_text('{"id": ')  # a crash mid-create
        assert list(store.records()) == []
    finally:
        store.close()


def test_the_store_reads_back_typed_checked_records(tmp_path: Path) -> None:
    """Undo and rewind read a record as records.Record, its states as State (never a
    dict's keys): what the Keeper wrote, the host promoted, reads back equal."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_bytes(b"old\n")
    work, store = work_store(tmp_path / "store")
    try:
        root = Root(str(workspace))
        root.write_atomic("a.txt", b"new\n", keep=Keeper(store, root.path, "write_file"))
        promoted(store, work, workspace)
        [record] = list(store.records())
        assert isinstance(record, Record) and store.record(record.id) == record
        [entry] = record.entries
        assert (entry.rel, entry.kind, entry.action) == ("a.txt", "replace", "modify")
        assert isinstance(entry.before, State) and entry.before.hash is not None
        assert store.read_blob(entry.before) == b"old\n"
        # moved from the work directory, where the worker kept it, to the root's kept one
        blob = f"b-{record.id}-0"
        assert entry.before.blob == f"{kept_name(str(workspace))}/{blob}"
        assert not store.has_blob(State("file", size=4, blob=blob))
        checkpoint = store.checkpoint("label")
        promoted(store, work, workspace)
        info = store.checkpoint_info(checkpoint)
        assert info is not None and info.label == "label"
    finally:
        store.close()


def test_a_store_that_cannot_be_created_says_what_to_do(workspace: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match=r"cannot be created .*enabled = false"):
        Sandbox(workspace, history=HistoryOptions(path=str(blocker / "history")))


def test_the_note_counts_each_commit_not_only_the_close(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process killed before its close (SIGTERM, SIGKILL) must not leave its
    changes out of the note: a commit adds what the calls before it stored, once
    the note's interval has passed (here: none)."""
    monkeypatch.setattr(host, "NOTE_EVERY_S", 0.0)
    options = HistoryOptions(path=str(tmp_path / "hist"))
    with Sandbox(workspace, history=options) as sb:
        store = Path(sb.history_path)
        start = int(store.joinpath(BOUND).read_text().split()[0])
        for round_ in range(3):  # each keeps the last one's 8 KiB
            ok(sb, "write_file", path="big.txt", content=f"{round_:04d}" * 2048)
        testing.history(sb).flush()
        noted = int(store.joinpath(BOUND).read_text().split()[0])
        assert noted >= start + 8192  # the second write's copy, before any close


def test_what_a_worker_leaves_in_its_work_directory_is_bounded(
    workspace: Path, tmp_path: Path
) -> None:
    """A compromised worker fills its work directory with files no record keeps,
    future-dated records and records it holds: once the store is over its bound,
    all but the held record (its writer is mid-call) go, the history's own stays."""
    import fcntl

    options = HistoryOptions(path=str(tmp_path / "hist"), max_bytes=256 * 1024)
    with Sandbox(workspace, history=options) as sb:
        ok(sb, "write_file", path="hello.txt", content="kept\n")
        assert testing.history(sb).work_path is not None
        work = Path(testing.history(sb).work_path)
    for n in range(100):  # 800 KiB no record keeps
        (work / f"junk-{n}").write_bytes(b"x" * 8192)
    future = f"{time.time_ns() + 10**12:016x}{os.getpid() & 0xFFFFFF:06x}0000"
    (work / f"b-{future}-0").write_bytes(b"y" * 300_000)  # over the bound alone
    held_id = f"{time.time_ns() - 10**12:016x}{os.getpid() & 0xFFFFFF:06x}0000"
    held = os.open(work / f"r-{held_id}.pending", os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    bound = Path(tmp_path / "hist").glob("*/bounded")
    for note in bound:
        note.write_text("0 0\n")  # the next start reads the store through
    try:
        with Sandbox(workspace, history=options) as sb:
            assert sorted(p.name for p in work.iterdir()) == [f"r-{held_id}.pending"]
            assert sb.undo("hello.txt")["result"]["restored"] == ["hello.txt"]
    finally:
        os.close(held)


def test_the_note_is_rewritten_at_most_once_an_interval_and_at_the_close(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each rewrite of the note is a rename over it (the dearest step of a small
    write when it was made at every commit): within the interval a commit leaves
    it alone, and the close adds what is left."""
    monkeypatch.setattr(host, "NOTE_EVERY_S", 3600.0)
    options = HistoryOptions(path=str(tmp_path / "hist"))
    with Sandbox(workspace, history=options) as sb:
        note = Path(sb.history_path, BOUND)
        ok(sb, "write_file", path="big.txt", content="0" * 8192)
        testing.history(sb).flush()  # the first commit notes
        first = note.stat().st_ino, note.read_text()
        for round_ in range(1, 3):
            ok(sb, "write_file", path="big.txt", content=f"{round_:04d}" * 2048)
        assert (note.stat().st_ino, note.read_text()) == first
    assert int(note.read_text().split()[0]) >= int(first[1].split()[0]) + 2 * 8192


def test_a_writer_reuses_the_file_of_its_last_committed_record(
    workspace: Path, tmp_path: Path,
) -> None:
    """Creating a file is most of a small write's cost on ext4: the host hands a
    committed record's done file back to its writer (s-<pid>), whose next record
    reuses it; the sandbox's close removes it, and a record still commits whole."""
    options = HistoryOptions(path=str(tmp_path / "hist"))
    with Sandbox(workspace, history=options, options=SandboxOptions(workers=1)) as sb:
        assert testing.history(sb).work_path is not None
        work = Path(testing.history(sb).work_path)
        ok(sb, "write_file", path="a.txt", content="one\n")
        testing.history(sb).flush()  # committed while the next call runs, or now
        [spare] = [p for p in work.iterdir() if p.name.startswith("s-")]
        inode = spare.stat().st_ino
        ok(sb, "write_file", path="a.txt", content="two\n")
        ok(sb, "create_directory", path="d")
        testing.history(sb).flush()
        assert [p.stat().st_ino for p in work.iterdir() if p.name.startswith("s-")] == [inode]
        assert [e["action"] for e in sb.history()] == ["create", "modify", "create"]
        assert sb.undo("a.txt")["ok"] and (workspace / "a.txt").read_text() == "one\n"
    assert not [p for p in work.iterdir() if p.name.startswith("s-")]


def test_a_bound_removes_the_spares_a_killed_host_left(tmp_path: Path) -> None:
    """A host killed before its close leaves its writers' spare files: no one's, so
    the next bound removes them (a writer without one makes a new file)."""
    work, store = work_store(tmp_path / "store")
    try:
        (work / "s-00abcd").write_bytes(b"{}")
        (work / "s-00abce").mkdir()
        bounds.evict(store, 1 << 30, 1e9)
        assert not [p for p in work.iterdir() if p.name.startswith("s-")]
    finally:
        store.close()


def _spare(work: Path, record_id: str, data: bytes) -> Path:
    """The spare the writer of `record_id` takes for its record, left holding `data`."""
    spare = work / f"s-{record_id[16:22]}"
    spare.write_bytes(data)
    return spare


def _creating(workspace: Path, record_id: str) -> Record:
    """A record of a write_file that made a.txt."""
    return Record(record_id, time.time(), "write_file", os.getpid(), (Entry(
        str(workspace), "a.txt", "a.txt", "replace", "create", None, State("file", 1)),))


def test_a_spare_that_is_not_a_plain_file_of_its_own_is_not_reused(tmp_path: Path) -> None:
    """The spare lies in the writer's work directory, which its other workers write
    too: one with a second link, or not a regular file, is left alone and the
    record is written to a new file."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    work, store = work_store(tmp_path / "store")
    try:
        record_id = new_id()
        spare = _spare(work, record_id, b"old")
        os.link(spare, tmp_path / "other-name")
        record = _creating(workspace, record_id)
        store.write_pending(record)
        assert spare.read_bytes() == b"old" and (tmp_path / "other-name").read_bytes() == b"old"
        pending = (work / f"r-{record_id}.pending").read_bytes()
        assert Record.from_wire(json.loads(pending)) == record
    finally:
        store.close()


def test_a_spare_replaced_under_its_writer_is_not_taken_for_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host may remove a spare (a bound) and hand back the next one under the
    same name between the writer's open and its rename: the file renamed is then
    not the one the record was written into, and a new file holds the record."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    work, store = work_store(tmp_path / "store")
    try:
        record_id = new_id()
        spare = _spare(work, record_id, b"old spare")
        real = os.pwrite

        def swapped(fd: int, data: bytes, offset: int) -> int:
            written = real(fd, data, offset)
            spare.unlink()  # as a bound removes it, then the host hands back another
            spare.write_bytes(b"the next spare")
            return written

        monkeypatch.setattr(os, "pwrite", swapped)
        record = _creating(workspace, record_id)
        store.write_pending(record)
        pending = (work / f"r-{record_id}.pending").read_bytes()
        assert Record.from_wire(json.loads(pending)) == record
    finally:
        store.close()


def _committed(store: Path) -> set[str]:
    return {p.name[2:-5] for p in store.glob("r-*.json")}


def _done(work: Path) -> set[str]:
    return {p.name[2:-5] for p in work.glob("r-*.done")}


def test_a_calls_records_are_committed_while_the_next_request_runs(
    workspace: Path, tmp_path: Path,
) -> None:
    """A change's record waits, done, until the next request has gone to a worker
    (History.meanwhile), then commits; whatever reads the history commits it first,
    and so does the close."""
    options = HistoryOptions(path=str(tmp_path / "hist"))
    with Sandbox(workspace, history=options, options=SandboxOptions(workers=1)) as sb:
        store, work = Path(sb.history_path), Path(testing.history(sb).work_path or "")
        ok(sb, "write_file", path="a.txt", content="one\n")
        [first] = _done(work)
        assert first not in _committed(store)
        ok(sb, "read_file", path="a.txt")  # changes nothing: the write's record commits
        assert first in _committed(store) and not _done(work)
        ok(sb, "write_file", path="a.txt", content="two\n")
        [second] = _done(work)
        assert [e["action"] for e in sb.history()] == ["modify", "create"]
        assert second in _committed(store) and not _done(work)
        ok(sb, "create_directory", path="d")
        [third] = _done(work)
    assert third in _committed(store) and not _done(work)


_KILLED_WITH_A_RECORD_PENDING = """
import os, sys
from corral import Sandbox
from corral.config import HistoryOptions
sb = Sandbox(sys.argv[1], history=HistoryOptions(path=sys.argv[2]))
assert sb.call("write_file", {"path": "a.txt", "content": "new\\n"})["ok"]
os.kill(os.getpid(), 9)
"""


def test_a_host_killed_before_its_records_commit_leaves_them_to_the_next(
    workspace: Path, tmp_path: Path,
) -> None:
    """A host killed between a change's answer and its commit: the record is left done
    in the work directory, and the next sandbox on the store commits it (its
    writer is dead), so the change is in the history and can be undone."""
    (workspace / "a.txt").write_text("old\n")
    hist = tmp_path / "hist"
    killed = subprocess.run([sys.executable, "-c", _KILLED_WITH_A_RECORD_PENDING,
                             str(workspace), str(hist)], check=False)
    assert killed.returncode == -9
    assert (workspace / "a.txt").read_text() == "new\n"
    with Sandbox(workspace, history=HistoryOptions(path=str(hist))) as sb:
        assert [e["action"] for e in sb.history()] == ["modify"]
        assert sb.undo("a.txt")["ok"]
    assert (workspace / "a.txt").read_text() == "old\n"
