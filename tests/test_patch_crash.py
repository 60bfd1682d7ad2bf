"""A patch killed at every step (kill -9 of the process applying it): once a new
sandbox has opened the workspace (which settles what the dead writer left), the
tree is exactly as before the patch or exactly as after it, never a mix, no temp
is left, and a whole patch is undone whole. The steps are counted in a forked
child that runs the tool in-process and dies before step k (the hook lives in
the test: nothing a model can reach may kill a worker); scripts/crash_patch.py
kills real workers at random instants instead."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from corral import Sandbox
from corral.calls.messages import CallRequest
from corral.config import Limits
from corral.fs import Root, Roots
from corral.fs import batch as fs_batch
from corral.history import restore
from corral.history.keeper import Keeper
from corral.history.store import Store, StoreError
from corral.tools.base import Context
from corral.tools.registry import execute
from tests.helpers.history_helpers import settled, work_store
from tests.helpers.patch_helpers import (
    AFTER,
    BEFORE,
    DELETES,
    PATCH,
    apply_in_child,
    build,
    files_of,
    temps_of,
)
from tests.helpers.scripts_loader import load_script

crash_patch = load_script("crash_patch")

# What applying PATCH does, in order: 3 new files written beside their targets, the
# record, 5 renames (add, update, removal, and a move's two ends), 3 old files into
# the store, the commit.
STEPS = 3 + 1 + 5 + 3 + 1


# Each a step: the process dies (as kill -9 would) just before the one it is given.
HOOKS = ((fs_batch, "write_temp"), (fs_batch, "renameat2"), (Store, "write_pending"),
         (Store, "commit"), (Keeper, "_take"))


def _apply_in_child(workspace: str, step: int) -> int:
    return apply_in_child(workspace, step, PATCH, DELETES, HOOKS)


@pytest.mark.parametrize("step", range(1, STEPS + 2))
def test_a_kill_at_every_step_leaves_all_or_nothing(ws: Path, step: int) -> None:
    build(ws)
    workspace = os.path.realpath(ws)
    assert _apply_in_child(workspace, step) == (9 if step <= STEPS else 0)
    with Sandbox(ws, policy=DELETES) as sb:  # opening it settles the dead writer's patch
        tree = files_of(ws)
        assert tree in (BEFORE, AFTER), (step, tree)
        entries = sb.history()
        if tree == AFTER:
            assert [entry["action"] for entry in entries] == ["patch"]
            undone = sb.undo("src/app.py")
            assert undone["ok"] and undone["result"]["conflicts"] == [], undone
        else:
            assert entries == []
    assert files_of(ws) == BEFORE
    assert temps_of(ws) == []  # the dead writer's, swept once settled (close waits for it)



def test_a_patch_that_cannot_be_finished_is_undone(ws: Path) -> None:
    """Killed after two of its renames; then someone else changes a file the patch had
    yet to delete: it cannot be finished, so what landed is put back from the old
    files it set aside, and the other's change stays."""
    build(ws)
    assert _apply_in_child(os.path.realpath(ws), 7) == 9  # src/util.py, src/app.py landed
    assert (ws / "src/util.py").exists()
    (ws / "old.txt").write_bytes(b"changed by someone else\n")
    with Sandbox(ws, policy=DELETES) as sb:
        assert sb.history() == []
    assert files_of(ws) == {**BEFORE, "old.txt": b"changed by someone else\n"}
    assert temps_of(ws) == []


def test_kill_9_of_real_workers_at_random_instants() -> None:
    """A short run of scripts/crash_patch.py: real workers killed while they apply a
    patch of 8 files; the script asserts all or nothing after each kill."""
    counts = crash_patch.run(3, 8, random.Random(5))
    assert sum(counts.values()) == 3


def test_a_store_that_fails_after_the_patch_landed_leaves_it_to_a_settle(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old files cannot be taken into the store once every file landed: the call
    succeeds (the patch is there, whole), its record is left pending and unheld, and
    a settle takes the old files from their temps and commits it."""
    build(ws)
    workspace = os.path.realpath(ws)
    work, store = work_store(tmp_path / "store")

    def full(self: Keeper, dir_fd: int, name: str, blob: str) -> None:
        raise StoreError("no space left on device")

    monkeypatch.setattr(Keeper, "_take", full)
    ctx = Context(Roots(Root(workspace)), Limits(), DELETES, history=store)
    answer = execute(ctx, CallRequest("apply_patch", {"patch": PATCH}))
    assert answer.ok, answer
    assert files_of(ws) == AFTER and len(temps_of(ws)) == 3  # the old files, set aside
    monkeypatch.undo()
    settled_store = settled(ws, work, [os.getpid()])
    assert temps_of(ws) == [] and len(settled_store.listing().records) == 1
    outcome = restore.undo(Roots(Root(workspace)), settled_store, DELETES, Limits(),
                           "src/app.py", force=False)
    assert outcome["conflicts"] == [], outcome
    assert files_of(ws) == BEFORE
