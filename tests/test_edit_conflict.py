"""edit_file without expected_version, raced by another writer between its read and
its write: a conflict whose message says what happened, not a version never passed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.config import Limits
from corral.fs import Root, Roots
from corral.policy import Policy
from corral.tools import edit
from corral.tools.base import Context
from tests.wire_calls import execute


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    root = Root(str(tmp_path))
    try:
        yield Context(Roots(root), Limits(), Policy())
    finally:
        root.close()


def test_a_raced_edit_without_expected_version_says_what_happened(
    ctx: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("alpha\n")
    read = edit.content

    def read_then_another_writer(*args: Any) -> bytes:
        data = read(*args)
        target.write_text("alpha\nbeta\n")  # another writer, between the read and the write
        return data

    monkeypatch.setattr(edit, "content", read_then_another_writer)
    answer = execute(ctx, {"tool": "edit_file", "arguments": {
        "path": "notes.txt", "old_string": "alpha", "new_string": "gamma"}})
    assert answer["ok"] is False and answer["error"]["code"] == "conflict"
    message = answer["error"]["message"]
    assert "expected_version" not in message
    assert "notes.txt" in message and "read it again" in message
    assert target.read_text() == "alpha\nbeta\n"  # the other writer's change is kept
