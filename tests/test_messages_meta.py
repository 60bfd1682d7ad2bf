"""A worker's meta is input: every field the host reads is checked, and a forged
one makes the answer Malformed, naming the field (calls/messages.Meta)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.calls.messages import (
    MAX_PREVIEW_CHARS,
    GrantUse,
    Malformed,
    Meta,
    NeedsApproval,
    Touched,
)

TOUCHED = {"path": "a", "root": "/w", "resolved": "a", "decision": "allow", "rule": None}
NEED = {"key": "/w\0a", "root": "/w", "resolved": "a", "path": "a", "rule": "r"}


@pytest.mark.parametrize(("field", "value"), [
    ("touched", "a"), ("touched", [["a"]]), ("touched", [{**TOUCHED, "path": 3}]),
    ("touched", [{**TOUCHED, "rule": 3}]), ("touched", [{"path": "a"}]),
    ("needs_approval", {}), ("needs_approval", [{**NEED, "key": None}]),
    ("needs_approval", [{**NEED, "size": -1}]), ("needs_approval", [{**NEED, "size": True}]),
    ("needs_approval", [{**NEED, "mode": 7}]),
    ("bytes", -1), ("bytes", 2.0), ("bytes", True),
    ("history_bytes", "1"), ("dirs_made", None),
    ("seen", []), ("seen", {"a": 1}), ("seen", None),
    ("history_ids", "a"), ("history_ids", [1]),
    ("grants", [["g", "/w"]]), ("grants", [["g", "/w", "a", "b"]]), ("grants", [["g", "/w", 3]]),
    ("grants", [{"id": "g", "root": "/w", "resolved": "a"}]),
    ("diff", 3), ("diff", "x" * (MAX_PREVIEW_CHARS + 1)),
    ("history_done", [[]]), ("history_done", {}), ("history_done", ["r"]),
])
def test_a_forged_meta_field_is_malformed_and_named(field: str, value: Any) -> None:
    with pytest.raises(Malformed, match=field):
        Meta.from_wire({field: value})


@pytest.mark.parametrize("wire", [None, [], "meta", 3])
def test_a_meta_that_is_not_an_object_is_malformed(wire: Any) -> None:
    with pytest.raises(Malformed):
        Meta.from_wire(wire)


def test_meta_travels_whole_and_leaves_out_what_is_empty() -> None:
    meta = Meta(
        (Touched("a", "/w", "a", "allow", None),), 5,
        (NeedsApproval("/w\0a", "/w", "a", "a", "", size=3, mode="delete_file"),), 7,
        {"/w\0a": "v"}, ("r1",), (GrantUse("g", "/w", "a"),), "diff", 2,
        ({"v": 1, "id": "r1"},),
    )
    wire = meta.to_wire()
    assert [list(use) for use in wire["grants"]] == [["g", "/w", "a"]]
    assert Meta.from_wire(wire) == meta
    assert Meta().to_wire() == {}  # the common answer carries no meta keys
    assert Meta.from_wire({}) == Meta()
    # a newer worker's key is ignored, not refused
    assert Meta.from_wire({"bytes": 1, "later": True}) == Meta(bytes=1)
