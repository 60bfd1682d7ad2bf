"""apply_patch at the edges a review found: two names of one file (a hard link) in
one patch are one file named twice, refused before anything changes; a rename the
kernel refuses part-way lands nothing and the error names the file; a move's diff
names both ends."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from corral import Sandbox
from corral.policy import Policy
from tests.helpers.calls import err, ok


def _patch(*sections: str) -> str:
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


UPDATE_A = "*** Update File: a.txt\n@@\n-one\n+ONE\n"
UPDATE_LINK = "*** Update File: link.txt\n@@\n three\n-four\n+FOUR\n"


def test_two_hard_links_of_one_file_are_one_file_named_twice(sb: Sandbox, ws: Path) -> None:
    """Each name would be rewritten from the same old text: the link split in two,
    each name holding half the patch."""
    (ws / "a.txt").write_text("one\ntwo\nthree\nfour\n")
    os.link(ws / "a.txt", ws / "link.txt")
    error = err(sb, "apply_patch", patch=_patch(UPDATE_A, UPDATE_LINK))
    assert error["code"] == "invalid_arguments"
    assert "a.txt" in error["message"] and "link.txt" in error["message"]
    assert "hard link" in error["message"]
    assert os.path.samefile(ws / "a.txt", ws / "link.txt")
    assert (ws / "a.txt").read_text() == "one\ntwo\nthree\nfour\n"


def test_a_hard_link_deleted_beside_its_other_name_is_fine(ws: Path) -> None:
    """A delete removes a name: the other name's update keeps its own change."""
    (ws / "a.txt").write_text("one\ntwo\nthree\nfour\n")
    os.link(ws / "a.txt", ws / "link.txt")
    with Sandbox(ws, policy=Policy({"delete_file": "allow"})) as sb:
        ok(sb, "apply_patch", patch=_patch(UPDATE_A, "*** Delete File: link.txt\n"))
    assert (ws / "a.txt").read_text() == "ONE\ntwo\nthree\nfour\n"
    assert not (ws / "link.txt").exists()


def test_a_hard_link_to_a_file_the_patch_leaves_alone_is_updated(sb: Sandbox, ws: Path) -> None:
    """One name of a linked file in a patch is fine: it gets a new inode, as a write."""
    (ws / "a.txt").write_text("one\n")
    os.link(ws / "a.txt", ws / "other.txt")
    (ws / "b.txt").write_text("x\n")
    ok(sb, "apply_patch", patch=_patch(UPDATE_A, "*** Update File: b.txt\n@@\n-x\n+y\n"))
    assert (ws / "a.txt").read_text() == "ONE\n"
    assert (ws / "other.txt").read_text() == "one\n"


def test_a_symlink_to_one_hard_link_and_the_other_name(sb: Sandbox, ws: Path) -> None:
    """The link is followed: both rewrite one file."""
    (ws / "a.txt").write_text("one\ntwo\nthree\nfour\n")
    os.link(ws / "a.txt", ws / "hard.txt")
    (ws / "link.txt").symlink_to("hard.txt")
    error = err(sb, "apply_patch", patch=_patch(UPDATE_A, UPDATE_LINK))
    assert error["code"] == "invalid_arguments"
    assert (ws / "a.txt").read_text() == "one\ntwo\nthree\nfour\n"


def _immutable(path: Path, on: bool) -> None:
    """chattr +i / -i: the kernel then refuses to rename or unlink it (EPERM)."""
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    if done.returncode and on:
        pytest.skip(f"chattr +i is not available here: {done.stderr.decode().strip()}")


def test_a_rename_the_kernel_refuses_part_way_lands_nothing_and_names_the_file(
    ws: Path,
) -> None:
    """The third file cannot be replaced (immutable): the first is swapped back, the
    deleted one put back, the added one taken away, and the error names the file at
    fault."""
    (ws / "a.txt").write_text("one\n")
    (ws / "b.txt").write_text("two\n")
    (ws / "d.txt").write_text("gone\n")
    _immutable(ws / "b.txt", True)
    try:
        with Sandbox(ws, policy=Policy({"delete_file": "allow"})) as sb:
            error = err(sb, "apply_patch", patch=_patch(
                UPDATE_A, "*** Delete File: d.txt\n", "*** Update File: b.txt\n@@\n-two\n+TWO\n",
                "*** Add File: c.txt\n+c\n"))
    finally:
        _immutable(ws / "b.txt", False)
    assert error["code"] == "path_denied"
    assert "b.txt" in error["message"]
    assert (ws / "a.txt").read_text() == "one\n"
    assert (ws / "b.txt").read_text() == "two\n"
    assert (ws / "d.txt").read_text() == "gone\n"
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "b.txt", "d.txt"]


def test_a_moved_file_s_diff_names_both_ends(ws: Path) -> None:
    """As git shows a rename with changes: --- the old name, +++ the new."""
    (ws / "draft.md").write_text("# Draft\nbody\n")
    with Sandbox(ws, policy=Policy({"delete_file": "allow"})) as sb:
        result = ok(sb, "apply_patch", patch=_patch(
            "*** Update File: draft.md\n*** Move to: notes/final.md\n@@\n-# Draft\n+# Final\n"))
    assert "--- a/draft.md\n+++ b/notes/final.md\n" in result["result"]["diff"]


def test_an_add_file_without_lines_makes_an_empty_file(sb: Sandbox, ws: Path) -> None:
    """As Codex makes it: an __init__.py, a .gitkeep."""
    ok(sb, "apply_patch", patch=_patch("*** Add File: pkg/__init__.py\n",
                                       "*** Add File: pkg/mod.py\n+x = 1\n"))
    assert (ws / "pkg" / "__init__.py").read_bytes() == b""
    assert (ws / "pkg" / "mod.py").read_text() == "x = 1\n"


def test_the_text_shows_a_bounded_diff_of_a_huge_line(ws: Path) -> None:
    """A deleted one-line minified file: its whole diff stays in result.diff, the text
    a model reads is cut (it carried every byte of the file)."""
    (ws / "app.min.js").write_text("a" * 300_000 + "\n")
    with Sandbox(ws, policy=Policy({"delete_file": "allow"})) as sb:
        result = ok(sb, "apply_patch", patch=_patch("*** Delete File: app.min.js\n"))
    assert len(result["result"]["diff"]) > 300_000
    assert len(result["text"]) < 70_000
    assert result["text"].endswith("characters in result.diff]")
    assert "D app.min.js" in result["text"]


def test_a_supervised_delete_names_the_delete_file_setting(ws: Path) -> None:
    """A patch's Delete File asks because delete_file is supervised: the message
    names that setting (it said apply_patch's mode, which is allow)."""
    (ws / "old.txt").write_text("old\n")
    with Sandbox(ws, policy=Policy({"delete_file": "supervised"})) as sb:
        error = err(sb, "apply_patch", patch=_patch("*** Delete File: old.txt\n"))
    assert error["code"] == "approval_required"
    assert "delete_file" in error["message"]
    assert (ws / "old.txt").exists()
