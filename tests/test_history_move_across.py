"""A move between two roots (another file system, or another mount in the worker's
mount namespace) is a copy there and a delete here: undo reverts it as a whole,
as it does a rename, from either of its paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral import Sandbox
from corral.policy import Policy, RootSpec
from tests.helpers.calls import ok
from tests.helpers.history_helpers import snapshot


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """Another root: in a worker's mount namespace each root is a mount of its own,
    so rename(2) between two roots fails EXDEV, as between two file systems."""
    path = tmp_path / "other"
    path.mkdir()
    return path


@pytest.mark.parametrize("undo_at", ["destination", "source"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_move_between_roots_is_undone_whole(
    workspace: Path, other: Path, undo_at: str, overwrite: bool
) -> None:
    (workspace / "f.txt").write_text("moving\n")
    if overwrite:
        (other / "g.txt").write_text("was here\n")
    destination = str(other / "g.txt")
    policy = Policy(tool_modes={"delete_file": "allow"})
    with Sandbox(workspace, policy=policy, allowed_paths=[RootSpec(str(other), "rw")]) as sb:
        if not sb.confinement["mount_namespace"]:
            pytest.skip("needs the mount namespace: a rename between roots is one change")
        before = (snapshot(workspace), snapshot(other))
        ok(sb, "move_file", source="f.txt", destination=destination, overwrite=overwrite)
        assert not (workspace / "f.txt").exists()
        undone = sb.undo(destination if undo_at == "destination" else "f.txt")
        assert undone["ok"] and undone["result"]["conflicts"] == [], undone
        assert set(undone["result"]["restored"]) == {"f.txt", destination}
        assert (snapshot(workspace), snapshot(other)) == before
        assert sb.undo("f.txt")["error"]["code"] == "not_found"  # it was the only change
