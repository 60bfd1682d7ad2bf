"""The symlinks a forced snapshot rewind makes again (the host makes them: no
worker can): the record pass's deleted links are made before the snapshot pass
walks, so it sees them, and every link the snapshot holds and the tree lost is
made after it, one an earlier rewind made included. A rewind run again over
another (as a crashed one is finished) gives the checkpoint's links exactly."""

from __future__ import annotations

import os
from pathlib import Path

from corral import Sandbox
from corral.policy import Policy
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
