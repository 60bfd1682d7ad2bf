"""A rewind that took back every change since a checkpoint ends with a closing
record naming it, and a later rewind to that checkpoint (or an older one) skips
what lies between: the changes and their taking back are, net, nothing. Without
it each rewind to an old checkpoint took back, one by one, every record of the
rewinds before it, and wrote as many: twice the records each time (eight "try
again from the start" loops of ten writes: 7,650 records, 3.2 s a rewind)."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from corral import Sandbox, testing
from corral.config import HistoryOptions
from corral.history.store import new_id
from corral.policy import RootSpec
from tests.helpers.calls import ok


def _records(history: Path) -> int:
    return len(list(history.glob("r-*.json")))


def test_rewinds_to_the_start_take_back_only_what_came_after(
        workspace: Path, tmp_path: Path) -> None:
    history = tmp_path / "history"
    start = {f"f{i}.txt": f"{i}\n" for i in range(5)}
    for name, text in start.items():
        (workspace / name).write_text(text)
    with Sandbox(workspace, history=HistoryOptions(path=str(history))) as sb:
        first = sb.checkpoint("start")
        store = Path(sb.history_path or "")
        counts = []
        for round_ in range(6):
            for name in start:
                ok(sb, "write_file", path=name, content=f"try {round_}\n")
            back = sb.rewind(first)
            assert back["ok"] and not back["result"]["conflicts"], back
            assert {n: (workspace / n).read_text() for n in start} == start
            counts.append(_records(store))
        growth = [b - a for a, b in itertools.pairwise(counts)]
        assert len(set(growth)) == 1, counts  # the same each round: no doubling
        # an undo after it still takes back the last rewind's change of a path
        assert sb.undo("f0.txt")["ok"]
        assert (workspace / "f0.txt").read_text() == "try 5\n"


def test_a_root_the_closing_rewind_did_not_see_is_still_taken_back(
        workspace: Path, tmp_path: Path) -> None:
    """A sandbox of the workspace alone rewinds: its closing record is in the
    workspace's kept directory only. A sandbox that also has `other` rewinds to
    the same checkpoint: the change of `other` since is taken back all the same."""
    other = tmp_path / "other"
    other.mkdir()
    (workspace / "x.txt").write_text("x then\n")
    (other / "y.txt").write_text("y then\n")
    with Sandbox(workspace, allowed_paths=[RootSpec(str(other), "rw")]) as both:
        first = both.checkpoint("start")
        ok(both, "write_file", path="x.txt", content="x now\n")
        ok(both, "write_file", path=str(other / "y.txt"), content="y now\n")
        with Sandbox(workspace) as alone:
            assert alone.rewind(first, force=True)["ok"]
        assert (workspace / "x.txt").read_text() == "x then\n"
        assert (other / "y.txt").read_text() == "y now\n"  # not its root
        back = both.rewind(first, force=True)
        assert back["ok"], back
        assert (other / "y.txt").read_text() == "y then\n"
        assert (workspace / "x.txt").read_text() == "x then\n"


def test_a_closing_record_that_names_no_checkpoint_is_refused(workspace: Path) -> None:
    with Sandbox(workspace) as sb:
        checkpoint = sb.checkpoint("start")
        history = testing.history(sb)
        for undoes, refused in ((new_id(), True), (checkpoint, False)):
            record_id = new_id()
            wire = {"v": 1, "id": record_id, "time": time.time(), "tool": "rewind",
                    "pid": os.getpid(), "entries": [], "undoes": undoes, "done": True}
            history.promote([record_id], "rewind", None, [wire])
            sb.history()  # commits what is pending
            name = f"r-{record_id}.done"
            assert (name in history.refused) is refused, history.refused
            if refused:
                assert "names no checkpoint" in history.refused[name]


def test_a_path_changed_after_the_closing_rewind_is_still_a_conflict_or_forced_back(
        workspace: Path, tmp_path: Path) -> None:
    """What an editor changed after a closing rewind is not passed over: without
    force it is a conflict, as it was before closing records; with force it comes
    back. No snapshots: the record pass alone decides."""
    history = HistoryOptions(path=str(tmp_path / "history"), snapshots=False)
    (workspace / "a.txt").write_text("start\n")
    with Sandbox(workspace, history=history) as sb:
        first = sb.checkpoint("start")
        ok(sb, "write_file", path="a.txt", content="corral\n")
        assert sb.rewind(first)["ok"]
        (workspace / "a.txt").write_text("an editor's\n")  # only the span names it
        kept = sb.rewind(first)
        assert kept["ok"] and kept["result"]["conflicts"] == ["a.txt"], kept
        assert (workspace / "a.txt").read_text() == "an editor's\n"
        forced = sb.rewind(first, force=True)
        assert forced["ok"] and not forced["result"]["conflicts"], forced
        assert (workspace / "a.txt").read_text() == "start\n"
