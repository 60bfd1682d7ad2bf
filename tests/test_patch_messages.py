"""apply_patch's refusals for mistakes models make tell them how to fix the patch."""

from __future__ import annotations

import pytest

from corral.errors import CorralError
from corral.tools.patch_format import apply_hunks, parse_patch


def refused(text: str) -> str:
    with pytest.raises(CorralError) as caught:
        parse_patch(text)
    assert caught.value.code == "invalid_arguments"
    return caught.value.message


def test_a_patch_escaped_twice_is_told_to_send_real_line_breaks() -> None:
    """A JSON string escaped once too often: one line holding '\\n' sequences."""
    message = refused("*** Begin Patch\\n*** Update File: a.py\\n@@\\n-x\\n+y\\n*** End Patch")
    assert "patch line 1" in message and "line breaks" in message


@pytest.mark.parametrize("header", ["*** Rename File: a.py", "*** Move File: a.py"])
def test_a_rename_header_says_how_a_patch_moves_a_file(header: str) -> None:
    message = refused(f"*** Begin Patch\n{header}\n*** End Patch")
    assert "'*** Move to: <path>'" in message and "'*** Update File: <path>'" in message


@pytest.mark.parametrize("section", [
    "*** Add File: notes/\n+x\n",
    "*** Update File: a.md\n*** Move to: notes/\n",
    "*** Delete File: build/\n",
])
def test_a_path_ending_in_a_slash_is_a_directory_not_a_file(section: str) -> None:
    """'Add File: notes/' made a file named notes; a Move to a directory is a guess
    at the file's new name."""
    message = refused(f"*** Begin Patch\n{section}*** End Patch")
    assert "ends with '/'" in message and "file's path" in message


def test_hunks_out_of_order_are_told_to_come_in_file_order() -> None:
    (patch,) = parse_patch("*** Begin Patch\n*** Update File: f\n@@\n-b\n+B\n@@\n-a\n+A\n"
                           "*** End Patch")
    with pytest.raises(CorralError) as caught:
        apply_hunks("a\nb\n", patch)
    assert caught.value.code == "no_match"
    assert "at line 1, above the previous hunk" in caught.value.message
    assert "file's order" in caught.value.message
