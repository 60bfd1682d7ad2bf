"""sb.tools(format=..., strict=...) in Python is what `corral tools --format ...
[--strict]` prints; `corral mcp-config --client codex` is Codex's config.toml table."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from corral import AsyncSandbox, Sandbox
from corral.faces.cli import main
from corral.tools.formats import FORMATS


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_specs_in_python_are_what_the_cli_prints(
    capsys: pytest.CaptureFixture[str], workspace: Path, fmt: str, strict: bool
) -> None:
    argv = ["tools", "--format", fmt, "--workspace", str(workspace)]
    assert main(argv + (["--strict"] if strict else [])) == 0
    printed = json.loads(capsys.readouterr().out)
    with Sandbox(workspace) as sb:
        assert sb.tools(format=fmt, strict=strict) == printed


def test_async_sandbox_gives_the_same_specs_without_await(workspace: Path) -> None:
    async def specs() -> list[dict[str, object]]:
        async with AsyncSandbox(workspace) as sb:
            return sb.tools(format="openai", strict=True)

    with Sandbox(workspace) as sb:
        assert asyncio.run(specs()) == sb.tools(format="openai", strict=True)


def test_an_unknown_format_is_refused_by_name(workspace: Path) -> None:
    with Sandbox(workspace) as sb, pytest.raises(ValueError, match="openai-responses"):
        sb.tools(format="gemini")


def test_without_a_format_the_specs_are_corrals_own(workspace: Path) -> None:
    with Sandbox(workspace) as sb:
        plain, strict = sb.tools(), sb.tools(strict=True)
    assert "input_schema" in plain[0] and plain[0].keys() == strict[0].keys()
    read = next(spec for spec in strict if spec["name"] == "read_file")["input_schema"]
    assert read["required"] == list(read["properties"])


def test_mcp_config_for_codex_is_a_toml_table_naming_the_same_server(
    workspace: Path, tmp_path: Path
) -> None:
    argv = [sys.executable, "-m", "corral", "mcp-config", "--workspace", str(workspace)]
    codex = subprocess.run([*argv, "--client", "codex"], capture_output=True, text=True,
                           check=True, timeout=60)
    claude = subprocess.run([*argv, "--client", "claude"], capture_output=True, text=True,
                            check=True, timeout=60)
    server = tomllib.loads(codex.stdout)["mcp_servers"]["corral"]
    assert server == json.loads(claude.stdout)["mcpServers"]["corral"]
    assert server["command"] == sys.executable
    assert "config.toml" in codex.stderr
