"""Snapshot manifests as deltas: a checkpoint after a change stores the changed
items and removed paths against its base; reading composes the chain (bounded),
each file checked as input; eviction keeps every manifest a kept snapshot's chain
needs, and counts them in max_bytes. Through a real Sandbox, confined workers."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.errors import CorralError
from corral.history.snapshots import MAX_DELTAS, Snapshots
from corral.host import checkpoints as checkpoints_module
from tests.helpers.calls import ok
from tests.helpers.history_helpers import snapshot


@pytest.fixture
def tree(workspace: Path) -> Path:
    for d in range(3):
        (workspace / f"d{d}").mkdir()
        for f in range(10):
            (workspace / f"d{d}" / f"f{f}.txt").write_text(f"{d}/{f}\n")
    return workspace


def _manifest(sb: Sandbox, checkpoint_id: str, prefix: str = "m-") -> Path:
    assert sb.history_path is not None
    return Path(sb.history_path) / f"{prefix}{checkpoint_id}.json"


def _wire(sb: Sandbox, checkpoint_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_manifest(sb, checkpoint_id).read_text())
    return data


def _forge(path: Path, wire: dict[str, Any]) -> None:
    path.unlink()  # the kept link stays the host's file: the host's copy is forged
    path.write_text(json.dumps(wire))


def _snaps(sb: Sandbox) -> Snapshots:
    checkpoints = sb._checkpoints  # the store's part, to evict by hand
    assert checkpoints is not None
    return checkpoints.snaps


def test_a_checkpoint_after_a_change_is_a_delta_and_rewinds_through_it(tree: Path) -> None:
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        assert "base" not in _wire(sb, first)  # the first is whole
        (tree / "d0" / "f1.txt").write_text("changed\n")
        (tree / "d1" / "f2.txt").unlink()
        (tree / "new").mkdir()
        (tree / "new" / "n.txt").write_text("new\n")
        at_second = snapshot(tree)
        second = sb.checkpoint("second")
        wire = _wire(sb, second)
        assert wire["base"] == first
        assert sorted(item[0] for item in wire["items"]) == ["d0/f1.txt", "new", "new/n.txt"]
        assert wire["removed"] == ["d1/f2.txt"]
        shutil.rmtree(tree / "d2")  # behind corral's back
        (tree / "d0" / "f1.txt").write_text("again\n")
        forced = sb.rewind(second, force=True)
        assert forced["ok"] and forced["result"]["conflicts"] == [], forced
        assert snapshot(tree) == at_second
    with Sandbox(tree) as sb:  # a new host composes the chain from the files
        (tree / "d0" / "f0.txt").write_text("other\n")
        assert sb.diff(second)["changed"] == [{"path": "d0/f0.txt", "by": "other"}]
        forced = sb.rewind(first, force=True)
        assert forced["ok"] and forced["result"]["conflicts"] == [], forced
        assert (tree / "d1" / "f2.txt").read_text() == "1/2\n"
        assert not (tree / "new").exists()


def test_a_chain_is_bounded_then_written_whole_again(tree: Path) -> None:
    with Sandbox(tree) as sb:
        ids = [sb.checkpoint("0")]
        for n in range(MAX_DELTAS + 2):
            (tree / "d0" / "f0.txt").write_text(f"round {n}\n")
            ids.append(sb.checkpoint(str(n)))
        bases = [_wire(sb, i).get("base") for i in ids]
        whole = [i for i, base in zip(ids, bases, strict=True) if base is None]
        assert whole == [ids[0], ids[MAX_DELTAS + 1]]
        assert bases[1:MAX_DELTAS + 1] == ids[:MAX_DELTAS]
        forced = sb.rewind(ids[MAX_DELTAS], force=True)
        assert forced["ok"] and (tree / "d0" / "f0.txt").read_text() == f"round {MAX_DELTAS - 1}\n"


def test_eviction_keeps_the_manifests_a_kept_chain_needs(tree: Path) -> None:
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        (tree / "d0" / "f0.txt").write_text("second\n")
        second = sb.checkpoint("second")
        (tree / "d0" / "f0.txt").write_text("third\n")
        third = sb.checkpoint("third")
        snaps = _snaps(sb)
        with sb._checkpoints._kept():  # type: ignore[union-attr]
            store = _manifest(sb, first).parent
            assert snaps.held() == sum(  # blobs and manifests, each once
                p.stat().st_size for p in [*store.glob("k-*/[mn]-*"),
                                           *store.glob("k-*/objects/o-*")])
            assert snaps.drop_oldest()
            assert snaps.drop_oldest()
        # the dropped ones are no snapshots now, but their files stay as bases
        assert not _manifest(sb, first).exists() and _manifest(sb, first, "n-").exists()
        assert _manifest(sb, second, "n-").exists()
        assert not snaps.has(first) and not snaps.evicted(first)  # its checkpoint: corral's only
        (tree / "d0" / "f0.txt").write_text("other\n")
        forced = sb.rewind(third, force=True)  # composed through both
        assert forced["ok"] and (tree / "d0" / "f0.txt").read_text() == "third\n"
        with sb._checkpoints._kept():  # type: ignore[union-attr]
            snaps.collect(set())
            assert _manifest(sb, first, "n-").exists()  # still third's base
            while snaps.drop_oldest():
                pass
            snaps.collect(set())
        assert list(_manifest(sb, first).parent.glob("n-*")) == []
        assert list(_manifest(sb, first).parent.glob("k-*/[omn]-*")) == []


@pytest.mark.parametrize("forge", ["a path twice", "a removed path not in its base",
                                   "a path removed and changed", "a base that does not exist",
                                   "a cycle", "a removed path that is not plain"])
def test_a_forged_delta_is_refused(tree: Path, forge: str) -> None:
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        (tree / "d0" / "f0.txt").write_text("second\n")
        (tree / "d1" / "f1.txt").unlink()
        second = sb.checkpoint("second")
        wire = _wire(sb, second)
        assert wire["base"] == first
        if forge == "a path twice":
            wire["items"].append(wire["items"][0])
        elif forge == "a removed path not in its base":
            wire["removed"].append("d9/nope.txt")
        elif forge == "a path removed and changed":
            wire["removed"].append(wire["items"][0][0])
        elif forge == "a base that does not exist":
            wire["base"] = "0" * len(first)
        elif forge == "a removed path that is not plain":
            wire["removed"].append("../d0")
        if forge == "a cycle":  # the first, whole, made a delta of the second
            base = _wire(sb, first)
            _forge(_manifest(sb, first), {**base, "base": second, "removed": []})
        else:
            _forge(_manifest(sb, second), wire)
        (tree / "d0" / "f0.txt").write_text("other\n")
    with Sandbox(tree) as sb:
        refused = sb.rewind(second, force=True)
        assert not refused["ok"] and refused["error"]["code"] == "io_error", refused
        assert "damaged or was replaced" in refused["error"]["message"]
        with pytest.raises(CorralError, match="damaged or was replaced"):
            sb.diff(second)
    assert (tree / "d0" / "f0.txt").read_text() == "other\n"
    assert not (tree / "d1" / "f1.txt").exists()


def test_a_snapshot_of_a_forged_base_is_refused_when_a_worker_reads_it(tree: Path) -> None:
    """The worker reads a chain through its kept links (a restore after a record
    pass that wrote something walks against it), which must be the files the host
    checked: a replaced base is refused."""
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        (tree / "d0" / "f0.txt").write_text("second\n")
        second = sb.checkpoint("second")
        kept = next(_manifest(sb, first).parent.glob(f"k-*/m-{first}.json"))
        data = kept.read_text()
        kept.unlink()
        kept.write_text(data)  # the same bytes, another file than the host checked
        os.utime(kept, ns=(1, 1))
        ok(sb, "write_file", path="d1/f1.txt", content="by corral\n")
        (tree / "d0" / "f0.txt").write_text("other\n")
        refused = sb.rewind(second, force=True)
        assert not refused["ok"] and "not the file the host checked" in str(refused), refused
        assert (tree / "d0" / "f0.txt").read_text() == "other\n"


@pytest.mark.parametrize("listed", [True, False])
def test_a_restore_after_a_record_pass_that_wrote_nothing_needs_no_walk(
        tree: Path, monkeypatch: pytest.MonkeyPatch, listed: bool) -> None:
    """The tree is then as the snapshot taken first saw it: the restore takes its
    paths from the two snapshots' differences, and decides each as after a walk
    (`listed` False: made to walk, for the same answer)."""
    used: list[bool] = []
    real = checkpoints_module._listed

    def spy(*args: Any) -> dict[str, Any]:
        plan = real(*args) if listed else {}
        used.append("paths" in plan)
        return plan

    monkeypatch.setattr(checkpoints_module, "_listed", spy)
    (tree / ".gitignore").write_text("build/\n")
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        before = snapshot(tree)
        (tree / "d0" / "f1.txt").write_text("changed\n")
        os.rename(tree / "d0" / "f2.txt", tree / "d0" / "moved.txt")
        (tree / "d0" / "f3.txt").chmod(0o600)
        os.symlink("d0/f1.txt", tree / "link")
        shutil.rmtree(tree / "d1")
        (tree / "nd" / "build").mkdir(parents=True)  # holds what the ignore rules leave out
        (tree / "nd" / "k.txt").write_text("k\n")
        (tree / "nd" / "build" / "out.o").write_text("o\n")
        forced = sb.rewind(cp, force=True)
    assert used == [listed]
    assert forced["ok"] and forced["result"]["conflicts"] == ["nd"], forced
    assert "leaves out" in forced["result"]["reasons"]["nd"]
    now = snapshot(tree)
    assert {p for p in now if p not in before} == {"nd", "nd/build", "nd/build/out.o"}
    assert {p: now[p] for p in before} == before


def test_a_walk_that_could_not_read_its_base_makes_a_whole_snapshot(tree: Path) -> None:
    """A worker that cannot read the base (its kept link gone) walks as against
    none and says so: the host then makes the snapshot whole, of that walk alone,
    not the base with the change (which would keep a path gone since, for a
    rewind to bring back); a diff against it is refused, not answered as if every
    file were new."""
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        (tree / "d1" / "f2.txt").unlink()
        next(_manifest(sb, first).parent.glob(f"k-*/m-{first}.json")).unlink()
        with pytest.raises(CorralError) as refused:
            sb.diff(first)
        assert refused.value.code == "io_error" and "cannot be read" in refused.value.message
        second = sb.checkpoint("second")
        assert "base" not in _wire(sb, second)
        assert "d1/f2.txt" not in {item[0] for item in _wire(sb, second)["items"]}
        (tree / "d1" / "f2.txt").write_text("made again\n")
        forced = sb.rewind(second, force=True)
        assert forced["ok"] and "d1/f2.txt" in forced["result"]["removed"], forced
        assert not (tree / "d1" / "f2.txt").exists()


def test_a_store_with_blobs_beside_the_records_is_moved_into_objects(tree: Path) -> None:
    """A store an earlier corral made kept each snapshot blob in the root's kept
    directory itself: the first sandbox to open it moves them into objects/."""
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        store = Path(sb.history_path or "")
    (tree / "d0" / "f0.txt").write_text("changed behind corral's back\n")
    kept, = store.glob("k-*")
    for blob in (kept / "objects").iterdir():
        blob.rename(kept / blob.name)
    (kept / "objects").rmdir()
    with Sandbox(tree) as sb:
        assert sb.rewind(first, force=True)["ok"]
        assert (tree / "d0" / "f0.txt").read_text() == "0/0\n"
    assert not list(kept.glob("o-*")) and list((kept / "objects").glob("o-*"))
