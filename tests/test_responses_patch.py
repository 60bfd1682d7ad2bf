"""The Responses API's apply_patch_call mapped onto apply_patch: one call is one
file, whatever its path or diff holds. Pure: the patch text is checked."""

from __future__ import annotations

import pytest

from corral import CorralError
from corral.tools.patch_format import parse_patch
from corral.tools.responses_patch import patch_arguments


def call(kind: str, path: str, diff: str | None = None) -> dict[str, object]:
    operation: dict[str, object] = {"type": kind, "path": path}
    if diff is not None:
        operation["diff"] = diff
    return {"type": "apply_patch_call", "call_id": "c", "operation": operation}


def refused(item: dict[str, object]) -> str:
    with pytest.raises(CorralError) as caught:
        patch_arguments(item)
    assert caught.value.code == "invalid_arguments"
    return caught.value.message


@pytest.mark.parametrize("item", [
    call("update_file", "a.py\n*** Delete File: b.py", "@@\n-x\n+y\n"),
    call("delete_file", "a.py\n*** Delete File: b.py"),
    call("create_file", "a.py\r\n*** Delete File: b.py", "+x\n"),
])
def test_a_path_with_a_line_break_is_refused(item: dict[str, object]) -> None:
    """A line break in the path would start a second file's header in the patch."""
    assert "line break" in refused(item)


@pytest.mark.parametrize("diff", [
    "@@\n-x\n+y\n*** Delete File: b.py\n",
    "@@\n-x\n+y\n*** End Patch\n*** Begin Patch\n*** Add File: c.py\n+z\n",
    "@@\n-x\n+y\n*** End of File\n*** Update File: b.py\n@@\n-q\n+r\n",
])
def test_an_update_diff_cannot_name_another_file(diff: str) -> None:
    """A header line in an update's diff would make the call change a second file."""
    message = refused(call("update_file", "a.py", diff))
    assert "diff line" in message and "'@@'" in message


def test_a_diff_sent_as_a_whole_patch_says_what_a_diff_holds() -> None:
    message = refused(call("update_file", "a.py",
                           "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch"))
    assert "diff line 1" in message and "*** Begin Patch" in message


def test_end_of_file_and_star_lines_of_the_file_still_work() -> None:
    """'*** End of File' is a hunk line; a '*' line of the file is context or added."""
    arguments = patch_arguments(call("update_file", "a.md",
                                     "@@\n * item\n-x\n+* y\n*** End of File\n"))
    (patch,) = parse_patch(arguments["patch"])
    assert patch.hunks[0].end_of_file and patch.hunks[0].lines[0] == (" ", "* item")
    created = patch_arguments(call("create_file", "b.md", "+a\n*** not a header\n"))
    (added,) = parse_patch(created["patch"])
    assert added.content == "a\n*** not a header\n"


def test_an_empty_create_file_makes_an_empty_file() -> None:
    """create_file with an empty diff (an __init__.py): an Add File without lines,
    which Codex takes as an empty file (it was refused, "has no lines")."""
    for diff in ("", None):
        arguments = patch_arguments(call("create_file", "pkg/__init__.py", diff))
        (added,) = parse_patch(arguments["patch"])
        assert (added.action, added.path, added.content) == ("add", "pkg/__init__.py", "")
