"""The `corral` command as a person meets it: on a terminal (a real pty) and in a
pipe, with the exit codes of each case."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import corral
from corral import Sandbox
from corral.config import load_config
from corral.config_keys import TOOL_NAMES
from corral.faces.cli import verdict
from corral.policy import Policy
from tests.helpers.terminal import CORRAL, TIMEOUT, on_terminal_stdin, on_terminal_stdout


def corral_cmd(*argv: str, cwd: Path | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    """The command with every stream a pipe (what a program sees)."""
    return subprocess.run(
        [*CORRAL, *argv], input=stdin, capture_output=True, text=True, cwd=cwd,
        timeout=TIMEOUT, check=False,
    )


def operator_config(tmp_path: Path, text: str) -> str:
    """A config file outside the workspace (what an operator passes with --config)."""
    path = tmp_path / "operator.toml"
    path.write_text(text)
    return str(path)


# -- version -------------------------------------------------------------------


def test_version() -> None:
    done = corral_cmd("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"corral {corral.__version__}"
    assert corral.__version__ == version("corral")


# -- call: text on a terminal, JSON in a pipe ---------------------------------------


def test_call_on_a_terminal_prints_the_text(workspace: Path) -> None:
    code, out, err = on_terminal_stdout(
        "call", "read_file", '{"path": "hello.txt"}', "--workspace", str(workspace)
    )
    assert code == 0 and err == ""
    assert out == "     1\thello\n     2\tworld\n"


def test_call_on_a_terminal_reports_a_failure_as_code_and_message(workspace: Path) -> None:
    code, out, err = on_terminal_stdout(
        "call", "read_file", '{"path": "../outside/secret.txt"}', "--workspace", str(workspace)
    )
    assert code == 1 and out == ""
    assert err == (
        "outside_workspace: cannot read ../outside/secret.txt: path escapes the workspace roots.\n"
    )


def test_json_forced_on_a_terminal(workspace: Path) -> None:
    code, out, _ = on_terminal_stdout(
        "call", "stat_file", '{"path": "hello.txt"}', "--json", "--workspace", str(workspace)
    )
    assert code == 0 and json.loads(out)["result"]["size"] == 12


def test_call_in_a_pipe_prints_json_and_text_on_request(workspace: Path) -> None:
    piped = corral_cmd("call", "read_file", '{"path": "hello.txt"}', "--workspace", str(workspace))
    assert piped.returncode == 0
    assert json.loads(piped.stdout)["result"]["content"] == "hello\nworld\n"
    text = corral_cmd(
        "call", "read_file", '{"path": "nope.txt"}', "--text", "--workspace", str(workspace)
    )
    assert text.returncode == 1 and text.stdout == ""
    assert text.stderr == "not_found: cannot read nope.txt: no such file or directory.\n"


def test_text_and_json_are_exclusive(workspace: Path) -> None:
    done = corral_cmd("call", "stat_file", "{}", "--text", "--json")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr


def test_call_help_lists_every_tool() -> None:
    done = corral_cmd("call", "--help")
    assert done.returncode == 0
    listed = done.stdout.split("tools:")[1].split("example:")[0]
    assert {name.strip(" ,\n") for name in listed.split(",")} == set(TOOL_NAMES)


# -- did you mean ---------------------------------------------------------------------


def test_unknown_tool_suggests_the_closest(workspace: Path) -> None:
    done = corral_cmd("call", "read_fil", "{}", "--text", "--workspace", str(workspace))
    assert done.returncode == 1
    assert done.stderr == (
        "unknown_tool: there is no tool named 'read_fil'; did you mean 'read_file'?\n"
    )
    far = corral_cmd("call", "launch_rockets", "{}", "--text", "--workspace", str(workspace))
    assert far.stderr == "unknown_tool: there is no tool named 'launch_rockets'.\n"


def test_unknown_argument_suggests_the_closest(sb: Sandbox) -> None:
    error = sb.call("read_file", {"pth": "hello.txt"})["error"]
    nested = sb.call("edit_file", {"path": "a", "edits": [{"old_strin": "a"}]})["error"]
    assert error == {
        "code": "invalid_arguments", "message": "unknown argument 'pth'; did you mean 'path'?"
    }
    assert "did you mean 'old_string'?" in nested["message"]


def test_unknown_config_key_suggests_the_closest(workspace: Path, tmp_path: Path) -> None:
    config = operator_config(tmp_path, "[limits]\nmax_reed_bytes = 1\n")
    done = corral_cmd("call", "stat_file", "{}", "--config", config, "--workspace", str(workspace))
    assert done.returncode == 2
    assert done.stderr.startswith("corral: error: ") and done.stderr.count("\n") == 1
    assert "[limits] max_reed_bytes: unknown key" in done.stderr
    assert done.stderr.rstrip().endswith("did you mean 'max_read_bytes'?")
    for text, hint in [
        ("[limit]\n", "did you mean 'limits'?"),
        ('[tools]\nwrite_file = "alow"\n', "did you mean 'allow'?"),
        ('[tools]\nwrite_fil = "deny"\n', "did you mean 'write_file'?"),
    ]:
        with pytest.raises(ValueError, match=hint.replace("?", r"\?")):
            load_config(operator_config(tmp_path, text))


def test_misspelt_command_and_choice_suggest_the_closest() -> None:
    command = corral_cmd("doctr")
    assert command.returncode == 2
    assert command.stderr.rstrip().endswith("did you mean 'doctor'?")
    choice = corral_cmd("mcp-config", "--client", "vscod")
    assert choice.returncode == 2
    assert choice.stderr.rstrip().endswith("did you mean 'vscode'?")
    far = corral_cmd("zzz")
    assert far.returncode == 2 and "did you mean" not in far.stderr


# -- tools that are off say how to turn them on --------------------------------------------


def test_tool_disabled_names_the_setting(workspace: Path, tmp_path: Path) -> None:
    off = corral_cmd("call", "delete_file", '{"path": "hello.txt"}', "--text",
                     "--workspace", str(workspace))
    assert off.returncode == 1
    assert off.stderr == (
        "tool_disabled: the tool delete_file is off by default; enable it with "
        'delete_file = "allow" (or "supervised") in [tools].\n'
    )
    config = operator_config(tmp_path, '[tools]\ngrep = "deny"\n')
    denied = corral_cmd("call", "grep", '{"pattern": "x"}', "--text", "--config", config,
                        "--workspace", str(workspace))
    assert denied.returncode == 1
    assert 'grep = "deny" in [tools]' in denied.stderr
    assert 'set grep = "allow" there to enable it' in denied.stderr
    assert (workspace / "hello.txt").exists()


def test_read_only_workspace_says_why(workspace: Path) -> None:
    with Sandbox(workspace, policy=Policy(read_only=True)) as sb:
        error = sb.call("write_file", {"path": "hello.txt", "content": "x"})["error"]
    assert error == {
        "code": "tool_disabled",
        "message": "the tool write_file writes and this workspace is read-only "
        "([workspace] read_only = true).",
    }
    assert (workspace / "hello.txt").read_text() == "hello\nworld\n"


# -- approvals ------------------------------------------------------------------------------

SUPERVISED = '[tools]\nwrite_file = "supervised"\n'
WRITE = '{"path": "new.txt", "content": "hi"}'


def test_supervised_call_in_a_pipe_says_what_to_do(workspace: Path, tmp_path: Path) -> None:
    config = operator_config(tmp_path, SUPERVISED)
    done = corral_cmd("call", "write_file", WRITE, "--config", config,
                      "--workspace", str(workspace))
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "approval_required"
    assert error["message"] == (
        'the tool write_file needs approval: run with --yes, or set write_file = "allow" '
        "in [tools]."
    )
    assert "callback" not in done.stdout
    assert not (workspace / "new.txt").exists()


def test_yes_approves(workspace: Path, tmp_path: Path) -> None:
    config = operator_config(tmp_path, SUPERVISED)
    done = corral_cmd("call", "write_file", WRITE, "--yes", "--config", config,
                      "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    assert (workspace / "new.txt").read_text() == "hi"


@pytest.mark.parametrize(("typed", "written"), [(b"y\n", True), (b"n\n", False), (b"\n", False)])
def test_a_terminal_is_asked(workspace: Path, tmp_path: Path, typed: bytes, written: bool) -> None:
    config = operator_config(tmp_path, SUPERVISED)
    code, out, err = on_terminal_stdin("call", "write_file", WRITE, "--config", config,
                                       "--workspace", str(workspace), typed=typed)
    assert "corral: write_file on new.txt needs your approval" in err
    assert err.rstrip().endswith("Allow? [y/N]")
    assert (workspace / "new.txt").exists() is written
    assert code == (0 if written else 1)
    if not written:
        assert json.loads(out)["error"]["code"] == "approval_denied"


def test_supervised_path_rule_in_a_pipe(workspace: Path, tmp_path: Path) -> None:
    config = operator_config(
        tmp_path, '[[rules]]\nname = "review"\naction = "supervised"\npaths = ["*.txt"]\n'
    )
    done = corral_cmd("call", "read_file", '{"path": "hello.txt"}', "--text", "--config",
                      config, "--workspace", str(workspace))
    assert done.returncode == 1
    assert done.stderr == (
        "approval_required: hello.txt needs approval under policy rule 'review': run with --yes.\n"
    )


def test_api_approval_message_names_the_fix(workspace: Path) -> None:
    with Sandbox(workspace, policy=Policy(tool_modes={"write_file": "supervised"})) as sb:
        error = sb.call("write_file", {"path": "a.txt", "content": ""})["error"]
    assert error["message"] == (
        "the tool write_file needs approval and nothing here can ask for it; "
        'set write_file = "allow" in [tools] to run it without asking.'
    )


# -- serve ---------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [[], ["--jsonl"]])
def test_serve_on_a_terminal_says_it_is_waiting(workspace: Path, protocol: list[str]) -> None:
    code, out, err = on_terminal_stdin("serve", *protocol, "--workspace", str(workspace),
                                       typed=b"\x04")
    assert code == 0 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("corral: serving ") and "Ctrl-D" in line


def test_serve_in_a_pipe_prints_no_banner(workspace: Path) -> None:
    done = corral_cmd("serve", "--jsonl", "--workspace", str(workspace),
                      stdin='{"id": 1, "tool": "stat_file", "arguments": {"path": "."}}\n')
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout)["id"] == 1


# -- mcp-config ------------------------------------------------------------------------------


def test_mcp_config_starts_a_working_server(workspace: Path, tmp_path: Path) -> None:
    done = corral_cmd("mcp-config", "--workspace", "ws", cwd=tmp_path)
    assert done.returncode == 0
    server = json.loads(done.stdout)["mcpServers"]["corral"]
    assert server["command"] == sys.executable
    assert server["args"] == ["-m", "corral", "serve", "--workspace", str(workspace)]
    seen: dict[str, object] = {}

    async def main() -> None:
        # As a client does: an empty environment, no virtualenv on PATH, another directory.
        params = StdioServerParameters(
            command=server["command"], args=server["args"], env={}, cwd="/"
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("read_file", {"path": "hello.txt"})
            seen["read"] = result.structured_content

    anyio.run(main)
    assert seen["read"]["content"] == "hello\nworld\n"  # type: ignore[index]


def test_mcp_config_clients(workspace: Path, tmp_path: Path) -> None:
    config = operator_config(tmp_path, "")
    argv = ["--workspace", str(workspace), "--config", config]
    expected = [sys.executable, "-m", "corral", "serve", "--workspace", str(workspace),
                "--config", config]
    claude = corral_cmd("mcp-config", "--client", "claude", *argv)
    assert claude.returncode == 0
    assert json.loads(claude.stdout)["mcpServers"]["corral"] == {
        "command": sys.executable, "args": expected[1:]
    }
    assert claude.stderr.splitlines()[-1].split() == [
        "claude", "mcp", "add", "corral", "--", *expected
    ]
    cursor = corral_cmd("mcp-config", "--client", "cursor", *argv)
    assert json.loads(cursor.stdout)["mcpServers"]["corral"]["args"] == expected[1:]
    assert "mcp.json" in cursor.stderr
    vscode = json.loads(corral_cmd("mcp-config", "--client", "vscode", *argv).stdout)
    assert vscode["servers"]["corral"] == {
        "type": "stdio", "command": sys.executable, "args": expected[1:]
    }
    wrong = corral_cmd("mcp-config", "--client", "emacs")
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr
    missing = corral_cmd("mcp-config", "--workspace", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "is not a directory" in missing.stderr


def test_mcp_config_with_a_config_alone_serves_the_configs_workspace(
    workspace: Path, tmp_path: Path
) -> None:
    """--config without --workspace: the printed server serves the config's own
    [workspace] root, as `serve --config` does, not the directory mcp-config ran in."""
    config = operator_config(tmp_path, f'[workspace]\nroot = "{workspace}"\n')
    done = corral_cmd("mcp-config", "--config", config, cwd=Path("/"))
    assert done.returncode == 0, done.stderr
    args = json.loads(done.stdout)["mcpServers"]["corral"]["args"]
    assert args == ["-m", "corral", "serve", "--config", config]
    served = subprocess.run(
        [sys.executable, *args[:-3], "call", "--json", "--config", config,
         "read_file", '{"path": "hello.txt"}'],
        capture_output=True, text=True, cwd="/", timeout=TIMEOUT, check=False,
    )
    assert json.loads(served.stdout)["result"]["content"] == "hello\nworld\n"


# -- doctor -------------------------------------------------------------------------------------


def test_doctor_verdict_first_then_config_and_policy(workspace: Path, tmp_path: Path) -> None:
    config = operator_config(
        tmp_path,
        '[tools]\nwrite_file = "supervised"\n'
        '[[rules]]\nname = "no-dist"\naction = "deny"\npaths = ["dist/**"]\n',
    )
    done = corral_cmd("doctor", "--config", config, "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ok: workers are confined by Landlock ABI ")
    assert lines[1] == f"config: {config}"
    assert f"  workspace         {workspace} (rw)" in lines
    assert "  tools supervised  write_file" in lines
    assert "  rule              no-dist: deny dist/**" in lines
    data = json.loads(corral_cmd("doctor", "--json", "--config", config,
                                 "--workspace", str(workspace)).stdout)
    assert data["verdict"] == lines[0] and data["config"] == config
    assert data["policy"]["tool_modes"] == {"write_file": "supervised"}
    bare = corral_cmd("doctor", "--workspace", str(workspace))
    assert bare.stdout.splitlines()[1] == "config: none (the built-in defaults)"


def test_verdicts() -> None:
    full = {"landlock_abi": 7, "seccomp": True, "no_new_privs": True, "openat2": True,
            "rlimits": True, "level": "full"}
    assert verdict(full, []) == (
        "ok: workers are confined by Landlock ABI 7, seccomp, no_new_privs, openat2, rlimits"
    )
    old = {**full, "landlock_abi": 0, "openat2": False, "level": "partial"}
    assert verdict(old, []) == (
        "partly confined: workers run with seccomp, no_new_privs, rlimits; "
        "this kernel lacks landlock, openat2"
    )
    assert verdict(old, ["landlock"]).startswith("warning: workers lack landlock")
    none = dict.fromkeys(full, False) | {"landlock_abi": 0, "level": "none"}
    assert verdict(none, []).startswith("not confined")
