"""Workspace checkpoints: a checkpoint snapshots the whole workspace (ignore rules
apply), diff says what changed since and by whom, and rewind brings back what
something other than corral changed (with force; a conflict without). Through a
real Sandbox, confined workers; what a worker or the store hands the host is
forged too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.calls.messages import Answer, HistoryRequest
from corral.config import HistoryOptions
from corral.errors import CorralError
from corral.history.host import History
from corral.history.snapshot_answers import MAX_ANSWER_BYTES
from corral.host.checkpoints import Checkpoints
from tests.helpers.calls import ok
from tests.helpers.history_helpers import snapshot


@pytest.fixture
def tree(workspace: Path) -> Path:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("print('app')\n")
    (workspace / "src" / "util.py").write_text("x = 1\n")
    (workspace / "docs").mkdir()
    (workspace / "docs" / "a.md").write_text("# a\n")
    (workspace / "docs" / "deep").mkdir()
    (workspace / "docs" / "deep" / "b.md").write_text("# b\n")
    script = workspace / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o750)
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "out.o").write_bytes(b"\0" * 100)
    return workspace


def _tracked(tree: Path) -> dict[str, Any]:
    """The tree as a snapshot sees it: without what the ignore rules leave out."""
    return {path: state for path, state in snapshot(tree).items()
            if not path.startswith("build")}


def _behind_corrals_back(tree: Path) -> None:
    """What a shell and an editor do: a plain write, a rename, a new symlink, a
    deleted directory, a chmod, a new file."""
    with open(tree / "src" / "app.py", "w") as file:
        file.write("print('edited in vim')\n")
    os.rename(tree / "src" / "util.py", tree / "src" / "helpers.py")
    os.symlink("src/app.py", tree / "app-link")
    shutil.rmtree(tree / "docs")
    (tree / "run.sh").chmod(0o644)
    (tree / "notes.txt").write_text("scratch\n")
    (tree / "build" / "out.o").write_bytes(b"\1" * 10)  # ignored: left as it is


def test_changes_by_others_are_conflicts_without_force_and_come_back_with_it(tree: Path) -> None:
    with Sandbox(tree) as sb:
        before = _tracked(tree)
        cp = sb.checkpoint("before")
        ok(sb, "write_file", path="made.txt", content="by corral\n")
        _behind_corrals_back(tree)
        changed = _tracked(tree)

        kept = sb.rewind(cp)
        assert kept["ok"], kept
        result = kept["result"]
        assert result["restored"] == ["made.txt"] and result["removed"] == ["made.txt"]
        others = {"src/app.py", "src/util.py", "src/helpers.py", "app-link", "docs",
                  "docs/a.md", "docs/deep", "docs/deep/b.md", "run.sh", "notes.txt"}
        assert set(result["conflicts"]) == others
        assert all(result["reasons"][p] == "changed since by something other than corral"
                   for p in others)
        changed.pop("made.txt")
        assert _tracked(tree) == changed  # nothing of theirs touched

        forced = sb.rewind(cp, force=True)
        assert forced["ok"] and forced["result"]["conflicts"] == [], forced
        assert _tracked(tree) == before
        assert (tree / "build" / "out.o").read_bytes() == b"\1" * 10  # ignored stays
        assert {"path": "build", "reason": "ignored"} in forced["result"]["skipped"]
        assert {"src/helpers.py", "app-link", "notes.txt"} <= set(forced["result"]["removed"])

        # nothing lost: the forced rewind's own checkpoint holds what it overwrote
        back = sb.rewind(forced["result"]["checkpoint"], force=True)
        assert back["ok"] and back["result"]["conflicts"] == [], back
        # ... the symlink it removed too (the host makes it, links.py)
        assert _tracked(tree) == changed
        assert back["result"]["links_not_restored"] == []


def test_diff_says_what_changed_and_by_whom(tree: Path) -> None:
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        assert sb.diff(cp) == {"changed": [], "added": [], "removed": []}
        ok(sb, "write_file", path="src/util.py", content="x = 2\n")
        ok(sb, "write_file", path="new/made.py", content="y\n")
        (tree / "src" / "app.py").write_text("print('other')\n")
        (tree / "docs" / "deep" / "b.md").unlink()
        os.utime(tree / "run.sh")  # touched, not changed
        changes = sb.diff(cp)
    assert sorted(changes["changed"], key=str) == [
        {"path": "src/app.py", "by": "other"}, {"path": "src/util.py", "by": "corral"}]
    assert sorted(changes["added"], key=str) == [
        {"path": "new", "by": "corral"}, {"path": "new/made.py", "by": "corral"}]
    assert changes["removed"] == [{"path": "docs/deep/b.md", "by": "other"}]


def test_a_file_corral_wrote_and_another_changed_after_is_others(tree: Path) -> None:
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        ok(sb, "write_file", path="src/util.py", content="x = 2\n")
        (tree / "src" / "util.py").write_text("x = 3\n")
        assert sb.diff(cp)["changed"] == [{"path": "src/util.py", "by": "other"}]
        rewound = sb.rewind(cp)
        assert rewound["result"]["conflicts"] == ["src/util.py"]
        assert (tree / "src" / "util.py").read_text() == "x = 3\n"
        assert sb.rewind(cp, force=True)["result"]["conflicts"] == []
        assert (tree / "src" / "util.py").read_text() == "x = 1\n"


def test_a_second_checkpoint_reads_only_the_changed_files(tree: Path) -> None:
    for index in range(50):
        (tree / "src" / f"m{index}.py").write_bytes(b"m" * 4096)
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        first = sb.last_snapshot
        assert first is not None and first["read_bytes"] >= 50 * 4096
        (tree / "src" / "m3.py").write_bytes(b"n" * 1000)
        (tree / "src" / "m7.py").write_bytes(b"m" * 4096)  # same bytes, new inode
        (tree / "fresh.txt").write_bytes(b"f" * 300)
        cp = sb.checkpoint("second")
        second = sb.last_snapshot
        assert second is not None and second["checkpoint"] == cp
        assert second["read_bytes"] == 1000 + 4096 + 300
        assert second["stored_bytes"] == 1000 + 300  # m7's bytes are stored already
        assert second["entries"] == first["entries"] + 1
        sb.checkpoint("third")
        assert sb.last_snapshot is not None and sb.last_snapshot["read_bytes"] == 0


def test_a_forged_manifest_is_refused(tree: Path) -> None:
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        (tree / "src" / "app.py").write_text("other\n")
        assert sb.history_path is not None
        manifest = Path(sb.history_path) / f"m-{cp}.json"
        wire = json.loads(manifest.read_text())
        wire["items"][0][0] = "../outside.txt"
        manifest.unlink()
        manifest.write_text(json.dumps(wire))
        refused = sb.rewind(cp, force=True)
        assert not refused["ok"] and refused["error"]["code"] == "io_error"
        assert "damaged or was replaced" in refused["error"]["message"]
        with pytest.raises(CorralError, match="damaged or was replaced"):
            sb.diff(cp)
    assert (tree / "src" / "app.py").read_text() == "other\n"
    assert not (tree.parent / "outside.txt").exists()


def test_a_forged_blob_is_refused_before_anything_is_written(tree: Path) -> None:
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        ok(sb, "write_file", path="src/util.py", content="x = 2\n")
        (tree / "src" / "app.py").write_text("other\n")
        assert sb.history_path is not None
        blobs = sorted(Path(sb.history_path).glob("k-*/objects/o-*"))
        for blob in blobs:  # same size, other bytes
            size = blob.stat().st_size
            blob.unlink()
            blob.write_bytes(b"?" * size)
        refused = sb.rewind(cp, force=True)
        assert not refused["ok"] and "damaged or was replaced" in refused["error"]["message"]
    assert (tree / "src" / "util.py").read_text() == "x = 2\n"  # not even corral's change
    assert (tree / "src" / "app.py").read_text() == "other\n"


def _checkpoints(tree: Path, tmp_path: Path) -> tuple[History, Checkpoints]:
    history = History(HistoryOptions(path=str(tmp_path / "hist")), str(tree), [str(tree)],
                      writable=[str(tree)])
    return history, Checkpoints(history, str(tree), (), budget_s=5.0)


@pytest.mark.parametrize("forge", ["a path out", "a copy not its own", "a size that lies",
                                   "a file beneath a file", "a result it did not write",
                                   "a count that is not one", "a field it does not have",
                                   "a result over the bound", "a million tiny objects"])
def test_a_forged_walk_is_refused(tree: Path, tmp_path: Path, forge: str) -> None:
    """What a worker answers is input: each forgery leaves no checkpoint and no blob
    (an answer is bounded before it is read, and decoded into its typed shape)."""
    history, checkpoints = _checkpoints(tree, tmp_path)
    assert history.work_path is not None
    work = Path(history.work_path)

    def answer(request: HistoryRequest) -> Answer:
        plan = json.loads(next(Path(history.path).glob("k-*/p-*.json")).read_text())
        token = plan["token"]
        name = f"o-{token}-0"
        (work / name).write_bytes(b"12345")
        item: list[Any] = ["a.txt", "file", 0o644, 5, None, None, 1, 2, 5, 3, 4]
        if forge == "a path out":
            item[0] = "../a.txt"
        if forge == "a copy not its own":
            name = "o-0000-0"
        if forge == "a size that lies":
            item[3] = 4
        items = [[item, name]]
        if forge == "a file beneath a file":
            items.append([["a.txt/b", "dir", 0o755, 0, None, None, 1, 3, 0, 3, 4], None])
        answer = f"o-{token}.answer"
        told: dict[str, Any] = {"items": items, "removed": [], "skipped": [], "pending": [],
                                "read_bytes": 5, "walked": 1}
        if forge == "a count that is not one":
            told["read_bytes"] = {"deep": [[[[1]]]]}
        if forge == "a field it does not have":
            told["more"] = ["x"] * 1000
        if forge == "a million tiny objects":  # untyped, ~20 bytes of Python a byte
            told["skipped"] = [{}] * 1_000_000
        # valid JSON (blanks first), just over the bound
        pad = " " * (MAX_ANSWER_BYTES + 1) if forge == "a result over the bound" else ""
        (work / answer).write_text(pad + json.dumps(told))
        if forge == "a result it did not write":
            answer = "o-0000.answer"
        return Answer(True, "history", {"answer": answer})

    try:
        with pytest.raises(CorralError) as caught:
            checkpoints.checkpoint(answer, "forged")
        assert caught.value.code == "io_error"
        assert "refused" in caught.value.message or "not the size" in caught.value.message
        assert history.entries(None, 10) == []
        assert list(Path(history.path).glob("k-*/objects/o-*")) == []
        assert list(Path(history.path).glob("m-*")) == []
        assert [p.name for p in work.glob("o-*") if p.name != "o-0000-0"] == []
    finally:
        checkpoints.close()
        history.close()


def test_a_snapshot_over_max_bytes_is_refused_clearly(tree: Path, tmp_path: Path) -> None:
    (tree / "big.bin").write_bytes(os.urandom(300_000))
    options = HistoryOptions(path=str(tmp_path / "hist"), max_bytes=100_000)
    with Sandbox(tree, history=options) as sb:
        with pytest.raises(CorralError) as caught:
            sb.checkpoint("too big")
        assert caught.value.code == "too_large"
        assert "max_bytes" in caught.value.message and "nothing was stored" in caught.value.message
        assert sb.history() == []
        assert sb.history_path is not None
        assert list(Path(sb.history_path).glob("k-*/objects/o-*")) == []
        assert list(Path(sb.history_path).glob("w-*/o-*")) == []
    roomy = HistoryOptions(path=str(tmp_path / "hist"), max_bytes=100_000,
                           snapshot_ignore=("*.bin",))
    with Sandbox(tree, history=roomy) as sb:
        cp = sb.checkpoint("fits")
        (tree / "big.bin").write_bytes(b"gone")
        (tree / "src" / "app.py").write_text("other\n")
        forced = sb.rewind(cp, force=True)
        assert forced["result"]["restored"] == ["src/app.py"], forced
        assert (tree / "big.bin").read_bytes() == b"gone"  # not snapshotted: left alone
        assert {"path": "big.bin", "reason": "ignored"} in forced["result"]["skipped"]


def test_a_symlink_deleted_behind_corrals_back_comes_back_with_force(tree: Path) -> None:
    os.symlink("src/app.py", tree / "link")
    os.symlink("../outside", tree / "src" / "out")
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        (tree / "link").unlink()
        (tree / "src" / "out").unlink()
        (tree / "src" / "out").write_text("taken\n")  # its name taken since: a conflict
        kept = sb.rewind(cp)
        assert not (tree / "link").is_symlink()  # without force: left as it is
        forced = sb.rewind(cp, force=True)
        assert forced["ok"], forced
        assert os.readlink(tree / "link") == "src/app.py"  # the manifest's target, as text
        assert "link" in forced["result"]["restored"]
        assert forced["result"]["links_not_restored"] == []
        assert {"path": "link", "reason": "link"} not in forced["result"]["skipped"]
        assert sb.call("read_file", {"path": "link"})["ok"]  # resolved beneath, as any link
        undone = sb.undo("link")  # recorded as the rewind's change
        assert undone["ok"] and not (tree / "link").is_symlink()
    assert kept["ok"]


def test_without_snapshots_a_checkpoint_is_corrals_changes_only(tree: Path) -> None:
    with Sandbox(tree, history=HistoryOptions(snapshots=False)) as sb:
        cp = sb.checkpoint()
        (tree / "notes.txt").write_text("other\n")
        forced = sb.rewind(cp, force=True)
        assert forced["result"]["restored"] == [] and forced["result"]["conflicts"] == []
        assert "skipped" not in forced["result"]
        assert (tree / "notes.txt").exists()
        with pytest.raises(CorralError) as caught:
            sb.diff(cp)
        assert caught.value.code == "tool_disabled"


def test_corral_diff_on_the_command_line(tree: Path) -> None:
    def corral(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "corral", *args,
             "--workspace", str(tree)],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})

    cp = corral("checkpoint", "before").stdout.strip()
    (tree / "src" / "app.py").write_text("other\n")
    (tree / "notes.txt").write_text("new\n")
    shown = corral("diff", cp)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["A notes.txt  (other)", "M src/app.py  (other)"]
    as_json = json.loads(corral("diff", cp, "--json").stdout)
    assert as_json["added"] == [{"path": "notes.txt", "by": "other"}]
    unknown = corral("diff", "0" * 26)
    assert unknown.returncode == 2 and "no snapshot" in unknown.stderr


def test_a_walk_out_of_time_leaves_the_rest_to_the_next_request(tree: Path) -> None:
    """Each request must end within the call timeout: a walk past its budget lists
    the changed files it did not copy, and the host asks for them until none is
    left (here the budget is nil: one file a request)."""
    for index in range(12):
        (tree / "src" / f"m{index}.py").write_bytes(bytes([index]) * 5000)
    with Sandbox(tree) as sb:
        assert sb._checkpoints is not None  # (no public knob: the budget is timeout_s / 3)
        sb._checkpoints.budget_s = 0.0
        cp = sb.checkpoint()
        snap = sb.last_snapshot
        assert snap is not None and snap["read_bytes"] >= 12 * 5000
        for index in range(12):
            (tree / "src" / f"m{index}.py").write_bytes(b"other")
        forced = sb.rewind(cp, force=True)
        assert forced["ok"] and forced["result"]["conflicts"] == [], forced
    for index in range(12):
        assert (tree / "src" / f"m{index}.py").read_bytes() == bytes([index]) * 5000


SECRET_TEXT = "TOKEN=s3cr3t-never-stored\n"


def test_a_file_the_policy_denies_reading_is_never_stored_nor_rewound(tree: Path) -> None:
    (tree / ".env").write_text(SECRET_TEXT)
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        store = Path(sb.history_path)
        assert not any(SECRET_TEXT.encode() in blob.read_bytes()
                       for blob in store.glob("k-*/objects/o-*"))
        (tree / ".env").write_text("TOKEN=changed\n")
        assert sb.diff(cp) == {"changed": [], "added": [], "removed": []}
        forced = sb.rewind(cp, force=True)
    assert forced["ok"], forced
    assert (tree / ".env").read_text() == "TOKEN=changed\n"  # not the snapshot's to touch
    assert {"path": ".env", "reason": "denied"} in forced["result"]["skipped"]


def test_a_forced_rewind_leaves_a_new_directory_holding_what_it_may_not_touch(
        tree: Path) -> None:
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        (tree / "app").mkdir()
        (tree / "app" / ".env").write_text(SECRET_TEXT)
        (tree / "app" / "main.py").write_text("print(1)\n")
        (tree / "vendor" / "lib" / ".git").mkdir(parents=True)  # a clone since
        (tree / "vendor" / "lib" / ".git" / "HEAD").write_text("ref: main\n")
        forced = sb.rewind(cp, force=True)
    assert forced["ok"], forced
    assert (tree / "app" / ".env").read_text() == SECRET_TEXT
    assert (tree / "vendor" / "lib" / ".git" / "HEAD").exists()
    assert {"app", "vendor/lib"} <= set(forced["result"]["conflicts"])
    assert "app/main.py" in forced["result"]["removed"]  # what it covers goes


@pytest.mark.parametrize("shared", [False, True])
def test_a_copy_the_worker_changes_after_the_host_hashed_it_is_not_what_is_stored(
        tree: Path, tmp_path: Path, shared: bool) -> None:
    """The worker may still hold its staged copy open: the host stores a copy of its
    own, and a blob of that hash there already (`shared`) is kept, never replaced."""
    history, checkpoints = _checkpoints(tree, tmp_path)
    assert history.work_path is not None
    work = Path(history.work_path)
    held: list[int] = []

    def answer(request: HistoryRequest) -> Answer:
        token = json.loads(next(Path(history.path).glob("k-*/p-*.json")).read_text())["token"]
        name = f"o-{token}-0"
        (work / name).write_bytes(b"12345")
        held.append(os.open(work / name, os.O_WRONLY))  # kept, as a compromised worker may
        item = ["a.txt", "file", 0o644, 5, None, None, 1, len(held), 5, 3, 4]
        (work / f"o-{token}.answer").write_text(json.dumps({
            "items": [[item, name]], "removed": [], "skipped": [], "pending": [],
            "read_bytes": 5, "walked": 1}))
        return Answer(True, "history", {"answer": f"o-{token}.answer"})

    try:
        if shared:
            checkpoints.checkpoint(answer, "first")
        checkpoints.checkpoint(answer, "second")
        for fd in held:  # the worker writes through its copy, after the host took it
            os.pwrite(fd, b"XXXXX", 0)
        blob, = Path(history.path).glob("k-*/objects/o-*")
        assert blob.read_bytes() == b"12345"
    finally:
        for fd in held:
            os.close(fd)
        checkpoints.close()
        history.close()


def test_forced_rewinds_over_rewinds_that_removed_the_same_directory(tree: Path) -> None:
    """Each forced rewind removed a directory made behind corral's back; the third
    one's record pass puts the second's removal back, then finds that directory in
    the way of taking back the first's. The snapshot pass, which walks the tree
    after it, removes it: not a conflict (it was, in the crash test's rounds)."""
    before = _tracked(tree)
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        for round_ in range(3):
            if round_ < 2:
                (tree / "fresh").mkdir()
                (tree / "fresh" / "n.txt").write_text(f"round {round_}\n")
            forced = sb.rewind(cp, force=True)
            assert forced["ok"] and forced["result"]["conflicts"] == [], forced["result"]
            assert _tracked(tree) == before


def test_a_checkpoint_the_bounds_evicted_is_not_rewound_to_nor_diffed(
        tree: Path, tmp_path: Path) -> None:
    store = tmp_path / "hist"
    with Sandbox(tree, history=HistoryOptions(path=str(store))) as sb:
        old = sb.checkpoint("old")
        for n in range(2):
            ok(sb, "write_file", path="big.txt", content=f"{n}" * 200_000)
        live = sb.checkpoint("newest")
    (tree / "src" / "app.py").write_text("other\n")
    changed = _tracked(tree)
    # reopened within bounds that evict the oldest records and checkpoints
    with Sandbox(tree, history=HistoryOptions(path=str(store), max_bytes=150_000)) as sb:
        assert [e["id"] for e in sb.history() if e["action"] == "checkpoint"] == [live]
        assert sb.history_path is not None  # its manifest stays until a checkpoint collects it
        assert (Path(sb.history_path) / f"m-{old}.json").exists()
        rewound = sb.rewind(old, force=True)
        assert not rewound["ok"] and rewound["error"]["code"] == "not_found", rewound
        assert "evicted" in rewound["error"]["message"]
        with pytest.raises(CorralError, match="evicted"):
            sb.diff(old)
        assert _tracked(tree) == changed  # nothing written, no checkpoint made
        assert [e["id"] for e in sb.history() if e["action"] == "checkpoint"] == [live]
        assert sb.diff(live)["changed"] == [{"path": "src/app.py", "by": "other"}]


def test_a_rewinds_own_snapshot_does_not_evict_the_one_it_rewinds_to(
        tree: Path, tmp_path: Path) -> None:
    """The snapshot a rewind makes first may drop older snapshots for room, never its
    target's: without room it is refused, nothing written."""
    (tree / "data.bin").write_bytes(os.urandom(60_000))
    options = HistoryOptions(path=str(tmp_path / "hist"), max_bytes=100_000)
    with Sandbox(tree, history=options) as sb:
        cp = sb.checkpoint()
        (tree / "data.bin").write_bytes(os.urandom(60_000))
        changed = _tracked(tree)
        refused = sb.rewind(cp, force=True)
        assert not refused["ok"] and refused["error"]["code"] == "too_large", refused
        assert _tracked(tree) == changed
        assert sb.diff(cp)["changed"] == [{"path": "data.bin", "by": "other"}]
