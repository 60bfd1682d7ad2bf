"""apply_patch's refusals for mistakes models make tell them how to fix the patch."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import CorralError
from corral.policy import Policy
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


@pytest.mark.parametrize(("body", "them"), [
    ("*** Update File: f\n@@\n-missing\n+changed\n", "them"),  # Codex's scenario 006
    ("*** Update File: f\n@@ class Nowhere:\n-x\n+y\n", "it"),
])
def test_a_miss_with_nothing_like_it_in_the_file_says_so(body: str, them: str) -> None:
    """A miss names the closest region; when no line of the file is like the
    hunk's (or the @@ line), it says that, and what to do."""
    (patch,) = parse_patch(f"*** Begin Patch\n{body}*** End Patch")
    with pytest.raises(CorralError) as caught:
        apply_hunks("line1\nline2\n", patch)
    assert caught.value.code == "no_match"
    assert caught.value.message.endswith(
        f"No line of the file is like {them}: read the file again and take the lines from it.")
    with pytest.raises(CorralError) as caught:
        apply_hunks("", patch)
    assert caught.value.message.endswith("empty.")


@pytest.mark.parametrize(("section", "hint"), [
    ("*** Update File: a.txt\n*** Move to: b.txt\n",
     "move it to another path, or delete b.txt first (delete_file, or a Delete File in an "
     "earlier patch)"),
    ("*** Add File: b.txt\n+x\n",  # Codex's scenario 011: Codex overwrites it
     "use Update File to change it, or delete it first (delete_file, or a Delete File in an "
     "earlier patch"),
])
def test_a_move_or_add_onto_an_existing_file_says_what_to_do(
    tmp_path: Path, section: str, hint: str,
) -> None:
    """Codex's scenario 010 moves onto an existing file: a patch makes new files only,
    and the refusal says how to get there (a Delete File of b.txt in the same patch
    would change it twice)."""
    from corral import Sandbox

    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "b.txt").write_text("b\n")
    with Sandbox(tmp_path, policy=Policy(tool_modes={"delete_file": "allow"})) as sb:
        answer = sb.call("apply_patch", {"patch": f"*** Begin Patch\n{section}*** End Patch"})
    error = answer["error"]
    assert error["code"] == "already_exists" and hint in error["message"], error
    assert (tmp_path / "a.txt").read_text() == "a\n" and (tmp_path / "b.txt").read_text() == "b\n"
