"""An undo or rewind that leaves a change alone names every path of it, and why:
a patch is reverted whole or not at all, so one file edited outside corral keeps
the patch's other files too; a rewind passing over older changes of such paths
says so. The audit record agrees with the answer (and with the command's exit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral import Sandbox
from tests.helpers.calls import ok

PATCH = """*** Begin Patch
*** Update File: src/app.py
@@
-app = 1
+app = 2
*** Update File: src/lib.py
@@
-lib = 1
+lib = 2
*** End Patch
"""


@pytest.fixture
def tree(ws: Path) -> Path:
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("app = 1\n")
    (ws / "src" / "lib.py").write_text("lib = 1\n")
    return ws


@pytest.mark.parametrize("how", ["undo", "rewind"])
def test_every_path_of_a_patch_left_alone_is_named(tree: Path, tmp_path: Path,
                                                   how: str) -> None:
    log = tmp_path / "audit.jsonl"
    with Sandbox(tree, audit=str(log)) as sb:
        cp = sb.checkpoint()
        ok(sb, "apply_patch", patch=PATCH)
        (tree / "src" / "app.py").write_text("app = 3\n")  # an editor, not corral
        outcome = sb.undo("src/lib.py") if how == "undo" else sb.rewind(cp)
    result = outcome["result"]
    assert sorted(result["conflicts"]) == ["src/app.py", "src/lib.py"], result
    assert result["restored"] == []
    assert result["reasons"]["src/app.py"] == "changed since by something other than corral"
    assert "src/app.py" in result["reasons"]["src/lib.py"], result
    assert "left with the rest of its change" in result["reasons"]["src/lib.py"]
    lines = outcome["text"].splitlines()
    assert any(line.startswith("Left src/lib.py alone: left with the rest") for line in lines)
    assert any(line.startswith("Left src/app.py alone: changed since") for line in lines)
    assert (tree / "src" / "lib.py").read_text() == "lib = 2\n"  # the patch stays whole
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["tool"] == how and record["ok"] is False and record["error"] == "conflict"
    assert sorted(t["path"] for t in record["touched"]) == ["src/app.py", "src/lib.py"]


def test_a_rewind_names_the_older_changes_it_passes_over(tree: Path) -> None:
    """lib.py's own edit after the patch is taken back; the patch itself is not (its
    app.py was edited outside corral), so lib.py is not at the checkpoint's state:
    said, not listed as restored."""
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        ok(sb, "write_file", path="src/other.py", content="x = 1\n")
        ok(sb, "apply_patch", patch=PATCH)
        ok(sb, "edit_file", path="src/lib.py", old_string="lib = 2", new_string="lib = 9")
        (tree / "src" / "app.py").write_text("app = 3\n")
        result = sb.rewind(cp)["result"]
    assert sorted(result["conflicts"]) == ["src/app.py", "src/lib.py"], result
    assert result["restored"] == ["src/other.py"], result
    assert (tree / "src" / "lib.py").read_text() == "lib = 2\n"
    assert not (tree / "src" / "other.py").exists()


def test_a_rewind_that_left_one_path_names_it_in_the_audit_record(
        tree: Path, tmp_path: Path) -> None:
    """One path left by a rewind (whose record's path is the checkpoint): the record
    names it in touched (a lone touched entry used to be dropped)."""
    log = tmp_path / "audit.jsonl"
    with Sandbox(tree, audit=str(log)) as sb:
        cp = sb.checkpoint()
        ok(sb, "edit_file", path="src/lib.py", old_string="lib = 1", new_string="lib = 2")
        (tree / "src" / "lib.py").write_text("lib = 4\n")  # an editor, not corral
        result = sb.rewind(cp)["result"]
    assert result["conflicts"] == ["src/lib.py"], result
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["tool"] == "rewind" and record["ok"] is False
    assert [t["path"] for t in record["touched"]] == ["src/lib.py"]


def test_a_clean_undo_is_an_ok_audit_record(tree: Path, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    with Sandbox(tree, audit=str(log)) as sb:
        ok(sb, "apply_patch", patch=PATCH)
        assert sb.undo("src/lib.py")["result"]["conflicts"] == []
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["ok"] is True and record["error"] is None and "touched" not in record


def test_a_rewind_names_the_paths_of_older_changes_it_leaves(tree: Path) -> None:
    """An older patch shares app.py with the patch left alone: it is left too, and
    its other file, z.py, is named (it was passed over in silence)."""
    older = ("*** Begin Patch\n*** Add File: src/z.py\n+z = 1\n*** Update File: src/app.py\n"
             "@@\n app = 1\n+# more\n*** End Patch\n")
    with Sandbox(tree) as sb:
        cp = sb.checkpoint()
        ok(sb, "apply_patch", patch=older)
        ok(sb, "apply_patch", patch=PATCH)
        (tree / "src" / "lib.py").write_text("lib = 3\n")
        result = sb.rewind(cp)["result"]
    assert sorted(result["conflicts"]) == ["src/app.py", "src/lib.py", "src/z.py"], result
    assert "not taken back to the checkpoint" in result["reasons"]["src/z.py"]
    assert (tree / "src" / "z.py").exists()
