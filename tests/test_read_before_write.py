"""[policy] read_before_write = "require": a session changes only files it has read
(or written) at their current version."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral import Sandbox
from corral.config import ConfigError, load_config
from corral.policy import Policy
from tests.helpers.calls import err, ok

REQUIRE = Policy(read_before_write="require")


@pytest.fixture
def require_read_sb(workspace: Path) -> Sandbox:
    with Sandbox(workspace, policy=REQUIRE) as sandbox:
        yield sandbox


def test_a_blind_write_is_refused(require_read_sb: Sandbox, workspace: Path) -> None:
    for tool, arguments in (
        ("write_file", {"path": "hello.txt", "content": "blind"}),
        ("edit_file", {"path": "hello.txt", "old_string": "hello", "new_string": "bye"}),
        ("append_file", {"path": "hello.txt", "content": "more"}),
    ):
        error = err(require_read_sb, tool, **arguments)
        assert error["code"] == "conflict" and "read it" in error["message"]
    assert (workspace / "hello.txt").read_text() == "hello\nworld\n"
    ok(require_read_sb, "write_file", path="new.txt", content="a new file needs no read")


def test_read_then_change_is_allowed_and_own_writes_count(require_read_sb: Sandbox) -> None:
    ok(require_read_sb, "read_file", path="hello.txt", limit=1)  # any read of it counts
    ok(require_read_sb, "edit_file", path="hello.txt", old_string="hello", new_string="bye")
    ok(
        require_read_sb, "write_file", path="hello.txt", content="rewritten\n"
    )  # this session wrote it
    ok(require_read_sb, "append_file", path="hello.txt", content="more\n")
    ok(require_read_sb, "append_file", path="hello.txt", content="and more\n")
    ok(require_read_sb, "write_file", path="new.txt", content="made here\n")
    ok(require_read_sb, "edit_file", path="new.txt", old_string="made", new_string="changed")


def test_a_change_by_someone_else_in_between_is_refused(
    require_read_sb: Sandbox, workspace: Path
) -> None:
    ok(require_read_sb, "read_multiple_files", paths=["hello.txt"])
    (workspace / "hello.txt").write_text("changed by a human\n")
    for tool, arguments in (
        ("write_file", {"path": "hello.txt", "content": "stale"}),
        ("edit_file", {"path": "hello.txt", "old_string": "human", "new_string": "model"}),
        ("append_file", {"path": "hello.txt", "content": "stale"}),
    ):
        error = err(require_read_sb, tool, **arguments)
        assert error["code"] == "conflict" and "changed since" in error["message"]
    assert (workspace / "hello.txt").read_text() == "changed by a human\n"
    ok(require_read_sb, "read_file", path="hello.txt")
    ok(require_read_sb, "write_file", path="hello.txt", content="now it may\n")


def test_each_sandbox_is_its_own_session(workspace: Path) -> None:
    with Sandbox(workspace, policy=REQUIRE) as reader, Sandbox(workspace, policy=REQUIRE) as other:
        ok(reader, "read_file", path="hello.txt")
        assert err(other, "write_file", path="hello.txt", content="x")["code"] == "conflict"
        ok(reader, "write_file", path="hello.txt", content="x")


def test_off_is_the_default(workspace: Path) -> None:
    with Sandbox(workspace) as require_read_sb:
        ok(require_read_sb, "write_file", path="hello.txt", content="blind is fine\n")


def test_config(tmp_path: Path, workspace: Path) -> None:
    config = tmp_path / "corral.toml"
    root = f'[workspace]\nroot = "{workspace}"\n'
    config.write_text(root + '[policy]\nread_before_write = "require"\n')
    assert load_config(config).policy.read_before_write == "require"
    config.write_text(root + '[policy]\nread_before_write = "yes"\n')
    with pytest.raises(ConfigError, match="read_before_write"):
        load_config(config)


def test_a_workspace_config_may_require_it_but_not_turn_it_off(tmp_path: Path) -> None:
    from corral.config import Config
    from corral.trust import narrow

    workspace = tmp_path / "proj"
    workspace.mkdir()
    local = workspace / "corral.toml"
    local.write_text('[policy]\nread_before_write = "require"\n')
    assert narrow(Config(workspace=str(workspace)), str(local)).policy.read_before_write == (
        "require")
    operator = Config(workspace=str(workspace), policy=REQUIRE)
    local.write_text('[policy]\nread_before_write = "off"\n')
    with pytest.raises(ConfigError, match="read_before_write = 'off': looser"):
        narrow(operator, str(local))
    local.write_text(f'[history]\npath = "{tmp_path}/elsewhere"\n')
    with pytest.raises(ConfigError, match=r"\[history\]: only the operator"):
        narrow(Config(workspace=str(workspace)), str(local))
