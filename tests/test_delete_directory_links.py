"""delete_directory of a tree holding symlinks, history on, confined workers (their
mount namespace makes the store another mount: the tree is copied in, and a
worker can never make a symlink): it goes, its result counts the links no undo
can make again; undo and rewind put back every file and directory and list each
link with its target (escaped in the text a person reads), making none."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from corral import Sandbox
from corral.policy import Policy
from corral.tools.render import escaped
from tests.helpers.calls import ok
from tests.helpers.history_helpers import snapshot

ON = {"delete_directory": "allow"}
# relative, absolute, dangling, and a target a terminal would act on
LINKS = {"d/bin/tool": "../lib/tool.js", "d/abs": "/etc/passwd", "d/dangling": "no/such",
         "d/bin/evil": "x\x1b[2K\rfake\u202e"}


def _tree(ws: Path) -> dict[str, Any]:
    """A node_modules-like tree; the snapshot of the workspace with it."""
    for sub in ("bin", "lib", "empty"):
        (ws / "d" / sub).mkdir(parents=True)
    (ws / "d" / "a.txt").write_text("alpha\n")
    (ws / "d" / "lib" / "tool.js").write_text("run()\n")
    (ws / "d" / "lib" / "tool.js").chmod(0o750)
    (ws / "d" / "lib").chmod(0o700)
    for path, target in LINKS.items():
        (ws / path).symlink_to(target)
    return snapshot(ws)


def _without_links(before: dict[str, Any]) -> dict[str, Any]:
    return {path: was for path, was in before.items() if path not in LINKS}


def _raw(text: str) -> list[str]:
    return [c for c in text if not c.isprintable() and c != "\n"]


def _deleted(ws: Path, sandbox: Sandbox) -> None:
    done = ok(sandbox, "delete_directory", path="d", recursive=True)
    assert done["result"] == {"path": "d", "deleted": True, "entries_removed": 9,
                              "links_not_restorable": 4}
    assert "4 symlinks went with it that an undo cannot make again" in done["text"]
    assert not (ws / "d").exists()


def _listed(result: dict[str, Any]) -> dict[str, str]:
    return {link["path"]: link["target"] for link in result["links_not_restored"]}


def test_undo_restores_files_and_dirs_and_lists_the_links(ws: Path) -> None:
    before = _tree(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        _deleted(ws, sandbox)
        undone = sandbox.undo("d/bin/tool")  # any path beneath: the whole tree
    assert undone["ok"], undone
    assert undone["result"]["restored"] == ["d"] and undone["result"]["conflicts"] == []
    assert _listed(undone["result"]) == LINKS  # the result keeps each target itself
    assert snapshot(ws) == _without_links(before)  # no link made, none followed
    text = undone["text"]
    assert _raw(text) == [] and "Restored d." in text
    for path, target in LINKS.items():
        assert f"  {path} -> {escaped(target)}" in text.splitlines()


def test_rewind_lists_the_links_too(ws: Path) -> None:
    before = _tree(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        checkpoint = sandbox.checkpoint()
        _deleted(ws, sandbox)
        rewound = sandbox.rewind(checkpoint)
    assert rewound["ok"] and rewound["result"]["conflicts"] == [], rewound
    assert _listed(rewound["result"]) == LINKS
    assert snapshot(ws) == _without_links(before)


def test_corral_undo_lists_the_links(ws: Path) -> None:
    before = _tree(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        _deleted(ws, sandbox)
    done = subprocess.run(["corral", "undo", "d", "--workspace", str(ws), "--json"],
                          capture_output=True, text=True, timeout=60, env=os.environ)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert _listed(outcome["result"]) == LINKS
    assert snapshot(ws) == _without_links(before)
    # the plain text names them, escaped, for a person to make again
    assert escaped(LINKS["d/bin/evil"]) in outcome["text"] and _raw(outcome["text"]) == []


def test_undo_of_a_deleted_symlink_lists_it(ws: Path) -> None:
    """delete_file of a symlink, undone: nothing to restore, nothing conflicting; the
    link is listed as a deleted directory's are, and the change counts as undone."""
    (ws / "a.txt").write_text("alpha\n")
    (ws / "link").symlink_to("a.txt")
    with Sandbox(ws, policy=Policy({"delete_file": "allow"})) as sandbox:
        ok(sandbox, "delete_file", path="link")
        undone = sandbox.undo("link")
        assert undone["ok"], undone
        assert undone["result"]["restored"] == [] and undone["result"]["conflicts"] == []
        assert _listed(undone["result"]) == {"link": "a.txt"}
        assert "  link -> a.txt" in undone["text"].splitlines()
        assert not os.path.lexists(ws / "link")
        again = sandbox.undo("link")  # stepped past it: no other change of the link
    assert again["error"]["code"] == "not_found", again
