"""apply_patch's `*** Delete File:` of a symlink removes the link (as delete_file
and Codex do), never what it leads to: decided on the link's own path, recorded
in history as a link (an undo lists it for a person to make again), and all or
nothing with the rest of the patch, across a kill at any step."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral import Sandbox
from corral.calls.messages import CallRequest
from corral.config import Limits
from corral.fs import Root, Roots
from corral.fs import batch as fs_batch
from corral.history.keeper import Keeper
from corral.history.store import Store
from corral.policy import Policy, Rule
from corral.tools.base import Context
from corral.tools.registry import execute
from tests.helpers.calls import err, ok
from tests.helpers.patch_helpers import apply_in_child

DELETES = Policy(tool_modes={"delete_file": "allow"})
PATCH = ("*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n"
         "*** Delete File: link.txt\n*** End Patch\n")


def _tree(ws: Path) -> None:
    (ws / "a.txt").write_text("one\n")
    (ws / "target.txt").write_text("kept\n")
    (ws / "link.txt").symlink_to("target.txt")


def _state(ws: Path) -> tuple[str, str | None, str]:
    """(a.txt, link.txt's target or None when gone, target.txt)."""
    link = os.readlink(ws / "link.txt") if os.path.islink(ws / "link.txt") else None
    return (ws / "a.txt").read_text(), link, (ws / "target.txt").read_text()


BEFORE = ("one\n", "target.txt", "kept\n")
AFTER = ("ONE\n", None, "kept\n")


def test_delete_file_of_a_symlink_removes_the_link_and_history_knows(ws: Path) -> None:
    _tree(ws)
    with Sandbox(ws, policy=DELETES) as sb:
        result = ok(sb, "apply_patch", patch=PATCH)["result"]
        assert [f["action"] for f in result["files"]] == ["update", "delete"]
        assert _state(ws) == AFTER
        [entry] = sb.history()
        assert entry["action"] == "patch", entry
        undone = sb.undo("a.txt")  # the whole patch; the link made again by the host
        assert undone["ok"] and undone["result"]["conflicts"] == [], undone
        assert "link.txt" in undone["result"]["restored"], undone
    assert _state(ws) == BEFORE


@pytest.mark.parametrize("target", ["missing.txt", "../outside.txt", "sub"])
def test_a_dangling_outward_or_directory_link_goes_as_a_link(ws: Path, target: str) -> None:
    """What the link leads to is never read nor decided: only the link's own path."""
    (ws / "sub").mkdir()
    (ws / "sub" / "f.txt").write_text("f\n")
    (ws / "link.txt").symlink_to(target)
    with Sandbox(ws, policy=DELETES) as sb:
        ok(sb, "apply_patch", patch="*** Begin Patch\n*** Delete File: link.txt\n"
           "*** End Patch\n")
    assert not os.path.lexists(ws / "link.txt") and (ws / "sub" / "f.txt").exists()


def test_a_link_to_a_denied_file_is_decided_as_the_link(ws: Path) -> None:
    """The rule covers the target's name, not the link's: delete_file removes the
    link, so does the patch; a rule on the link's own name still stops it."""
    (ws / ".env").write_text("SECRET=1\n")
    (ws / "env.txt").symlink_to(".env")
    (ws / "guarded.txt").symlink_to("a.txt")
    deny = Rule("no-guarded", "deny", ("*",), ("guarded.txt",), ("write",))
    with Sandbox(ws, policy=Policy(tool_modes={"delete_file": "allow"}, rules=(deny,))) as sb:
        ok(sb, "apply_patch", patch="*** Begin Patch\n*** Delete File: env.txt\n"
           "*** End Patch\n")
        error = err(sb, "apply_patch", patch="*** Begin Patch\n*** Delete File: "
                    "guarded.txt\n*** End Patch\n")
        assert error["code"] == "path_denied", error
    assert not os.path.lexists(ws / "env.txt") and (ws / ".env").read_text() == "SECRET=1\n"
    assert os.path.islink(ws / "guarded.txt")


def test_a_link_and_the_file_it_leads_to_are_two_files(ws: Path) -> None:
    _tree(ws)
    with Sandbox(ws, policy=DELETES) as sb:
        ok(sb, "apply_patch", patch="*** Begin Patch\n*** Update File: target.txt\n@@\n"
           "-kept\n+changed\n*** Delete File: link.txt\n*** End Patch\n")
    assert not os.path.lexists(ws / "link.txt")
    assert (ws / "target.txt").read_text() == "changed\n"


def test_a_link_changed_before_the_patch_lands_is_a_conflict(
    ws: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between staging and landing the link is pointed elsewhere: nothing lands."""
    _tree(ws)
    real = fs_batch.land

    def repointed(*args: object, **kwargs: object) -> None:
        os.unlink(ws / "link.txt")
        os.symlink("a.txt", ws / "link.txt")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fs_batch, "land", repointed)
    workspace = os.path.realpath(ws)
    ctx = Context(Roots(Root(workspace)), Limits(), DELETES)
    answer = execute(ctx, CallRequest("apply_patch", {"patch": PATCH}))
    assert not answer.ok and answer.error is not None and answer.error["code"] == "conflict"
    assert _state(ws) == ("one\n", "a.txt", "kept\n")


# A patch updating a.txt and deleting link.txt: its temp written, the record, two
# renames, a.txt's old file into the store (the link is unlinked: the store takes
# no links), the commit.
STEPS = 1 + 1 + 2 + 1 + 1


# Each a step, with each landing a step (a link's is an unlink): the process dies
# (as kill -9 would) just before the one it is given.
HOOKS = ((fs_batch, "write_temp"), (fs_batch, "_rename"), (Store, "write_pending"),
         (Store, "commit"), (Keeper, "_take"))


@pytest.mark.parametrize("step", range(1, STEPS + 2))
def test_a_kill_at_every_step_leaves_the_link_and_the_file_together(
    ws: Path, step: int,
) -> None:
    _tree(ws)
    status = apply_in_child(os.path.realpath(ws), step, PATCH, DELETES, HOOKS)
    assert status == (9 if step <= STEPS else 0)
    with Sandbox(ws, policy=DELETES) as sb:  # opening it settles the dead writer's patch
        state = _state(ws)
        assert state in (BEFORE, AFTER), (step, state)
        assert len(sb.history()) == (state == AFTER)
    assert not [p for p in os.listdir(ws) if p.startswith(".corral-tmp-")]
