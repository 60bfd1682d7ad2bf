"""History edges: history off, undo after a rewind or an undo, a path outside."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from corral import AsyncSandbox, CorralError, Sandbox
from corral.config import HistoryOptions, Limits
from corral.fs import Root, Roots
from corral.history import restore
from corral.history.keeper import Keeper
from corral.policy import Policy
from tests.helpers.calls import ok
from tests.helpers.history_helpers import promoted, work_store

OFF = HistoryOptions(enabled=False)


def test_history_off_gives_results_not_exceptions(workspace: Path) -> None:
    with Sandbox(workspace, history=OFF) as sb:
        ok(sb, "write_file", path="a.txt", content="x")
        assert sb.history() == [] and sb.history("a.txt") == []
        for outcome, tool in ((sb.undo("a.txt"), "undo"), (sb.rewind("x"), "rewind")):
            assert outcome["ok"] is False and outcome["tool"] == tool
            assert outcome["error"]["code"] == "tool_disabled"
            assert "[history] enabled = false" in outcome["error"]["message"]
        # checkpointing without history is the host's mistake: a corral error, named
        with pytest.raises(CorralError, match=r"\[history\] enabled = false") as raised:
            sb.checkpoint("label")
        assert raised.value.code == "tool_disabled"
    assert (workspace / "a.txt").read_text() == "x"


def test_history_off_in_an_async_sandbox(workspace: Path) -> None:
    async def run() -> None:
        async with AsyncSandbox(workspace, history=OFF) as sb:
            assert await sb.history() == []
            assert (await sb.undo("a.txt"))["error"]["code"] == "tool_disabled"
            assert (await sb.rewind("x"))["error"]["code"] == "tool_disabled"
    asyncio.run(run())


def corral(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["corral", *args, "--workspace", str(workspace)],
                          capture_output=True, text=True, timeout=60, env=os.environ)


def test_cli_history_off_says_so_in_one_line(workspace: Path, tmp_path: Path) -> None:
    config = tmp_path / "off.toml"
    config.write_text("[history]\nenabled = false\n")
    for args in (("history",), ("checkpoint",), ("diff", "x"), ("undo", "a.txt"),
                 ("rewind", "x")):
        done = corral(workspace, *args, "--config", str(config))
        assert done.returncode != 0, args
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "[history] enabled = false" in lines[0], done.stderr


def test_undo_after_a_rewind_takes_the_rewind_back(workspace: Path) -> None:
    target = workspace / "a.txt"
    with Sandbox(workspace) as sb:
        ok(sb, "write_file", path="a.txt", content="v1")
        ok(sb, "write_file", path="a.txt", content="v2")
        cp = sb.checkpoint()
        ok(sb, "write_file", path="a.txt", content="v3")
        assert sb.rewind(cp)["result"]["restored"] == ["a.txt"]
        assert target.read_text() == "v2"
        undone = sb.undo("a.txt")  # the rewind is the last recorded change of a.txt
        assert undone["ok"] and undone["result"]["conflicts"] == [], undone
        assert undone["result"]["restored"] == ["a.txt"]
        assert target.read_text() == "v3"
        # and on back through the changes, the rewind's cancelled by its undo
        for expected in ("v2", "v1"):
            assert sb.undo("a.txt")["result"]["restored"] == ["a.txt"]
            assert target.read_text() == expected


def test_cli_undo_after_a_forced_rewind(workspace: Path) -> None:
    target = workspace / "a.txt"
    target.write_text("v1")
    cp = corral(workspace, "checkpoint").stdout.strip()
    corral(workspace, "call", "write_file", '{"path": "a.txt", "content": "v2"}')
    assert corral(workspace, "rewind", cp, "--force").returncode == 0
    assert target.read_text() == "v1"
    undone = corral(workspace, "undo", "a.txt")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert target.read_text() == "v2"


def test_undo_after_undo_steps_further_back(workspace: Path) -> None:
    """An undo's record cancels the change it reverted, so undo again reverts
    the change before it (not a redo)."""
    target = workspace / "a.txt"
    with Sandbox(workspace) as sb:
        for text in ("v1", "v2", "v3"):
            ok(sb, "write_file", path="a.txt", content=text)
        for expected in ("v2", "v1"):
            assert sb.undo("a.txt")["ok"]
            assert target.read_text() == expected
        assert sb.history("a.txt")[0]["tool"] == "undo"


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd"])
def test_undo_of_a_path_outside_is_outside_workspace(workspace: Path, path: str) -> None:
    (workspace / "a").mkdir()
    with Sandbox(workspace) as sb:
        outcome = sb.undo(path)
        assert outcome["ok"] is False
        assert outcome["error"]["code"] == "outside_workspace", outcome


def test_undo_of_a_directory_made_keeps_what_was_written_in_it(tmp_path: Path) -> None:
    """Undoing create_directory removes the directory only while it is empty: a
    keeper takes a removed directory into the store by renaming it, which would
    take every file written in it since along (where the store is on the same
    mount as the tree, as outside a worker's mount namespace)."""
    (tmp_path / "ws").mkdir()
    work, store = work_store(tmp_path / "store")
    root = Root(str(tmp_path / "ws"))
    root.mkdir("a", keep=Keeper(store, root.path, "create_directory"))
    root.write_atomic("a/x.txt", b"x\n", keep=Keeper(store, root.path, "write_file"))
    promoted(store, work, root.path)
    outcome = restore.undo(Roots(root), store, Policy(), Limits(), "a", force=False)
    assert outcome["conflicts"] == ["a"], outcome
    assert (tmp_path / "ws" / "a" / "x.txt").read_bytes() == b"x\n"
