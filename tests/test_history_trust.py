"""The history store is input, not truth: a worker (even a compromised one), a crash
or a hand edit may have written anything there. A worker of a sandbox that writes
nothing cannot reach the store; a worker that may write reaches only its work
directory; the host commits a record only after checking it, and undo checks a
kept file before writing a byte of it."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox, testing
from corral.api import _start_executor
from corral.calls.control import SandboxSetup
from corral.config import HistoryOptions, Limits, SandboxOptions
from corral.fs import Root, Roots, content_version
from corral.history import promote, restore
from corral.history.keeper import Keeper
from corral.history.promote import CLOCK_SLACK_S
from corral.history.store import Store, StoreError, new_id
from corral.policy import Policy
from corral.sandbox import worker
from tests.helpers.calls import ok
from tests.helpers.confined import run_confined
from tests.helpers.history_helpers import promoted, work_store


@dataclasses.dataclass
class Started:
    """A sandbox, and the history store its workers were started with."""

    sb: Sandbox
    history: str | None

    @property
    def home(self) -> Path:
        return Path(self.sb.history_path)

    def setup(self) -> worker.Setup:
        """What a worker of this sandbox serves with (as its zygote builds it)."""
        sb = self.sb
        return worker.Setup.open(SandboxSetup.of(
            sb.roots, sb.limits, sb.policy, SandboxOptions(), self.history), sb.policy)


@pytest.fixture
def start(workspace: Path) -> Iterator[Any]:
    opened: list[Sandbox] = []

    def starting(**kwargs: Any) -> Started:
        given: list[str | None] = []

        def recording(*args: Any, history: str | None = None, **kwargs: Any) -> Any:
            given.append(history)
            return _start_executor(*args, history=history, **kwargs)

        class Recorded(Sandbox):
            _start = staticmethod(recording)

        sb = Recorded(workspace, **kwargs)
        opened.append(sb)
        return Started(sb, given[0])

    yield starting
    for sb in opened:
        sb.close()


def _create(path: str) -> str:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return "created"


def _confined(setup: worker.Setup, fn: Any, *args: Any, drop: tuple[str, ...] = ()) -> Any:
    dirs = setup.confined_dirs()
    return run_confined(fn, *args, roots=dirs, keep_fds=[d.fd for d in dirs], drop=drop)


# -- what a worker reaches ---------------------------------------------------------


def test_a_read_only_sandboxs_worker_cannot_reach_the_store(start: Any) -> None:
    started = start(policy=Policy(read_only=True))
    setup = started.setup()
    try:
        target = str(started.home / f"r-{new_id()}.json")
        # Landlock's own refusal (the mount namespace would hide the store outright)
        refused = _confined(setup, _create, target, drop=("mount_namespace",))
        assert refused.errno == errno.EACCES, refused
        hidden = _confined(setup, _create, target)
        assert hidden.errno in (errno.ENOENT, errno.EACCES), hidden
        assert not os.path.exists(target)
        assert setup.store is None  # no fd of it either
    finally:
        setup.close()


def _attack(home: str, work: str) -> dict[str, Any]:
    """In a confined worker of a writing sandbox: what may it write where?"""
    tried: dict[str, Any] = {}
    for name, how in (
        ("commit", lambda: _create(f"{home}/r-{new_id()}.json")),
        ("meta", lambda: os.rename(_create(f"{work}/x") and f"{work}/x", f"{home}/workspace")),
        ("symlink", lambda: os.symlink("/etc/passwd", f"{work}/b-{new_id()}-0")),
        ("work", lambda: _create(f"{work}/b-{new_id()}-0")),
    ):
        try:
            tried[name] = how()
        except OSError as exc:
            tried[name] = exc.errno
    return tried


def test_a_writing_worker_reaches_only_its_work_directory(start: Any) -> None:
    started = start()
    setup = started.setup()
    try:
        assert setup.store is not None
        work = started.history
        assert work is not None and Path(work).parent == started.home
        # Landlock's own refusals (seccomp denies symlinks too; the namespace hides paths)
        outcome = _confined(setup, _attack, str(started.home), work,
                            drop=("mount_namespace", "seccomp"))
        assert outcome.value == {"commit": errno.EACCES, "meta": errno.EACCES,
                                 "symlink": errno.EACCES, "work": "created"}, outcome
    finally:
        setup.close()


# -- records the host refuses ------------------------------------------------------------


def _forged(workspace: str, record_id: str, old: bytes, now: bytes, **more: Any) -> bytes:
    """A well-formed record of a write of hello.txt whose old content was `old`."""
    entry = {"root": workspace, "rel": "hello.txt", "path": "hello.txt", "kind": "replace",
             "action": "modify", "made": [],
             "before": {"type": "file", "mode": 0o644, "size": len(old),
                        "blob": f"b-{record_id}-0"},
             "after": {"type": "file", "size": len(now), "version": content_version(now)}}
    record = {"v": 1, "id": record_id, "time": int(record_id[:16], 16) / 1e9,
              "tool": "write_file", "pid": int(record_id[16:22], 16), "entries": [entry],
              **more}
    return json.dumps(record).encode()


def _future_id(seconds: float) -> str:
    return f"{time.time_ns() + int(seconds * 1e9):016x}{os.getpid() & 0xFFFFFF:06x}0000"


def _changed(workspace: Path, record_id: str, change: dict[str, Any]) -> dict[str, Any]:
    """A forged record of hello.txt's write (its old content b"EVIL"), with `change`
    made: to its entry ("root", "rel"), to the entry's old state ("hash", "blob"),
    or to the record itself (any other key)."""
    now = (workspace / "hello.txt").read_bytes()
    record: dict[str, Any] = json.loads(_forged(str(workspace), record_id, b"EVIL", now))
    entry = record["entries"][0]
    for key, value in change.items():
        if key in ("root", "rel"):
            entry[key] = value
        elif key in ("hash", "blob"):
            entry["before"][key] = value
        else:
            record[key] = value
    return record


def _plant(work: str, record_id: str, record: bytes) -> str:
    """In a confined worker: a finished record and its blob, as a worker leaves them."""
    with open(f"{work}/b-{record_id}-0", "wb") as blob:
        blob.write(b"EVIL")
    with open(f"{work}/r-{record_id}.done", "wb") as done:
        done.write(record)
    return "planted"


def test_a_future_dated_record_from_a_worker_is_refused(
    start: Any, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started = start()
    sb, setup = started.sb, started.setup()
    now = (workspace / "hello.txt").read_bytes()
    forged = _future_id(3600)
    try:
        planted = _confined(setup, _plant, started.history, forged,
                            _forged(str(workspace), forged, b"EVIL", now))
        assert planted.value == "planted", planted
    finally:
        setup.close()
    with caplog.at_level(logging.WARNING, logger="corral"):
        assert sb.history() == []
    assert "dated in the future" in caplog.text
    assert "future" in testing.history(sb).refused[f"r-{forged}.done"]
    assert sb.undo("hello.txt")["error"]["code"] == "not_found"
    assert (workspace / "hello.txt").read_bytes() == now
    assert not list(Path(started.history).iterdir())  # dropped, its blob too


def test_a_change_that_took_long_to_keep_its_old_file_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A move over a file first copies that file into the store, under a blob named
    after the record's id, which is made before the copy: a copy longer than the
    host's clock slack (a big file, a slow disk) must not make the record look
    forged ("a time that is not its id's"), or the change could not be undone."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_bytes(b"moved\n")
    (workspace / "b.txt").write_bytes(b"replaced\n")
    work, store = work_store(tmp_path / "store")
    copy = Store.stash_copy

    def slow_copy(self: Store, src_fd: int, blob: str) -> int:
        time.sleep(CLOCK_SLACK_S + 0.2)  # as a big file takes to copy
        return copy(self, src_fd, blob)

    monkeypatch.setattr(Store, "stash_copy", slow_copy)
    root = Root(str(workspace))
    root.rename("a.txt", root, "b.txt", overwrite=True, keep=Keeper(store, root.path, "move_file"))
    promoted(store, work, workspace)  # nothing refused
    outcome = restore.undo(Roots(root), store, Policy(), Limits(), "b.txt", force=False)
    assert outcome["conflicts"] == [], outcome
    assert (workspace / "a.txt").read_bytes() == b"moved\n"
    assert (workspace / "b.txt").read_bytes() == b"replaced\n"


@pytest.mark.parametrize("change", [
    {"root": "/etc"}, {"rel": "../outside/secret.txt"}, {"pid": 1}, {"undoes": "0" * 26},
    {"hash": "0" * 24}, {"blob": "b-0000000000000000000000000-0"},
])
def test_a_record_that_does_not_check_out_is_refused(
    start: Any, workspace: Path, change: dict[str, Any]
) -> None:
    started = start()
    sb = started.sb
    record_id = new_id()
    record = _changed(workspace, record_id, change)
    _plant(started.history, record_id, json.dumps(record).encode())
    assert sb.history() == []
    assert f"r-{record_id}.done" in testing.history(sb).refused
    assert sb.undo("hello.txt")["error"]["code"] == "not_found"


@pytest.mark.parametrize("change", [
    {}, {"root": "/etc"}, {"rel": "../outside/secret.txt"}, {"pid": 1}, {"undoes": "0" * 26},
    {"hash": "0" * 24}, {"blob": "b-0000000000000000000000000-0"},
    {"tool": "edit_file"}, {"v": 2},
])
def test_a_record_an_answer_carries_is_checked_as_one_in_the_store(
    start: Any, workspace: Path, change: dict[str, Any]
) -> None:
    """A worker's answer carries its small records (the host need not read them back):
    they are input as the files are, each refused for what a file would be."""
    started = start()
    sb = started.sb
    record_id = new_id()
    record = _changed(workspace, record_id, change)
    Path(started.history, f"b-{record_id}-0").write_bytes(b"EVIL")  # no .done file at all
    testing.history(sb).promote([record_id], "write_file", None, [record])
    if not change:  # well-formed: committed from the answer alone
        [shown] = sb.history()
        assert shown["id"] == record_id and testing.history(sb).refused == {}
        return
    assert sb.history() == []
    assert f"r-{record_id}.done" in testing.history(sb).refused
    assert not Path(started.history, f"b-{record_id}-0").exists()  # dropped with its blob


def test_a_call_s_records_are_committed_from_its_answer(
    start: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host commits a write's record from the worker's answer, without opening
    the `.done` file the worker left (4 system calls a change), and removes that."""
    sb = start().sb

    def unread(dir_fd: int, name: str) -> bytes | None:
        raise AssertionError(f"{name} read back")

    monkeypatch.setattr(promote, "read_small", unread)
    ok(sb, "write_file", path="hello.txt", content="new\n")
    ok(sb, "create_directory", path="made")
    assert [entry["action"] for entry in sb.history()] == ["create", "modify"]
    assert not [p for p in Path(sb.history_path).rglob("*.done")]


def test_only_records_the_host_checked_are_undone(start: Any, workspace: Path) -> None:
    """A blob swapped after its record was committed is refused as the undo reads it."""
    started = start()
    sb = started.sb
    ok(sb, "write_file", path="hello.txt", content="new\n")
    assert len(sb.history()) == 1  # committed, with the kept copy's size and hash
    [blob] = started.home.glob("k-*/b-*")
    blob.unlink()
    blob.write_bytes(b"HELLO\nWORLD\n")  # the same size: the hash tells
    undone = sb.undo("hello.txt")
    assert undone["ok"] and undone["result"]["conflicts"] == ["hello.txt"], undone
    assert "damaged or was replaced" in undone["result"]["reasons"]["hello.txt"]
    assert (workspace / "hello.txt").read_text() == "new\n"


def test_a_truncated_blob_is_refused_and_nothing_is_written(start: Any, workspace: Path) -> None:
    started = start()
    sb = started.sb
    (workspace / "big.txt").write_bytes(b"x" * 100_000)
    ok(sb, "write_file", path="big.txt", content="small\n")
    assert len(sb.history()) == 1
    [blob] = started.home.glob("k-*/b-*")
    os.truncate(blob, 4096)  # a copy cut short
    undone = sb.undo("big.txt")
    assert undone["result"]["conflicts"] == ["big.txt"], undone
    assert (workspace / "big.txt").read_text() == "small\n"


# -- symlinks in the store -------------------------------------------------------------


def test_the_host_follows_no_symlink_in_the_store(
    start: Any, workspace: Path, tmp_path: Path
) -> None:
    started = start()
    home = started.home
    started.sb.close()
    victim = tmp_path / "victim"
    (home / "workspace").unlink()
    (home / "workspace").symlink_to(victim)  # the meta file
    elsewhere = tmp_path / "record.json"
    record_id = new_id()
    now = (workspace / "hello.txt").read_bytes()
    elsewhere.write_bytes(_forged(str(workspace), record_id, b"old", now))
    (home / f"r-{record_id}.json").symlink_to(elsewhere)  # a record name
    sb = start().sb
    assert not victim.exists()
    assert sb.history() == []
    assert sb.undo("hello.txt")["error"]["code"] == "not_found"


# -- malformed records --------------------------------------------------------------


MALFORMED = {
    "not json": b"{\"id\": ",
    "missing keys": b'{"v": 1}',
    "wrong types": json.dumps({"v": 1, "id": 7, "time": "now", "tool": [], "pid": -1,
                               "entries": {}}).encode(),
    "old format": json.dumps({"id": "x", "time": 1.0, "tool": "write_file", "pid": 1,
                              "entries": []}).encode(),
    "huge": b'{"v": 1, "pad": "' + b"x" * (1 << 20) + b'"}',
    "a list": b"[]",
    "deep": b"[" * 100_000,
}


def test_malformed_records_are_skipped_and_history_still_works(
    start: Any, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started = start()
    sb = started.sb
    ok(sb, "write_file", path="hello.txt", content="one\n")
    for data in MALFORMED.values():
        (started.home / f"r-{new_id()}.json").write_bytes(data)
    (started.home / f"c-{new_id()}.json").write_bytes(b'{"v": 1, "id": 3}')
    with caplog.at_level(logging.WARNING, logger="corral"):
        entries = sb.history()
    assert [(e["tool"], e["path"]) for e in entries] == [("write_file", "hello.txt")]
    assert "skipped" in caplog.text
    undone = sb.undo("hello.txt")
    assert undone["ok"] and undone["result"]["restored"] == ["hello.txt"], undone
    assert (workspace / "hello.txt").read_text() == "hello\nworld\n"
    sb.checkpoint("still")
    assert sb.rewind(entries[0]["id"])["ok"]


def test_the_cli_prints_no_traceback_for_a_malformed_record(workspace: Path) -> None:
    with Sandbox(workspace) as sb:
        ok(sb, "write_file", path="hello.txt", content="one\n")
        home = Path(sb.history_path)
    entry = {"path": "hello.txt", "action": "create", "before": None, "after": None}
    (home / f"r-{new_id()}.json").write_text(json.dumps({"id": "x", "entries": [entry]}))
    shown = subprocess.run(["corral", "history", "--workspace", str(workspace)],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr
    assert "skipped" in shown.stderr  # reported, once
    assert "hello.txt" in shown.stdout


# -- races and liveness -------------------------------------------------------------------


def test_losing_a_create_race_leaves_the_winners_file(tmp_path: Path) -> None:
    work = tmp_path / "store" / "w-test"
    work.mkdir(parents=True)
    store = Store.open(str(work))
    try:
        (work / "b-x-0").write_bytes(b"the winner's copy")
        source = os.open(__file__, os.O_RDONLY)
        try:
            with pytest.raises(StoreError):
                store.stash_copy(source, "b-x-0")
        finally:
            os.close(source)
        assert (work / "b-x-0").read_bytes() == b"the winner's copy"
    finally:
        store.close()


def test_settles_on_one_work_directory_take_turns(tmp_path: Path) -> None:
    work = tmp_path / "store" / "w-test"
    work.mkdir(parents=True)
    first, second = Store.open(str(work)), Store.open(str(work))
    order: list[str] = []
    try:
        with first.settling():
            other = threading.Thread(target=lambda: _settle(second, order))
            other.start()
            other.join(0.2)
            assert other.is_alive()  # waiting for the first settle
            order.append("first done")
        other.join(5)
        assert order == ["first done", "second"]
    finally:
        first.close()
        second.close()


def _settle(store: Store, order: list[str]) -> None:
    with store.settling():
        order.append("second")


def _write_and_die(workspace: str, work: str, content: bytes) -> int:
    """A child that writes `content` to hello.txt through history and dies before its
    record is committed (a host killed mid-call); left unreaped: a zombie."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            Store.commit = lambda self, record_id: os._exit(9)  # type: ignore[method-assign]
            keep = Keeper(Store.open(work), workspace, "write_file")
            Root(workspace).write_atomic("hello.txt", content, keep=keep)
        finally:
            os._exit(0)
    while not os.path.exists(f"/proc/{pid}") or _state(pid) != "Z":
        time.sleep(0.01)
    return pid


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_a_zombie_writers_landed_change_is_settled(start: Any, workspace: Path) -> None:
    """kill(pid, 0) calls a zombie alive; its flock on the record is gone."""
    started = start()
    work = started.history
    started.sb.close()
    pid = _write_and_die(str(workspace), work, b"landed\n")
    try:
        assert (workspace / "hello.txt").read_bytes() == b"landed\n"
        sb = start().sb  # the next sandbox on the workspace settles the dead writer
        [entry] = sb.history()
        assert entry["after"]["version"] == content_version(b"landed\n")
        assert sb.undo("hello.txt")["result"]["restored"] == ["hello.txt"]
        assert (workspace / "hello.txt").read_text() == "hello\nworld\n"
    finally:
        os.waitpid(pid, 0)


def test_a_pending_record_under_a_live_pid_but_no_lock_is_settled(
    start: Any, workspace: Path
) -> None:
    """A reused pid: the record's writer is gone though a process has its pid now."""
    started = start()
    work = Path(started.history)
    started.sb.close()
    record_id = new_id()  # this process's pid, alive
    now = (workspace / "hello.txt").read_bytes()
    (work / f"r-{record_id}.pending").write_bytes(
        _forged(str(workspace), record_id, now, b"never landed"))
    sb = start().sb
    assert not (work / f"r-{record_id}.pending").exists()  # it did not land: dropped
    assert sb.history() == []


def _commit_and_die(workspace: str, path: str) -> None:  # pragma: no cover - the child
    """A host committing a done record, killed half-way through writing it."""
    from corral.fs import syscalls
    from corral.history import host

    def half(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        os._exit(9)

    syscalls.write_all = half  # every write of the store's goes through it
    history = host.History(HistoryOptions(path=path), workspace, [workspace],
                           writable=[workspace])
    history.sweep()
    os._exit(0)


def test_a_host_killed_committing_a_record_loses_nothing(start: Any, workspace: Path) -> None:
    started = start()
    options_path, work = str(started.home.parent), started.history
    started.sb.close()
    keep = Keeper(Store.open(work), str(workspace), "write_file")
    Root(str(workspace)).write_atomic("hello.txt", b"landed\n", keep=keep)  # done, not committed
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        _commit_and_die(str(workspace), options_path)
    os.waitpid(pid, 0)
    assert [p.name for p in started.home.iterdir() if p.name.startswith("r-")] == []
    sb = start(history=HistoryOptions(path=options_path)).sb
    [entry] = sb.history()
    assert entry["after"]["version"] == content_version(b"landed\n")
    assert sb.undo("hello.txt")["result"]["restored"] == ["hello.txt"]
    assert (workspace / "hello.txt").read_text() == "hello\nworld\n"


# -- what the clean-up sweep commits ------------------------------------------------------


def test_the_sweep_refuses_a_record_of_a_tool_that_changes_nothing(
    start: Any, workspace: Path
) -> None:
    """A done record no answer named (a settle's, a dead host's, or planted) is
    committed by the sweep; it must still be of a tool that records changes."""
    started = start()
    sb = started.sb
    now = (workspace / "hello.txt").read_bytes()
    record_id = new_id()
    record = json.loads(_forged(str(workspace), record_id, b"EVIL", now))
    record["tool"] = "read_file"
    _plant(started.history, record_id, json.dumps(record).encode())
    assert sb.history() == []
    assert "changes nothing" in testing.history(sb).refused[f"r-{record_id}.done"]


def test_the_sweep_refuses_a_record_older_than_the_history_keeps(
    start: Any, workspace: Path
) -> None:
    started = start(history=HistoryOptions(max_age_days=1))
    sb = started.sb
    now = (workspace / "hello.txt").read_bytes()
    record_id = _future_id(-2 * 86_400)
    _plant(started.history, record_id, _forged(str(workspace), record_id, b"EVIL", now))
    assert sb.history() == []
    assert "older than" in testing.history(sb).refused[f"r-{record_id}.done"]


def test_the_sweep_leaves_a_call_in_flight_its_own_records(
    start: Any, workspace: Path
) -> None:
    """A call's record done before its answer is checked as that call's (its tool, its
    start), not committed meanwhile by a sweep that another thread ran."""
    started = start()
    sb = started.sb
    now = (workspace / "hello.txt").read_bytes()
    call = object()
    testing.history(sb).calling(call)  # a write_file call begins ...
    record_id = new_id()
    record = json.loads(_forged(str(workspace), record_id, b"EVIL", now))
    record["tool"] = "append_file"  # ... and its worker records another tool's change
    _plant(started.history, record_id, json.dumps(record).encode())
    assert sb.history() == []  # the sweep leaves it to the call's answer
    assert (Path(started.history) / f"r-{record_id}.done").exists()
    testing.history(sb).promote([record_id], "write_file", time.time() - 1)
    testing.history(sb).answered(call)
    assert sb.history() == []
    assert "from a 'write_file' call" in testing.history(sb).refused[f"r-{record_id}.done"]


def test_a_commit_that_fails_leaves_the_answer_and_the_record_for_the_sweep(
    start: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host commits a call's record on the call's thread: the change has landed,
    so a commit that fails however (a bug here) must not make the answer an error;
    the record stays done, and the next sweep commits it."""
    sb = start().sb

    def broken(*args: Any, **kwargs: Any) -> dict[str, str]:
        raise RuntimeError("a bug")

    real = promote.promote
    monkeypatch.setattr(promote, "promote", broken)
    ok(sb, "write_file", path="hello.txt", content="new\n")
    assert (workspace / "hello.txt").read_text() == "new\n"
    monkeypatch.setattr(promote, "promote", real)
    [entry] = sb.history()  # history() sweeps first
    assert entry["path"] == "hello.txt" and entry["action"] == "modify"
