"""The Python API applies the workspace's own corral.toml as the command line
does: Sandbox(ws), AsyncSandbox(ws), pool.sandbox(ws) and from_config narrow by
it; a widening one is a ConfigError naming the key, and nothing starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from corral import AsyncSandbox, ConfigError, Pool, Sandbox
from corral.config import Limits

DENY_A = '[[rules]]\nname = "no-a"\naction = "deny"\npaths = ["a.txt"]\n'
WIDEN = '[tools]\ndelete_file = "allow"\n'


@pytest.fixture
def ws_with_files(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("secret\n")
    (workspace / "b.txt").write_text("fine\n")
    return workspace


def refused(result: dict) -> str:
    assert not result["ok"], result
    return result["error"]["code"]


def test_sandbox_applies_a_narrowing_workspace_config(ws_with_files: Path) -> None:
    (ws_with_files / "corral.toml").write_text(DENY_A + "[limits]\nmax_read_bytes = 4096\n")
    with Sandbox(ws_with_files, limits=Limits(max_read_bytes=8192)) as sb:
        assert refused(sb.call("read_file", {"path": "a.txt"})) == "path_denied"
        assert sb.call("read_file", {"path": "b.txt"})["ok"]
        assert sb.limits.max_read_bytes == 4096  # the lower limit wins over the argument


def test_sandbox_refuses_a_widening_workspace_config(ws_with_files: Path) -> None:
    (ws_with_files / "corral.toml").write_text(WIDEN)
    with pytest.raises(ConfigError) as caught:
        Sandbox(ws_with_files)
    assert caught.value.key.startswith("[tools] delete_file")
    assert "delete_file" in str(caught.value)


def test_a_higher_limit_than_the_arguments_is_refused(ws_with_files: Path) -> None:
    (ws_with_files / "corral.toml").write_text("[limits]\nmax_read_bytes = 4096\n")
    with pytest.raises(ConfigError, match=r"max_read_bytes"):
        Sandbox(ws_with_files, limits=Limits(max_read_bytes=1024))


def test_async_sandbox_applies_it_too(ws_with_files: Path) -> None:
    (ws_with_files / "corral.toml").write_text(DENY_A)

    async def main() -> str:
        async with AsyncSandbox(ws_with_files) as sb:
            return refused(await sb.call("read_file", {"path": "a.txt"}))

    assert asyncio.run(main()) == "path_denied"
    (ws_with_files / "corral.toml").write_text(WIDEN)
    with pytest.raises(ConfigError):
        AsyncSandbox(ws_with_files)


def test_pool_sandboxes_apply_it(ws_with_files: Path) -> None:
    (ws_with_files / "corral.toml").write_text(DENY_A)
    with Pool(max_workers=2) as pool:
        sb = pool.sandbox(ws_with_files)
        assert refused(sb.call("read_file", {"path": "a.txt"})) == "path_denied"
        (ws_with_files / "corral.toml").write_text(WIDEN)
        with pytest.raises(ConfigError):
            pool.sandbox(ws_with_files)
        with pytest.raises(ConfigError):
            pool.async_sandbox(ws_with_files)
        assert pool.stats()["sandboxes"] == 1  # the refused ones never started


def test_from_config_narrows_by_the_workspace_own_file(ws_with_files: Path, tmp_path: Path) -> None:
    operator = tmp_path / "operator.toml"
    operator.write_text(f'[workspace]\nroot = "{ws_with_files}"\n[tools]\ndelete_file = "allow"\n'
                        'copy_file = "deny"\n')
    (ws_with_files / "corral.toml").write_text(DENY_A)
    with Sandbox.from_config(operator) as sb:
        assert refused(sb.call("read_file", {"path": "a.txt"})) == "path_denied"
        assert sb.call("delete_file", {"path": "b.txt"})["ok"]  # the operator's widening
    with Pool(max_workers=2) as pool:
        sb = pool.sandbox_from_config(operator)
        assert refused(sb.call("read_file", {"path": "a.txt"})) == "path_denied"
    (ws_with_files / "corral.toml").write_text('[tools]\ncopy_file = "allow"\n')
    with pytest.raises(ConfigError, match="copy_file"):
        Sandbox.from_config(operator)


def test_naming_the_workspace_file_makes_it_the_operators(ws_with_files: Path) -> None:
    (ws_with_files / "corral.toml").write_text(WIDEN + DENY_A)
    with Sandbox.from_config(ws_with_files / "corral.toml") as sb:  # named: trusted, applied once
        assert refused(sb.call("read_file", {"path": "a.txt"})) == "path_denied"
        assert sb.call("delete_file", {"path": "b.txt"})["ok"]
