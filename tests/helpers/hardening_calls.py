"""Test helper, not production: a workspace and one call per tool and per error
path a worker can take, with the error code each must give (None: ok). Used to
prove that a worker never imports a module at call time (after Landlock, a lazy
import fails and the call would come back as io_error).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from corral.policy import Policy

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
# Tools off by default are switched on, so their code runs too.
POLICY = Policy(tool_modes={"delete_file": "allow"})


def make_tree(workspace: Path) -> None:
    """Files of every kind the calls below aim at."""
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("import os\n\ndef main():\n    return 1\n" * 3)
    (workspace / "notes.txt").write_text("alpha\nbeta\r\ngamma é ü 日本\n" * 50)
    (workspace / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (workspace / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (workspace / "pic.png").write_bytes(PNG)
    (workspace / "long.txt").write_text("x" * 5000 + "\n" + "y\n" * 3000)
    (workspace / ".env").write_text("KEY=1\n")
    (workspace / "dup.txt").write_text("same\nsame\n")
    (workspace / "linked.txt").write_text("two names\n")
    os.link(workspace / "linked.txt", workspace / "linked2.txt")
    (workspace / "target.txt").write_text("old\n")
    os.symlink("target.txt", workspace / "to_target")
    os.symlink("notes.txt", workspace / "to_notes")
    os.symlink("loop_b", workspace / "loop_a")
    os.symlink("loop_a", workspace / "loop_b")
    os.symlink("/etc/passwd", workspace / "to_etc")
    os.mkfifo(workspace / "fifo")


def _call(tool: str, expect: str | None, **arguments: Any) -> tuple[dict[str, Any], str | None]:
    return {"tool": tool, "arguments": arguments, "approved": []}, expect


CALLS: list[tuple[dict[str, Any], str | None]] = [
    _call("read_file", None, path="notes.txt"),
    _call("read_file", None, path="notes.txt", offset=-5, limit=3),
    _call("read_file", None, path="long.txt", max_bytes=1000),
    _call("read_file", None, path="blob.bin", encoding="base64"),
    _call("read_file", None, path="pic.png"),
    _call("read_file", None, path="to_notes"),
    _call("read_file", None, path="latin1.txt", encoding="base64"),
    _call("read_file", "binary_file", path="latin1.txt"),
    _call("read_file", "binary_file", path="blob.bin"),
    _call("read_file", "not_found", path="missing.txt"),
    _call("read_file", "is_a_directory", path="src"),
    _call("read_file", "not_a_directory", path="notes.txt/x"),
    _call("read_file", "not_a_regular_file", path="fifo"),
    _call("read_file", "outside_workspace", path="../outside/secret.txt"),
    _call("read_file", "outside_workspace", path="to_etc"),
    _call("read_file", "outside_workspace", path="/etc/passwd"),
    _call("read_file", "symlink_loop", path="loop_a"),
    _call("read_file", "path_denied", path=".env"),
    _call("read_file", "invalid_arguments", path="a\x00b"),
    _call("read_file", "invalid_arguments", path=""),
    _call("read_file", "invalid_arguments", path="x" * 5000),
    _call("read_file", "invalid_arguments", path="notes.txt", limit="ten"),
    _call("read_file", "invalid_arguments", path="notes.txt", encoding="utf-16"),
    _call("read_multiple_files", None, paths=["notes.txt", "missing.txt", ".env", "pic.png"]),
    _call("write_file", None, path="new/deep/file.txt", content="fresh é\n"),
    _call("write_file", None, path="bytes.bin", content=base64.b64encode(b"\x00\xff").decode(),
          encoding="base64"),
    _call("write_file", None, path="to_target", content="through the link\n"),
    _call("write_file", "invalid_arguments", path="bad.bin", content="%%%", encoding="base64"),
    _call("write_file", "conflict", path="dup.txt", content="x", expected_version="nope"),
    _call("write_file", "path_denied", path=".git/hooks/pre-commit", content="x"),
    _call("write_file", "is_a_directory", path="src", content="x"),
    _call("edit_file", None, path="src/app.py", old_string="return 1", new_string="return 2",
          replace_all=True),
    _call("edit_file", None, path="notes.txt", edits=[
        {"old_string": "alpha", "new_string": "ALPHA", "replace_all": True},
        {"old_string": "日本", "new_string": "nihon", "replace_all": True},
    ], dry_run=True),
    _call("edit_file", "no_match", path="dup.txt", old_string="absent", new_string="x"),
    _call("edit_file", "ambiguous_match", path="dup.txt", old_string="same", new_string="x"),
    _call("edit_file", "binary_file", path="blob.bin", old_string="a", new_string="b"),
    _call("edit_file", "conflict", path="dup.txt", old_string="same", new_string="x",
          replace_all=True, expected_version="nope"),
    _call("append_file", None, path="log.txt", content="one line\n"),
    _call("append_file", "path_denied", path="linked2.txt", content="x"),  # before the rewrite
    _call("append_file", "not_a_regular_file", path="fifo", content="x"),
    _call("write_file", None, path="linked.txt", content="new inode\n"),
    _call("list_directory", None),
    _call("list_directory", None, path=".", recursive=True, include_hidden=False, max_entries=3),
    _call("list_directory", "not_a_directory", path="notes.txt"),
    _call("create_directory", None, path="made/here"),
    _call("create_directory", "already_exists", path="notes.txt"),
    _call("stat_file", None, path="to_notes"),
    _call("stat_file", None, path="pic.png"),
    _call("stat_file", None, path="missing.txt"),
    _call("copy_file", None, source="notes.txt", destination="copies/notes.txt"),
    _call("copy_file", "already_exists", source="notes.txt", destination="dup.txt"),
    _call("copy_file", "is_a_directory", source="src", destination="src2"),
    _call("move_file", None, source="copies/notes.txt", destination="moved.txt"),
    _call("move_file", "already_exists", source="moved.txt", destination="dup.txt"),
    _call("move_file", "invalid_arguments", source="src", destination="src/inner"),
    _call("delete_file", None, path="moved.txt"),
    _call("delete_file", "is_a_directory", path="src"),
    _call("search_files", None, pattern="**/*.py"),
    _call("search_files", None, pattern="*.txt", path="src", max_results=1),
    _call("search_files", None, pattern="[", path="."),
    _call("grep", None, pattern=r"ret\w+ \d", glob="*.py", ignore_case=True),
    _call("grep", None, pattern="é|日本", path=".", max_results=2),
    _call("grep", None, pattern="x", glob="src/*.py"),
    _call("grep", None, pattern=r"\N{LATIN SMALL LETTER E WITH ACUTE}"),  # re imports unicodedata
    _call("grep", "invalid_arguments", pattern=r"\N{NO SUCH CHARACTER NAME}"),
    _call("grep", "invalid_arguments", pattern="(unclosed"),
    _call("grep", "not_found", pattern="x", path="nowhere"),
    _call("no_such_tool", "unknown_tool"),
]


def code_of(response: dict[str, Any]) -> str | None:
    return None if response.get("ok") else response["error"]["code"]
