"""History, undo, rewind and checkpoints through a real Sandbox (confined workers)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from corral import AsyncSandbox, Sandbox, testing
from corral.policy import Policy, Rule
from tests.helpers.calls import ok
from tests.helpers.history_helpers import snapshot

ENABLE_DELETE = Policy(tool_modes={"delete_file": "allow"})


@pytest.fixture
def tree(workspace: Path) -> Path:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("print('app')\n")
    script = workspace / "run.sh"
    script.write_text("#!/bin/sh\necho run\n")
    script.chmod(0o750)
    (workspace / "log.txt").write_text("one\n")
    (workspace / "empty").mkdir()
    return workspace


@pytest.fixture
def delete_sb(tree: Path) -> Any:
    with Sandbox(tree, policy=ENABLE_DELETE) as sandbox:
        yield sandbox


CHANGES = [
    ("write_file", {"path": "src/app.py", "content": "print('new')\n"}),
    ("write_file", {"path": "run.sh", "content": "#!/bin/sh\necho changed\n"}),
    ("write_file", {"path": "new/deep/file.txt", "content": "made with its parents\n"}),
    ("edit_file", {"path": "src/app.py", "old_string": "app", "new_string": "edited"}),
    ("append_file", {"path": "log.txt", "content": "two\n"}),
    ("append_file", {"path": "fresh/log.txt", "content": "first\n"}),
    ("create_directory", {"path": "a/b/c"}),
    ("move_file", {"source": "run.sh", "destination": "bin.sh"}),
    ("move_file", {"source": "run.sh", "destination": "log.txt", "overwrite": True}),
    ("move_file", {"source": "src", "destination": "lib"}),
    ("move_file", {"source": "empty", "destination": "moved/empty"}),
    ("copy_file", {"source": "run.sh", "destination": "copy.sh"}),
    ("copy_file", {"source": "run.sh", "destination": "log.txt", "overwrite": True}),
    ("delete_file", {"path": "run.sh"}),
    ("delete_file", {"path": "src/app.py"}),
]


@pytest.mark.parametrize(("tool", "arguments"), CHANGES, ids=lambda v: str(v)[:40])
def test_every_change_is_undone(delete_sb: Sandbox, tree: Path, tool: str, arguments: dict) -> None:
    if arguments.get("destination") == "moved/empty":
        (tree / "moved").mkdir()
    before = snapshot(tree)
    ok(delete_sb, tool, **arguments)
    assert snapshot(tree) != before
    path = arguments.get("path") or arguments["destination"]
    undone = delete_sb.undo(path)
    assert undone["ok"], undone
    assert set(undone) == {"ok", "tool", "result", "text"}
    assert undone["tool"] == "undo"
    assert undone["result"]["conflicts"] == []
    assert path in undone["result"]["restored"]
    assert snapshot(tree) == before


def test_changes_are_undone_one_by_one(delete_sb: Sandbox, tree: Path) -> None:
    states = [snapshot(tree)]
    for text in ("v1\n", "v2\n", "v3\n"):
        ok(delete_sb, "write_file", path="src/app.py", content=text)
        states.append(snapshot(tree))
    ok(delete_sb, "append_file", path="src/app.py", content="tail\n")
    states.append(snapshot(tree))
    for expected in reversed(states[:-1]):
        assert delete_sb.undo("src/app.py")["ok"]
        assert snapshot(tree) == expected
    nothing = delete_sb.undo("src/app.py")
    assert not nothing["ok"] and nothing["error"]["code"] == "not_found"


def test_history_lists_newest_first_with_the_contract_keys(delete_sb: Sandbox) -> None:
    ok(delete_sb, "write_file", path="a.txt", content="a\n")
    cp = delete_sb.checkpoint("before b")
    assert isinstance(cp, str)
    ok(delete_sb, "write_file", path="a.txt", content="b\n")
    ok(delete_sb, "move_file", source="a.txt", destination="c.txt")
    entries = delete_sb.history()
    assert [e["action"] for e in entries[:5]] == ["move", "move", "modify", "checkpoint", "create"]
    for entry in entries:
        assert {"id", "time", "tool", "path", "action", "before", "after"} <= set(entry)
    assert entries[3]["id"] == cp and entries[3]["checkpoint"] == "before b"
    assert entries[2]["before"]["type"] == "file" and entries[2]["before"]["size"] == 2
    assert entries[4]["before"] is None  # did not exist
    assert [e["path"] for e in delete_sb.history("a.txt")] == ["a.txt", "a.txt", "a.txt"]
    assert len(delete_sb.history(limit=2)) == 2
    ids = [e["id"] for e in entries]
    assert ids == sorted(ids, reverse=True)


def test_rewind_to_a_checkpoint_and_back(delete_sb: Sandbox, tree: Path) -> None:
    at_checkpoint = snapshot(tree)
    cp = delete_sb.checkpoint()
    ok(delete_sb, "write_file", path="src/app.py", content="changed\n")
    ok(delete_sb, "delete_file", path="run.sh")
    ok(delete_sb, "create_directory", path="x/y")
    ok(delete_sb, "move_file", source="log.txt", destination="x/y/log.txt")
    ok(delete_sb, "edit_file", path="x/y/log.txt", old_string="one", new_string="uno")
    changed = snapshot(tree)
    rewound = delete_sb.rewind(cp)
    assert rewound["ok"] and rewound["result"]["conflicts"] == []
    assert {"src/app.py", "run.sh", "x/y", "log.txt"} <= set(rewound["result"]["restored"])
    assert snapshot(tree) == at_checkpoint
    again = delete_sb.rewind(rewound["result"]["checkpoint"])  # a rewind can be rewound
    assert again["ok"] and snapshot(tree) == changed


def test_a_change_by_someone_else_is_a_conflict_unless_forced(
    delete_sb: Sandbox, tree: Path
) -> None:
    ok(delete_sb, "write_file", path="src/app.py", content="by corral\n")
    (tree / "src" / "app.py").write_text("by a human\n")
    left = delete_sb.undo("src/app.py")
    assert left["ok"] and left["result"] == {**left["result"], "restored": [],
                                             "conflicts": ["src/app.py"]}
    assert "force" in left["text"]
    assert (tree / "src" / "app.py").read_text() == "by a human\n"
    forced = delete_sb.undo("src/app.py", force=True)
    assert forced["result"]["restored"] == ["src/app.py"]
    assert (tree / "src" / "app.py").read_text() == "print('app')\n"
    # nothing lost: what the human wrote is in the history too
    assert delete_sb.history("src/app.py")[0]["before"]["size"] == len("by a human\n")


def test_rewind_leaves_a_conflicting_path_alone(delete_sb: Sandbox, tree: Path) -> None:
    cp = delete_sb.checkpoint()
    ok(delete_sb, "write_file", path="src/app.py", content="corral 1\n")
    ok(delete_sb, "write_file", path="log.txt", content="corral 2\n")
    ok(delete_sb, "write_file", path="src/app.py", content="corral 3\n")
    (tree / "src" / "app.py").write_text("human\n")
    rewound = delete_sb.rewind(cp)
    assert rewound["result"]["conflicts"] == ["src/app.py"]
    assert rewound["result"]["restored"] == ["log.txt"]
    assert (tree / "src" / "app.py").read_text() == "human\n"
    assert (tree / "log.txt").read_text() == "one\n"


def test_undo_and_rewind_obey_the_policy(tree: Path) -> None:
    policy = Policy(rules=(Rule("no-src", "deny", ("write_file",), ("src/**",)),))
    with Sandbox(tree) as delete_sb:
        ok(delete_sb, "write_file", path="src/app.py", content="changed\n")
    with Sandbox(tree, policy=policy) as delete_sb:
        refused = delete_sb.undo("src/app.py")
        assert refused["result"]["conflicts"] == ["src/app.py"]
        assert "denied" in refused["text"]
        assert (tree / "src" / "app.py").read_text() == "changed\n"
    with Sandbox(tree, policy=Policy(read_only=True)) as delete_sb:
        assert delete_sb.undo("src/app.py")["error"]["code"] == "read_only"


def test_unknown_checkpoint(tree: Path) -> None:
    with Sandbox(tree) as delete_sb:
        assert delete_sb.rewind("nope")["error"]["code"] == "not_found"


def test_history_survives_the_sandbox(tree: Path) -> None:
    with Sandbox(tree) as delete_sb:
        cp = delete_sb.checkpoint()
        ok(delete_sb, "write_file", path="log.txt", content="rewritten\n")
    with Sandbox(tree) as delete_sb:
        assert delete_sb.history()[0]["path"] == "log.txt"
        assert delete_sb.rewind(cp)["ok"]
    assert (tree / "log.txt").read_text() == "one\n"


def test_async_sandbox_has_the_same_methods(tree: Path) -> None:
    async def run() -> None:
        async with AsyncSandbox(tree) as delete_sb:
            cp = await delete_sb.checkpoint("async")
            await delete_sb.call("write_file", {"path": "log.txt", "content": "async\n"})
            assert (await delete_sb.history())[0]["tool"] == "write_file"
            assert (await delete_sb.undo("log.txt"))["result"]["restored"] == ["log.txt"]
            await delete_sb.call("write_file", {"path": "log.txt", "content": "again\n"})
            assert (await delete_sb.rewind(cp))["ok"]
    asyncio.run(run())
    assert (tree / "log.txt").read_text() == "one\n"


def test_the_replaced_file_is_kept_not_copied(delete_sb: Sandbox, tree: Path) -> None:
    """An atomic write swaps the new file in; the old inode moves into the store. In a
    worker's mount namespace the store and each root are mounts of their own, so a
    rename between them is EXDEV and the old bytes are copied instead (keeper.py)."""
    inode = (tree / "log.txt").stat().st_ino
    old = (tree / "log.txt").read_bytes()
    ok(delete_sb, "write_file", path="log.txt", content="new\n")
    testing.history(delete_sb).flush()  # committed: moved into the root's kept directory
    kept = list(Path(testing.history(delete_sb).path).glob("k-*/b-*"))
    if delete_sb.confinement["mount_namespace"]:
        assert [p.read_bytes() for p in kept] == [old]
    else:
        assert [p.stat().st_ino for p in kept] == [inode]


def test_cli_history_checkpoint_undo_rewind(tree: Path) -> None:
    import subprocess

    def corral(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["corral", *args, "--workspace", str(tree)], capture_output=True,
                              text=True, timeout=60, env=os.environ)

    cp = corral("checkpoint", "before").stdout.strip()
    assert len(cp) == 26
    corral("call", "write_file", '{"path": "log.txt", "content": "cli\\n"}')
    listed = corral("history", "log.txt")
    assert "write_file" in listed.stdout and listed.returncode == 0
    undone = corral("undo", "log.txt")
    assert undone.returncode == 0 and "Restored log.txt" in undone.stdout
    corral("call", "write_file", '{"path": "log.txt", "content": "cli again\\n"}')
    assert corral("rewind", cp).returncode == 0
    assert (tree / "log.txt").read_text() == "one\n"


def test_a_shared_pools_sandbox_records_and_undoes(tree: Path) -> None:
    from corral import Pool

    with Pool(max_workers=2) as pool, pool.sandbox(tree) as delete_sb:
        ok(delete_sb, "write_file", path="log.txt", content="pooled\n")
        assert delete_sb.history("log.txt")[0]["tool"] == "write_file"
        assert delete_sb.undo("log.txt")["result"]["restored"] == ["log.txt"]
    assert (tree / "log.txt").read_text() == "one\n"


def test_undo_and_rewind_are_audited(tree: Path, tmp_path: Path) -> None:
    import json

    log = tmp_path / "audit.jsonl"
    with Sandbox(tree, audit=log) as delete_sb:
        cp = delete_sb.checkpoint()
        ok(delete_sb, "write_file", path="log.txt", content="x\n")
        delete_sb.undo("log.txt")
        delete_sb.rewind(cp)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["tool"], r["ok"], r["path"]) for r in lines[1:]] == [
        ("undo", True, "log.txt"), ("rewind", True, cp)]
