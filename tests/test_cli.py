"""The `corral` command: output and exit codes of doctor, call, tools, serve."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.faces.cli import main, missing_layers

REPO = Path(__file__).resolve().parent.parent
# What both OpenAI and Anthropic accept as a tool name.
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("corral: error: "), err
    return lines[0]


def test_call_prints_the_result(capsys: pytest.CaptureFixture[str], workspace: Path) -> None:
    code, out, err = run(
        capsys, "call", "read_file", '{"path": "hello.txt"}', "--workspace", str(workspace)
    )
    result = json.loads(out)
    assert code == 0 and err == ""
    assert result["ok"] is True and result["result"]["content"] == "hello\nworld\n"
    assert "meta" not in result


def test_call_reads_arguments_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO('{"path": "new.txt", "content": "x"}'))
    code, out, _ = run(capsys, "call", "write_file", "-", "--workspace", str(workspace))
    assert code == 0 and json.loads(out)["result"]["created"] is True
    assert (workspace / "new.txt").read_text() == "x"


def test_call_tool_error_exits_1(capsys: pytest.CaptureFixture[str], workspace: Path) -> None:
    code, out, _ = run(
        capsys,
        "call",
        "read_file",
        '{"path": "../outside/secret.txt"}',
        "--workspace",
        str(workspace),
    )
    assert code == 1 and json.loads(out)["error"]["code"] == "outside_workspace"
    code, out, _ = run(capsys, "call", "no_such_tool", "--workspace", str(workspace))
    assert code == 1 and json.loads(out)["error"]["code"] == "unknown_tool"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["call", "read_file", "{nope"], "not valid JSON"),
        (["call", "read_file", "[1]"], "must be a JSON object"),
        (["call", "read_file", "[" * 5000 + "]" * 5000], "nested too deeply"),
        (["call", "read_file", "{}", "--workspace", "/no/such/dir"], "/no/such/dir"),
        (["call", "read_file", "{}", "--config", "/no/such.toml"], "/no/such.toml"),
    ],
)
def test_misuse_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(workspace)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in one_error_line(err)


def test_serve_help_names_what_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    # the reader may have installed corral any way at all: no "clone" to run pip in
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "pip install uvicorn" in " ".join(out.split()) and "clone" not in out


def test_bad_config_names_the_key(capsys: pytest.CaptureFixture[str], workspace: Path) -> None:
    (workspace / "corral.toml").write_text('[tools]\nread_file = "sometimes"\n')
    code, _, err = run(capsys, "tools", "--workspace", str(workspace))
    assert code == 2 and "read_file" in one_error_line(err)


def test_config_is_discovered_in_the_workspace(
    capsys: pytest.CaptureFixture[str], workspace: Path
) -> None:
    (workspace / "corral.toml").write_text('[tools]\ngrep = "deny"\n')
    code, out, _ = run(capsys, "tools", "--workspace", str(workspace))
    assert code == 0 and "grep" not in {tool["name"] for tool in json.loads(out)}


def test_explicit_workspace_wins_over_the_config_root(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, workspace: Path
) -> None:
    config = tmp_path / "elsewhere.toml"
    config.write_text('[workspace]\nroot = "outside"\n[tools]\ngrep = "deny"\n')
    code, out, _ = run(
        capsys,
        "call",
        "read_file",
        '{"path": "hello.txt"}',
        "--config",
        str(config),
        "--workspace",
        str(workspace),
    )
    assert code == 0 and json.loads(out)["result"]["content"] == "hello\nworld\n"
    code, out, _ = run(
        capsys, "call", "read_file", '{"path": "secret.txt"}', "--config", str(config)
    )
    assert code == 0  # without --workspace, the file's root (tmp_path/outside) is used
    code, out, _ = run(capsys, "tools", "--config", str(config))
    assert "grep" not in {tool["name"] for tool in json.loads(out)}


def check_schema(schema: dict[str, Any]) -> None:
    assert schema["type"] == "object" and isinstance(schema["properties"], dict)
    assert set(schema.get("required", [])) <= set(schema["properties"])


def test_tools_formats(capsys: pytest.CaptureFixture[str], workspace: Path) -> None:
    specs = {}
    for fmt in ("mcp", "openai", "anthropic"):
        code, out, _ = run(capsys, "tools", "--format", fmt, "--workspace", str(workspace))
        assert code == 0
        specs[fmt] = json.loads(out)
    assert len(specs["mcp"]) == len(specs["openai"]) == len(specs["anthropic"]) >= 10
    for tool in specs["mcp"]:
        assert set(tool) == {"name", "title", "description", "inputSchema", "outputSchema",
                             "annotations"}
        check_schema(tool["inputSchema"])
    for tool in specs["openai"]:
        assert set(tool) == {"type", "function"} and tool["type"] == "function"
        function = tool["function"]
        assert set(function) == {"name", "description", "parameters"}
        assert TOOL_NAME.match(function["name"]) and function["description"]
        check_schema(function["parameters"])
    for tool in specs["anthropic"]:
        assert set(tool) == {"name", "description", "input_schema"}
        assert TOOL_NAME.match(tool["name"]) and tool["description"]
        check_schema(tool["input_schema"])
    names = [tool["name"] for tool in specs["anthropic"]]
    assert names == [tool["function"]["name"] for tool in specs["openai"]]
    assert "delete_file" not in names


@pytest.mark.parametrize("fmt", ["mcp", "openai", "openai-responses", "anthropic"])
def test_tools_strict(capsys: pytest.CaptureFixture[str], workspace: Path, fmt: str) -> None:
    code, out, _ = run(capsys, "tools", "--format", fmt, "--strict", "--workspace", str(workspace))
    assert code == 0
    for tool in json.loads(out):
        if tool == {"type": "apply_patch"}:  # the Responses API's native tool: no schema
            continue
        schema = (tool.get("inputSchema") or tool.get("input_schema") or tool.get("parameters")
                  or tool["function"]["parameters"])
        assert schema["required"] == list(schema["properties"])
        assert '"default":' not in json.dumps(schema)  # said in the description instead
        if fmt != "mcp":
            assert (tool.get("strict") or tool["function"]["strict"]) is True


def test_doctor(capsys: pytest.CaptureFixture[str], workspace: Path) -> None:
    """On this kernel (Landlock, seccomp, openat2) a worker gets every layer."""
    code, out, _ = run(capsys, "doctor", "--workspace", str(workspace))
    assert "the kernel offers" in out and "landlock_abi" in out and str(workspace) in out
    assert code == 0, out
    code, out, _ = run(capsys, "doctor", "--json", "--workspace", str(workspace))
    report = json.loads(out)
    assert code == 0 and report["missing"] == []
    assert report["kernel"]["landlock_abi"] >= 1 and report["worker"]["seccomp"] is True


def test_missing_layers() -> None:
    kernel = {"landlock_abi": 7, "seccomp": True, "openat2": True, "no_new_privs": False}
    worker = {
        "level": "partial",
        "landlock_abi": None,
        "seccomp": True,
        "openat2": True,
        "no_new_privs": False,
    }
    assert missing_layers(kernel, worker) == ["landlock"]
    assert missing_layers(kernel, dict(worker, landlock_abi=7)) == []


def test_help_for_every_command() -> None:
    for argv in ([], ["doctor"], ["call"], ["tools"], ["serve"]):
        proc = subprocess.run(
            [sys.executable, "-m", "corral", *argv, "--help"],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        assert proc.returncode == 0 and "usage: corral" in proc.stdout


def test_no_command_is_misuse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2 and "usage" in capsys.readouterr().err


def test_a_command_builds_only_its_own_parser() -> None:
    from corral.faces.cli import COMMANDS, build_parser

    def commands(parser: argparse.ArgumentParser) -> list[str]:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return list(action.choices)

    assert commands(build_parser()) == list(COMMANDS) == commands(build_parser("--help"))
    assert commands(build_parser("call")) == ["call"]
    assert commands(build_parser("undo")) == ["history", "checkpoint", "diff", "undo", "rewind"]


@pytest.mark.parametrize("columns", [None, "50", "0", "wide"])
def test_the_help_is_as_wide_as_argparse_would_make_it(
    monkeypatch: pytest.MonkeyPatch, columns: str | None,
) -> None:
    import shutil

    from corral.faces.cli import help_width

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert help_width() == shutil.get_terminal_size().columns - 2
