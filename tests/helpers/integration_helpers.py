"""What the framework adapters' tests share: a workspace with a file to read and
edit, a file to patch, a symlink out of it to a secret, and the corral calls of
the read -> edit -> apply_patch -> refused escape sequence each test drives
through its framework's own agent loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.calls import SECRET

PATCH = ("*** Begin Patch\n*** Update File: src/app.py\n@@\n-print('hi')\n+print('hello')\n"
         "*** Add File: src/new.py\n+x = 1\n*** End Patch\n")
# The calls, in corral's own arguments: each test spells them in its framework.
STEPS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "notes.txt"}),
    ("edit_file", {"path": "notes.txt", "old_string": "world", "new_string": "there"}),
    ("apply_patch", {"patch": PATCH}),
    ("read_file", {"path": "escape/secret.txt"}),
]
READ_TEXT = "     1\thello\n     2\tworld"
ESCAPE_REFUSED = "cannot read escape/secret.txt: path escapes the workspace roots."


def build(tmp_path: Path) -> Path:
    """ws/notes.txt, ws/src/app.py, ws/.env, and ws/escape -> ../outside (the secret)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "notes.txt").write_text("hello\nworld\n")
    (ws / "src" / "app.py").write_text("print('hi')\n")
    (ws / ".env").write_text("TOKEN=1\n")
    (ws / "escape").symlink_to(outside)
    return ws


def assert_after_steps(ws: Path) -> None:
    assert (ws / "notes.txt").read_text() == "hello\nthere\n"
    assert (ws / "src" / "app.py").read_text() == "print('hello')\n"
    assert (ws / "src" / "new.py").read_text() == "x = 1\n"


def assert_undone(ws: Path) -> None:
    """After rewinding to the checkpoint taken before the run."""
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert (ws / "src" / "app.py").read_text() == "print('hi')\n"
    assert not (ws / "src" / "new.py").exists()
