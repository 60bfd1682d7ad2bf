"""A directory move checks every entry at its new name, then renames: a name added
in between (by another worker) must not be renamed unchecked. Short version of
scripts/race_move.py, plus the same interleaving forced at the fs layer."""

from __future__ import annotations

import threading
from pathlib import Path

from corral.errors import CorralError
from corral.fs import Expect, MoveGuard, Root
from tests.helpers.scripts_loader import load_script

race_move = load_script("race_move")

DENIED = ".aws/credentials"


def test_a_write_during_a_move_never_lands_inside_the_moved_tree(tmp_path: Path) -> None:
    outcomes = race_move.race(tmp_path, files=400, rounds=10)
    assert outcomes["leak"] == 0, outcomes
    assert outcomes["moved"] + outcomes["refused"] == 10


def test_a_writer_waits_for_the_move_that_is_checking_its_tree(tmp_path: Path) -> None:
    """The move's check of its first entry lets a writer (its own Root, as another
    worker has) run for up to 0.5 s; the writer must not finish inside the tree."""
    (tmp_path / "t" / "sub").mkdir(parents=True)
    (tmp_path / "t" / "sub" / "f").write_text("x")
    mover, writer = Root(str(tmp_path)), Root(str(tmp_path))
    wrote = threading.Event()

    def write() -> None:
        writer.write_atomic("t/credentials", b"stolen")
        wrote.set()

    def check(old: str, new: str) -> None:
        if new == DENIED:
            raise CorralError("path_denied", f"{new} is denied")
        if not started.is_set():
            started.set()
            thread.start()
            wrote.wait(0.5)

    started = threading.Event()
    thread = threading.Thread(target=write)
    try:
        mover.rename("t", mover, ".aws", guard=MoveGuard(moved=check))
        thread.join()
        assert wrote.is_set()
        assert not (tmp_path / ".aws" / "credentials").exists()
        assert (tmp_path / "t" / "credentials").read_text() == "stolen"  # in a new t
        assert (tmp_path / ".aws" / "sub" / "f").read_text() == "x"
    finally:
        mover.close()
        writer.close()


def test_version_checked_write_in_the_root_holds_no_lock_against_itself(tmp_path: Path) -> None:
    """A write in the root directory with expected_version takes its version lock
    on the tree lock's own fd (a second flock of the root would wait forever)."""
    with Root(str(tmp_path)) as root:
        first = root.write_atomic("a.txt", b"1")
        second = root.write_atomic("a.txt", b"2", expect=Expect(version=first.version))
        root.write_atomic("a.txt", b"3", expect=Expect(content=b"2"))
        assert second.version != first.version
    assert (tmp_path / "a.txt").read_bytes() == b"3"
