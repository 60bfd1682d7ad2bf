"""edit_file raced by another writer between its read and its write: without
expected_version it is applied again to the file as it is then (while its
old_string still matches there), a bounded number of times; with expected_version
(or under read_before_write) the race is a conflict, as a call sent again would be.
Real edits racing through a Sandbox's workers, and a race made on cue."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import Limits
from corral.fs import Root, Roots, content_version
from corral.policy import Policy
from corral.tools import edit
from corral.tools.base import Context
from tests.helpers.wire_calls import execute


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    root = Root(str(tmp_path))
    try:
        yield Context(Roots(root), Limits(), Policy())
    finally:
        root.close()


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """notes.txt in ctx's root, holding "alpha"."""
    notes = tmp_path / "notes.txt"
    notes.write_text("alpha\n")
    return notes


def racing(monkeypatch: pytest.MonkeyPatch, change: Callable[[int], None]) -> list[int]:
    """Another writer runs `change(n)` right after the edit's n-th read (from 1)."""
    read, reads = edit.content, []

    def read_then_another_writer(*args: Any) -> bytes:
        data = read(*args)
        reads.append(len(reads) + 1)
        change(reads[-1])
        return data

    monkeypatch.setattr(edit, "content", read_then_another_writer)
    return reads


def call(ctx: Context, **arguments: Any) -> dict[str, Any]:
    return execute(ctx, {"tool": "edit_file", "arguments": {"path": "notes.txt", **arguments}})


def test_a_raced_edit_is_applied_again_to_the_new_text(
    ctx: Context, target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = racing(monkeypatch, lambda n: n == 1 and target.write_text("alpha\nbeta\n"))
    answer = call(ctx, old_string="alpha", new_string="gamma")
    assert answer["ok"], answer
    assert target.read_text() == "gamma\nbeta\n"  # the other writer's change is kept
    assert reads == [1, 2]
    assert answer["result"]["version"] == content_version(b"gamma\nbeta\n")
    assert answer["result"]["diff"].splitlines()[2:] == ["@@ -1,2 +1,2 @@", "-alpha", "+gamma",
                                                        " beta"]


def test_a_raced_edit_that_no_longer_applies_says_the_file_changed(
    ctx: Context, target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    racing(monkeypatch, lambda n: n == 1 and target.write_text("alpha\nalpha\n"))
    answer = call(ctx, old_string="alpha", new_string="gamma")
    assert answer["error"]["code"] == "ambiguous_match", answer
    message = answer["error"]["message"]
    assert message.startswith("notes.txt changed while it was being edited, and the edit no "
                              "longer applies to it: ")
    assert target.read_text() == "alpha\nalpha\n"


def test_an_edit_raced_every_time_is_a_conflict_after_its_tries(
    ctx: Context, target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = racing(monkeypatch, lambda n: target.write_text(f"alpha\n{n}\n"))
    answer = call(ctx, old_string="alpha", new_string="gamma")
    assert answer["error"]["code"] == "conflict"
    message = answer["error"]["message"]
    assert "expected_version" not in message
    assert f"changed while it was being edited, {edit.EDIT_TRIES} times" in message
    assert "read it again" in message
    assert len(reads) == edit.EDIT_TRIES
    assert target.read_text() == f"alpha\n{edit.EDIT_TRIES}\n"


def test_with_expected_version_a_race_stays_a_conflict(
    ctx: Context, target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    racing(monkeypatch, lambda n: n == 1 and target.write_text("alpha\nbeta\n"))
    version = content_version(b"alpha\n")
    answer = call(ctx, old_string="alpha", new_string="gamma", expected_version=version)
    assert answer["error"]["code"] == "conflict"
    assert answer["error"]["message"] == f"notes.txt changed since version {version}."
    assert target.read_text() == "alpha\nbeta\n"


def test_concurrent_edits_of_one_file_all_land(ws: Path) -> None:
    """Edits of distinct lines of one file from four workers at once: none is lost,
    none answers conflict (each that lost the race was applied again)."""
    keys = [f"k{i}" for i in range(48)]
    target = ws / "settings.txt"
    target.write_text("".join(f"{key} = 0\n" for key in keys))
    with Sandbox(ws, workers=4) as sb, ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda key: sb.call("edit_file", {
            "path": "settings.txt", "old_string": f"{key} = 0", "new_string": f"{key} = 1"}),
            keys))
    assert [answer for answer in answers if not answer["ok"]] == []
    assert target.read_text() == "".join(f"{key} = 1\n" for key in keys)
