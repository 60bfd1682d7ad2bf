"""The symlinks a forced snapshot rewind makes again (the host makes them: no
worker can): the record pass's deleted links are made before the snapshot pass
walks, so it sees them, and every link the snapshot holds and the tree lost is
made after it, one an earlier rewind made included. A rewind run again over
another (as a crashed one is finished) gives the checkpoint's links exactly; and a
restore looks at a path through its parent, never through a link above it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from corral import Sandbox
from corral.errors import CorralError
from corral.fs import Root
from corral.history.snapshots import Item, digest_bytes
from corral.policy import Policy
from corral.sandbox.snapshot_walk import _holds
from tests.helpers.history_helpers import snapshot


def _tree(root: Path) -> None:
    for name in ("d0", "d1", "kept"):
        (root / name).mkdir()
        (root / name / "f.txt").write_text(f"{name}\n")
    os.symlink("f.txt", root / "d0" / "link")
    os.symlink("f.txt", root / "kept" / "link")
    (root / ".gitignore").write_text("kept/\n")


def _rewound(sb: Sandbox, cp: str) -> None:
    result = sb.rewind(cp, force=True)
    assert result["ok"] and result["result"]["conflicts"] == [], result


def test_a_rewind_over_a_rewind_that_made_a_link_makes_it_again(workspace: Path) -> None:
    _tree(workspace)
    at_cp = snapshot(workspace)
    with Sandbox(workspace, workers=1) as sb:
        cp = sb.checkpoint("cp")
        os.unlink(workspace / "d0" / "link")  # behind corral's back
        os.symlink("../d0", workspace / "d1" / "up")
        _rewound(sb, cp)
        assert snapshot(workspace) == at_cp
        (workspace / "d1" / "f.txt").write_text("again\n")
        _rewound(sb, cp)  # takes the first rewind's changes back on its way, links too
        assert snapshot(workspace) == at_cp


def test_a_link_corral_deleted_where_snapshots_do_not_look_comes_back(
    workspace: Path
) -> None:
    """An ignored directory is not the snapshot pass's: the record pass's link."""
    _tree(workspace)
    at_cp = snapshot(workspace)
    policy = Policy(tool_modes={"delete_file": "allow"})
    with Sandbox(workspace, workers=1, policy=policy) as sb:
        cp = sb.checkpoint("cp")
        deleted = sb.call("delete_file", {"path": "kept/link"})
        assert deleted["ok"], deleted
        _rewound(sb, cp)
    assert snapshot(workspace) == at_cp


def test_a_restore_looks_at_a_path_through_its_parent_never_through_a_link_above(
    tmp_path: Path,
) -> None:
    """Whether a path holds the snapshot's state is read through its parent opened
    beneath the root, in one resolution: a directory above it that is a symlink
    now (to a copy of it in the root, or to a directory outside) is refused, not
    followed; a link is compared by its own text."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    for where in (ws / "d", ws / "real", outside):
        where.mkdir(parents=True)
        (where / "f.txt").write_bytes(b"kept\n")
        (where / "f.txt").chmod(0o644)
    want = Item("d/f.txt", "file", 0o644, 5, digest_bytes(b"kept\n"), None, (0, 0, 0, 0, 0))
    link = Item("l", "symlink", 0o777, 0, None, "real/f.txt", (0, 0, 0, 0, 0))
    (ws / "l").symlink_to("real/f.txt")
    root = Root(str(ws))
    try:
        assert _holds(root, "d/f.txt", want, 1 << 20)
        assert _holds(root, "l", link, 1 << 20)
        assert not _holds(root, "l", link._replace(target="other"), 1 << 20)
        shutil.rmtree(ws / "d")
        for target in ("real", str(outside)):
            (ws / "d").unlink(missing_ok=True)
            (ws / "d").symlink_to(target)
            with pytest.raises(CorralError) as refused:
                _holds(root, "d/f.txt", want, 1 << 20)
            assert refused.value.code in ("conflict", "outside_workspace")
    finally:
        root.close()
