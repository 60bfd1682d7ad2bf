"""apply_patch through Sandbox.call: every result shape, dry_run, the refusals that
change nothing, a miss with its lesson, several roots, bytes kept, one history
record undone whole, and a forged patch record refused by the host."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.history.records import MAX_PATCH_ENTRIES
from corral.history.store import new_id
from corral.policy import Policy, RootSpec, Rule
from tests.helpers.calls import err, ok
from tests.helpers.history_helpers import commit_done, work_store
from tests.helpers.patch_helpers import AFTER, BEFORE, DELETES, PATCH, build, files_of, temps_of


@pytest.fixture
def tree(ws: Path) -> Path:
    build(ws)
    return ws


def _patch(*sections: str) -> str:
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


def test_a_patch_adds_updates_deletes_and_moves_as_one(tree: Path) -> None:
    with Sandbox(tree, policy=DELETES) as sb:
        result = ok(sb, "apply_patch", patch=PATCH)["result"]
    assert files_of(tree) == AFTER
    assert temps_of(tree) == []
    shown = [{k: v for k, v in f.items() if k != "version"} for f in result["files"]]
    assert shown == [
        {"path": "src/util.py", "action": "add"},
        {"path": "src/app.py", "action": "update"},
        {"path": "old.txt", "action": "delete"},
        {"path": "notes/draft.md", "action": "move", "to": "notes/final.md"},
    ]
    assert all(("version" in f) == (f["action"] != "delete") for f in result["files"])
    assert result["match"] == "exact" and result["dry_run"] is False
    assert "+    print('hello, patch')" in result["diff"]


def test_dry_run_returns_every_diff_and_changes_nothing(tree: Path) -> None:
    with Sandbox(tree, policy=DELETES) as sb:
        response = ok(sb, "apply_patch", patch=PATCH, dry_run=True)
    assert files_of(tree) == BEFORE and temps_of(tree) == []
    diff = response["result"]["diff"]
    for name in ("src/util.py", "src/app.py", "old.txt", "notes/final.md"):
        assert f"+++ b/{name}" in diff
    assert response["text"].startswith("Would apply the patch to 4 files:")
    assert all("version" not in f for f in response["result"]["files"])


def test_delete_file_off_is_tool_disabled_and_nothing_changes(tree: Path) -> None:
    with Sandbox(tree) as sb:
        error = err(sb, "apply_patch", patch=PATCH)
    assert error["code"] == "tool_disabled"
    assert "old.txt" in error["message"] and "delete_file" in error["message"]
    assert files_of(tree) == BEFORE and temps_of(tree) == []


def test_a_denied_path_refuses_the_whole_patch(tree: Path) -> None:
    policy = Policy(tool_modes={"delete_file": "allow"},
                    rules=(Rule("no-notes", "deny", ("apply_patch",), ("notes/**",)),))
    with Sandbox(tree, policy=policy) as sb:
        error = err(sb, "apply_patch", patch=PATCH)
    assert (error["code"], error.get("rule")) == ("path_denied", "no-notes")
    assert files_of(tree) == BEFORE and temps_of(tree) == []


def test_supervised_paths_are_asked_about_once_together(tree: Path) -> None:
    asked: list[dict[str, Any]] = []
    policy = Policy(tool_modes={"delete_file": "allow"},
                    rules=(Rule("ask", "supervised", ("*",), ("src/**", "old.txt")),))

    def approve(request: dict[str, Any]) -> bool:
        asked.append(request)
        return True

    with Sandbox(tree, policy=policy, approve=approve) as sb:
        ok(sb, "apply_patch", patch=PATCH)
    assert len(asked) == 1
    assert sorted(asked[0]["paths"]) == ["old.txt", "src/app.py", "src/util.py"]
    assert "+    print('hello, patch')" in asked[0]["diff"]  # the person sees the change
    assert files_of(tree) == AFTER


def test_a_denied_approval_changes_nothing(tree: Path) -> None:
    policy = Policy(tool_modes={"delete_file": "allow", "apply_patch": "supervised"})
    with Sandbox(tree, policy=policy, approve=lambda request: False) as sb:
        assert err(sb, "apply_patch", patch=PATCH)["code"] == "approval_denied"
    assert files_of(tree) == BEFORE and temps_of(tree) == []


def test_read_only_sandbox_and_read_only_root(tree: Path, tmp_path: Path) -> None:
    with Sandbox(tree, policy=Policy(read_only=True)) as sb:
        assert err(sb, "apply_patch", patch=PATCH)["code"] == "tool_disabled"
    other = tmp_path / "ro"
    other.mkdir()
    (other / "x.txt").write_text("one\n")
    patch = _patch("*** Update File: src/app.py\n@@\n-    return 0\n+    return 1\n",
                   f"*** Update File: {other}/x.txt\n@@\n-one\n+two\n")
    with Sandbox(tree, allowed_paths=[RootSpec(str(other), "ro")]) as sb:
        assert err(sb, "apply_patch", patch=patch)["code"] == "read_only"
    assert files_of(tree) == BEFORE and (other / "x.txt").read_text() == "one\n"


def test_a_miss_names_the_closest_lines_and_changes_nothing(tree: Path) -> None:
    patch = _patch("*** Add File: fresh.txt\n+new\n",
                   "*** Update File: src/app.py\n@@\n-    print('goodbye')\n+    pass\n")
    with Sandbox(tree) as sb:
        error = err(sb, "apply_patch", patch=patch)
    assert error["code"] in ("no_match", "not_found")
    assert "src/app.py" in error["message"] and "line" in error["message"]
    assert files_of(tree) == BEFORE and temps_of(tree) == []


def test_a_bad_patch_names_its_line(sb: Sandbox) -> None:
    error = err(sb, "apply_patch", patch="*** Begin Patch\n*** Frobnicate File: x\n*** End Patch")
    assert error["code"] == "invalid_arguments" and "line 2" in error["message"]


def test_add_over_an_existing_file_and_a_path_named_twice(tree: Path) -> None:
    with Sandbox(tree) as sb:
        error = err(sb, "apply_patch", patch=_patch("*** Add File: old.txt\n+x\n"))
        assert error["code"] == "already_exists"
        twice = _patch("*** Update File: src/app.py\n@@\n-    return 0\n+    return 1\n",
                       "*** Update File: src/../src/app.py\n@@\n def main():\n+    x = 1\n")
        assert err(sb, "apply_patch", patch=twice)["code"] == "invalid_arguments"
    assert files_of(tree) == BEFORE


def test_tolerant_and_exact_matching(tree: Path) -> None:
    drifted = _patch("*** Update File: src/app.py\n@@\n-  print('hello')  \n+  print('hi')\n")
    with Sandbox(tree) as sb:
        assert err(sb, "apply_patch", patch=drifted, match="exact")["code"] in (
            "no_match", "not_found")
        result = ok(sb, "apply_patch", patch=drifted)["result"]
    assert result["match"] in ("whitespace", "indentation")
    assert (tree / "src/app.py").read_bytes() == b"def main():\n    print('hi')\n    return 0\n"


def test_several_roots(tree: Path, tmp_path: Path) -> None:
    other = tmp_path / "lib"
    other.mkdir()
    (other / "mod.py").write_text("VALUE = 1\n")
    patch = _patch("*** Update File: src/app.py\n@@\n-    return 0\n+    return 1\n",
                   f"*** Update File: {other}/mod.py\n@@\n-VALUE = 1\n+VALUE = 2\n",
                   f"*** Add File: {other}/new.py\n+NEW = True\n")
    with Sandbox(tree, allowed_paths=[RootSpec(str(other), "rw")]) as sb:
        ok(sb, "apply_patch", patch=patch)
        assert (other / "mod.py").read_text() == "VALUE = 2\n"
        assert (other / "new.py").read_text() == "NEW = True\n"
        assert sb.undo(str(other / "new.py"))["ok"]
    assert files_of(tree) == BEFORE
    assert (other / "mod.py").read_text() == "VALUE = 1\n" and not (other / "new.py").exists()


def test_crlf_bom_and_utf16_are_kept(ws: Path) -> None:
    build(ws, {"win.txt": b"one\r\ntwo\r\nthree\r\n", "bom.txt": b"\xef\xbb\xbfalpha\nbeta\n",
               "wide.txt": b"\xff\xfe" + "first\nsecond\n".encode("utf-16-le")})
    patch = _patch("*** Update File: win.txt\n@@\n one\n-two\n+TWO\n three\n",
                   "*** Update File: bom.txt\n@@\n-alpha\n+ALPHA\n",
                   "*** Update File: wide.txt\n@@\n first\n-second\n+zweite\n")
    with Sandbox(ws) as sb:
        ok(sb, "apply_patch", patch=patch)
        assert err(sb, "apply_patch", patch=_patch(
            "*** Update File: win.txt\n@@\n-one\n+\udcff\n"))["code"] == "invalid_arguments"
    assert (ws / "win.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"
    assert (ws / "bom.txt").read_bytes() == b"\xef\xbb\xbfALPHA\nbeta\n"
    assert (ws / "wide.txt").read_bytes() == b"\xff\xfe" + "first\nzweite\n".encode("utf-16-le")


def test_read_before_write_applies(tree: Path) -> None:
    policy = Policy(read_before_write="require")
    patch = _patch("*** Update File: src/app.py\n@@\n-    return 0\n+    return 1\n")
    with Sandbox(tree, policy=policy) as sb:
        assert err(sb, "apply_patch", patch=patch)["code"] == "conflict"
        ok(sb, "read_file", path="src/app.py")
        ok(sb, "apply_patch", patch=patch)
        again = _patch("*** Update File: src/app.py\n@@\n-    return 1\n+    return 2\n")
        ok(sb, "apply_patch", patch=again)  # the session wrote that version itself


def test_one_undo_reverts_the_whole_patch_and_history_shows_one_entry(tree: Path) -> None:
    with Sandbox(tree, policy=DELETES) as sb:
        ok(sb, "apply_patch", patch=PATCH)
        entries = sb.history()
        assert [e["action"] for e in entries] == ["patch"]
        assert [f["path"] for f in entries[0]["files"]] == [
            "src/util.py", "src/app.py", "old.txt", "notes/draft.md"]
        assert [e["action"] for e in sb.history("old.txt")] == ["delete"]
        undone = sb.undo("notes/final.md")
        assert undone["ok"] and undone["result"]["conflicts"] == [], undone
        assert files_of(tree) == BEFORE
        assert not (tree / "src" / "util.py").exists()


def test_a_patch_is_rewound_whole(tree: Path) -> None:
    with Sandbox(tree, policy=DELETES) as sb:
        checkpoint = sb.checkpoint("before")
        ok(sb, "apply_patch", patch=PATCH)
        ok(sb, "edit_file", path="src/app.py", old_string="return 0", new_string="return 3")
        rewound = sb.rewind(checkpoint)
        assert rewound["ok"] and rewound["result"]["conflicts"] == [], rewound
    assert files_of(tree) == BEFORE


def test_history_off_still_lands_all_or_nothing(tree: Path, tmp_path: Path) -> None:
    config = tmp_path / "corral.toml"
    config.write_text(f'[workspace]\nroot = "{tree}"\n[history]\nenabled = false\n'
                      '[tools]\ndelete_file = "allow"\n')
    with Sandbox.from_config(config) as sb:
        ok(sb, "apply_patch", patch=PATCH)
    assert files_of(tree) == AFTER and temps_of(tree) == []


def _forged(store_dir: Path, ws: Path, tool: str, entries: list[dict[str, Any]]) -> str:
    record_id = new_id()
    record = {"v": 1, "id": record_id, "time": int(record_id[:16], 16) / 1e9, "tool": tool,
              "pid": os.getpid(), "entries": entries}
    (store_dir / f"r-{record_id}.done").write_text(json.dumps(record))
    return record_id


def _entry(ws: Path, rel: str, **extra: Any) -> dict[str, Any]:
    return {"root": str(ws), "rel": rel, "path": rel, "kind": "replace", "action": "create",
            "before": None, "after": {"type": "file", "size": 1}, **extra}


def test_the_host_accepts_a_patch_record_and_refuses_forged_ones(ws: Path, tmp_path: Path) -> None:
    work, store = work_store(tmp_path / "store")
    temp = f".corral-tmp-{os.getpid()}-{'0' * 16}"
    good = _forged(work, ws, "apply_patch", [_entry(ws, f"f{i}", temp=temp) for i in range(3)])
    forged = {
        "many entries, not a patch": _forged(work, ws, "write_file",
                                             [_entry(ws, f"g{i}") for i in range(3)]),
        "a temp, not a patch": _forged(work, ws, "write_file", [_entry(ws, "h", temp=temp)]),
        "a temp of another writer": _forged(work, ws, "apply_patch", [_entry(
            ws, "i", temp=".corral-tmp-1-" + "0" * 16)]),
        "a temp elsewhere": _forged(work, ws, "apply_patch", [_entry(
            ws, "sub/j", temp=temp)]),
        "a path twice": _forged(work, ws, "apply_patch", [_entry(ws, "k", temp=temp)] * 2),
        "too many entries": _forged(work, ws, "apply_patch", [
            _entry(ws, f"m{i}", temp=temp) for i in range(MAX_PATCH_ENTRIES + 1)]),
        "another record's blob": _forged(work, ws, "apply_patch", [
            _entry(ws, "n", temp=temp),
            _entry(ws, "o", temp=temp, kind="replace", action="modify",
                   before={"type": "file", "size": 1, "blob": f"b-{new_id()}-1"})]),
    }
    refused = commit_done(store, work, ws)
    assert sorted(name[2:28] for name in refused) == sorted(forged.values())
    assert store.listing().records == [good]


def test_concurrent_patches_and_edits_neither_wait_forever_nor_lose_a_change(ws: Path) -> None:
    """Patches over the same files in the root and below it, with edits of them, from
    three threads: each call lands whole or fails (`conflict`: its file changed
    after it read it), and every change that reported success is in the files."""
    build(ws, {"a.txt": b"a 0\n", "sub/b.txt": b"b 0\n"})

    def bump(sb: Sandbox, who: str, rounds: int) -> int:
        landed = 0
        for _ in range(rounds):
            a, b = (ws / "a.txt").read_text(), (ws / "sub/b.txt").read_text()
            if who == "edit":
                answer = sb.call("edit_file", {"path": "sub/b.txt", "old_string": b,
                                               "new_string": b + "edit\n"})
            else:
                answer = sb.call("apply_patch", {"patch": _patch(
                    f"*** Update File: a.txt\n@@\n{_context(a)}+{who}\n",
                    f"*** Update File: sub/b.txt\n@@\n{_context(b)}+{who}\n")})
            assert answer["ok"] or answer["error"]["code"] in ("conflict", "no_match"), answer
            landed += answer["ok"]
        return landed

    with Sandbox(ws, workers=3) as sb, ThreadPoolExecutor(3) as pool:
        futures = {who: pool.submit(bump, sb, who, 15) for who in ("p1", "p2", "edit")}
        landed = {who: future.result(timeout=120) for who, future in futures.items()}
    a, b = (ws / "a.txt").read_text(), (ws / "sub/b.txt").read_text()
    for who in ("p1", "p2"):
        assert a.count(f"{who}\n") == b.count(f"{who}\n") == landed[who]  # whole patches
    assert b.count("edit\n") == landed["edit"]


def _context(text: str) -> str:
    return "".join(f" {line}\n" for line in text.splitlines())


def test_no_patch_writes_corral_toml_or_under_git(tree: Path) -> None:
    with Sandbox(tree) as sb:
        for path in ("corral.toml", "sub/corral.toml", ".git/hooks/pre-commit"):
            patch = _patch(f"*** Add File: {path}\n+x\n",
                           "*** Update File: src/app.py\n@@\n-    return 0\n+    return 1\n")
            assert err(sb, "apply_patch", patch=patch)["code"] == "path_denied", path
    assert files_of(tree) == BEFORE and temps_of(tree) == []
