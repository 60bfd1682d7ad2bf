"""A write that fails leaves no trace: the parent directories it made on its way
are removed again (deepest first, only while empty)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral import Sandbox
from corral.config import HistoryOptions, Limits
from tests.helpers.calls import err


@pytest.mark.parametrize("history", [True, False])
def test_a_write_failing_conflict_leaves_no_directories(workspace: Path, history: bool) -> None:
    before = sorted(p.name for p in workspace.iterdir())
    with Sandbox(workspace, history=HistoryOptions(enabled=history)) as sb:
        error = err(sb, "write_file", path="new/deep/f.txt", content="x",
                    expected_version="0" * 24)
        assert error["code"] == "conflict", error
        if history:
            assert sb.history() == []
    assert sorted(p.name for p in workspace.iterdir()) == before


def test_an_append_failing_too_large_leaves_no_directories(workspace: Path) -> None:
    with Sandbox(workspace, limits=Limits(max_file_bytes=4)) as sb:
        error = err(sb, "append_file", path="new/deep/log.txt", content="too long")
        assert error["code"] == "too_large", error
    assert not (workspace / "new").exists()


def test_only_the_directories_it_made_and_only_empty_ones(workspace: Path) -> None:
    (workspace / "kept").mkdir()
    with Sandbox(workspace) as sb:
        error = err(sb, "write_file", path="kept/new/f.txt", content="x",
                    expected_version="0" * 24)
        assert error["code"] == "conflict"
    assert (workspace / "kept").is_dir() and not (workspace / "kept" / "new").exists()
