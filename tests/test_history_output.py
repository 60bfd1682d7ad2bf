"""What history shows a person: a file name's control characters (terminal escapes,
a carriage return, a bidi override) escaped in `corral history`, `undo`, `rewind`
and their result text, as approvals and the audit log show them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from corral import Sandbox
from corral.tools.render import escaped
from tests.helpers.calls import ok

NAME = "a\x1b[2K\rfake.txt\u202egnp.txt"  # erases the line, returns, reverses the rest


def _raw(text: str) -> list[str]:
    return [c for c in text if not c.isprintable() and c != "\n"]


def test_undo_and_rewind_text_escape_names(ws: Path, sb: Sandbox) -> None:
    cp = sb.checkpoint()
    ok(sb, "write_file", path=NAME, content="x\n")
    undone = sb.undo(NAME)
    assert undone["result"]["restored"] == [NAME]  # the result keeps the name itself
    assert _raw(undone["text"]) == [] and escaped(NAME) in undone["text"]
    ok(sb, "write_file", path=NAME, content="y\n")
    (ws / NAME).write_text("changed outside\n")
    rewound = sb.rewind(cp)
    assert rewound["result"]["conflicts"] == [NAME]
    assert _raw(rewound["text"]) == [] and f"Left {escaped(NAME)} alone" in rewound["text"]


def corral(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["corral", *args, "--workspace", str(workspace)],
                          capture_output=True, text=True, timeout=60, env=os.environ)


def test_cli_history_undo_rewind_escape_names(workspace: Path) -> None:
    cp = corral(workspace, "checkpoint", "label\x1b[1A").stdout.strip()
    arguments = json.dumps({"path": NAME, "content": "x\n"})
    assert corral(workspace, "call", "write_file", arguments).returncode == 0
    for args in (("history",), ("history", NAME), ("history", "--json"),
                 ("undo", NAME), ("undo", NAME, "--json")):
        done = corral(workspace, *args)
        assert done.stdout and _raw(done.stdout + done.stderr) == [], (args, done.stdout)
    listed = json.loads(corral(workspace, "history", "--json").stdout)
    assert NAME in [entry["path"] for entry in listed]  # JSON escapes, the name is intact
    assert corral(workspace, "call", "write_file", arguments).returncode == 0
    (workspace / NAME).write_text("changed outside\n")
    rewound = corral(workspace, "rewind", cp)
    assert rewound.returncode == 1 and _raw(rewound.stdout + rewound.stderr) == []
    assert escaped(NAME) in rewound.stdout


def test_undo_and_rewind_say_removed_for_a_path_that_did_not_exist(ws: Path, sb: Sandbox) -> None:
    """Taking back a change that made a file removes it: the text says so, and the
    result lists it in `removed` as well as in `restored` (the contract's list of
    every path put back as it was)."""
    (ws / "kept.txt").write_text("old")  # before the checkpoint: its snapshot holds it
    checkpoint = sb.checkpoint("before")
    ok(sb, "write_file", path="made.txt", content="new")
    ok(sb, "edit_file", path="kept.txt", old_string="old", new_string="changed")
    undone = sb.undo("made.txt")
    assert undone["result"]["removed"] == ["made.txt"] and not (ws / "made.txt").exists()
    assert "Removed made.txt (it did not exist then)." in undone["text"]
    ok(sb, "write_file", path="made.txt", content="again")
    rewound = sb.rewind(checkpoint)
    assert sorted(rewound["result"]["restored"]) == ["kept.txt", "made.txt"]
    assert rewound["result"]["removed"] == ["made.txt"]
    assert "Removed made.txt" in rewound["text"] and "Restored kept.txt." in rewound["text"]


def test_a_workers_removed_list_is_believed_only_for_paths_it_restored() -> None:
    """`removed` comes from the worker: the host says "Removed" only of a string
    that the restored list also holds, and never fails on anything else there."""
    from corral.calls.messages import Answer
    from corral.host.ledger import Ledger
    from corral.policy import Policy

    ledger = Ledger(Policy(), None, None)
    for told, says_removed in ((["a.txt", "x.txt"], True), ([{"not": "a path"}], False),
                               ("a.txt", False), (None, False)):
        result = {"restored": ["a.txt"], "conflicts": [], "removed": told}
        text = ledger.history_result(Answer(True, "undo", result), "a.txt")["text"]
        assert text == ("Removed a.txt (it did not exist then)." if says_removed
                        else "Restored a.txt.")
