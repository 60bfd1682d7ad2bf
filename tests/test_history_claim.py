"""A worker that replaces a file it wrote itself, unchanged since, names that file's
version in the record (before.version), and the host commits it as the kept copy's
hash without reading the blob. A claim is input: a wrong one is committed, and the
undo that reads the blob refuses it, writing nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from corral import Sandbox, testing
from corral.config import HistoryOptions
from corral.errors import CorralError
from corral.fs import Root, content_version
from corral.history import promote
from corral.history.keeper import Keeper
from corral.history.store import Store, new_id
from tests.helpers.history_helpers import promoted, work_store


class Local(NamedTuple):
    """A workspace written through a Root, recorded in a store outside any sandbox."""

    workspace: Path
    work: Path
    store: Store
    root: Root

    def write(self, rel: str, data: bytes) -> None:
        self.root.write_atomic(rel, data, keep=Keeper(self.store, self.root.path, "write_file"))


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    work, store = work_store(tmp_path / "store")
    try:
        yield Local(workspace, work, store, Root(str(workspace)))
    finally:
        store.close()


def test_a_rewrite_of_its_own_file_is_committed_unread(
    local: Local, monkeypatch: pytest.MonkeyPatch
) -> None:
    local.write("a.txt", b"first\n")
    local.write("a.txt", b"second\n")

    def unread(*args: object) -> None:
        raise AssertionError("the host read a blob whose version was claimed")

    monkeypatch.setattr(promote, "hash_blob", unread)
    promoted(local.store, local.work, local.workspace)
    [second, _] = list(local.store.records())
    before = second.entries[0].before
    assert before is not None and before.version == content_version(b"first\n")
    assert before.hash == before.version
    assert local.store.read_blob(before) == b"first\n"


def test_a_file_changed_since_it_was_written_is_hashed_by_the_host(local: Local) -> None:
    local.write("a.txt", b"first\n")
    # another program, in place (a size that differs: within one tick of an old
    # kernel's coarse clock a same-size rewrite can leave every time as it was)
    with open(local.workspace / "a.txt", "r+b") as other:
        other.write(b"FIRST!\n")
    local.write("a.txt", b"second\n")
    promoted(local.store, local.work, local.workspace)
    [second, _] = list(local.store.records())
    before = second.entries[0].before
    assert before is not None and before.version is None  # no claim
    assert before.hash == content_version(b"FIRST!\n")
    assert local.store.read_blob(before) == b"FIRST!\n"


def _forge(ws: Path, work: str, version: str, blob: bytes) -> str:
    """A done record of a write of hello.txt claiming `version` for its old bytes,
    and its blob holding `blob`: what a lying worker could leave."""
    record_id = new_id()
    now = (ws / "hello.txt").read_bytes()
    entry = {"root": str(ws), "rel": "hello.txt", "path": "hello.txt", "kind": "replace",
             "action": "modify", "made": [],
             "before": {"type": "file", "mode": 0o644, "size": len(blob),
                        "blob": f"b-{record_id}-0", "version": version},
             "after": {"type": "file", "size": len(now), "version": content_version(now)}}
    record = {"v": 1, "id": record_id, "time": int(record_id[:16], 16) / 1e9,
              "tool": "write_file", "pid": int(record_id[16:22], 16), "entries": [entry]}
    Path(work, f"b-{record_id}-0").write_bytes(blob)
    Path(work, f"r-{record_id}.done").write_text(json.dumps(record))
    return record_id


@pytest.fixture
def history_sb(ws: Path, tmp_path: Path) -> Sandbox:
    (ws / "hello.txt").write_text("hello\n")
    return Sandbox(ws, history=HistoryOptions(path=str(tmp_path / "history")))


def test_a_false_claim_is_caught_by_the_undo(history_sb: Sandbox, ws: Path) -> None:
    with history_sb as sb:
        work = testing.history(sb).work_path
        assert work is not None
        _forge(ws, work, content_version(b"GOOD\n"), b"EVIL\n")
        [entry] = sb.history()  # committed: the host did not read the blob
        assert entry["before"]["version"] == content_version(b"GOOD\n")
        undone = sb.undo("hello.txt")
        assert undone["ok"] and undone["result"]["conflicts"] == ["hello.txt"], undone
        assert "damaged or was replaced" in undone["result"]["reasons"]["hello.txt"]
        assert (ws / "hello.txt").read_text() == "hello\n"


@pytest.mark.parametrize("version, blob", [
    ("not-a-version", b"EVIL\n"),
    ("A" * 24, b"EVIL\n"),  # upper case: not what fs.version makes
    (content_version(b"GOOD\n"), None),  # no blob at all
])
def test_a_claim_that_cannot_be_one_is_refused(
    history_sb: Sandbox, ws: Path, version: str, blob: bytes | None
) -> None:
    with history_sb as sb:
        work = testing.history(sb).work_path
        record_id = _forge(ws, work, version, blob or b"EVIL\n")
        if blob is None:
            os.unlink(f"{work}/b-{record_id}-0")
        assert sb.history() == []
        assert f"r-{record_id}.done" in testing.history(sb).refused


def test_a_blob_of_another_size_than_claimed_is_refused(history_sb: Sandbox, ws: Path) -> None:
    with history_sb as sb:
        work = testing.history(sb).work_path
        record_id = _forge(ws, work, content_version(b"GOOD\n"), b"EVIL\n")
        Path(work, f"b-{record_id}-0").write_bytes(b"EVIL, and longer\n")
        assert sb.history() == []
        assert f"r-{record_id}.done" in testing.history(sb).refused


def test_undo_restores_a_claimed_copy(history_sb: Sandbox, ws: Path) -> None:
    """Through a sandbox: the second write claims the first's version; undo restores it."""
    with history_sb as sb:
        for content in ("one\n", "two\n", "three\n"):
            assert sb.call("write_file", {"path": "hello.txt", "content": content})["ok"]
        newest = sb.history("hello.txt")[0]
        assert newest["before"]["version"] == content_version(b"two\n")
        assert sb.undo("hello.txt")["result"]["restored"] == ["hello.txt"]
        assert (ws / "hello.txt").read_text() == "two\n"


def test_a_read_blob_refuses_a_claimed_copy_altered_after_commit(local: Local) -> None:
    local.write("a.txt", b"first\n")
    local.write("a.txt", b"second\n")
    promoted(local.store, local.work, local.workspace)
    before = next(iter(local.store.records())).entries[0].before
    assert before is not None and before.blob is not None and before.hash is not None
    blob = local.work.parent / before.blob  # in the root's kept directory
    blob.write_bytes(b"FIRST\n")  # in place, the same size
    with pytest.raises(CorralError, match="damaged or was replaced"):
        local.store.read_blob(before)
