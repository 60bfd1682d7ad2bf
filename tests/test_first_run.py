"""What a new user meets first, each face saying what to do in its own terms: a
home folder as the workspace (the default history store inside the root), a
config `mcp-config` would hand to a client that cannot start, a misspelt section
in the workspace's corral.toml, undo's --force, read_before_write under the trust
boundary, approvals nobody can be asked for over MCP, and the HTTP face's session
and bind checks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession

from corral import Sandbox
from corral.config import ConfigError
from corral.faces.mcp_actions import Reply, Run
from corral.faces.mcp_core import McpSession
from corral.policy import Policy
from tests.helpers.calls import SECRET
from tests.helpers.cli_helpers import run
from tests.helpers.http_helpers import Server, post, start_http, stop
from tests.helpers.mcp_helpers import run_session, structured, write_config

TIMEOUT = 60


def corral(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["corral", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=TIMEOUT, check=False)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder used as the workspace: the default history store lies inside it."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("hi\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME")
    return home


# -- 1. the history store inside a root --------------------------------------------


def test_the_default_store_inside_the_workspace_turns_history_off_once(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A first run in the home folder works, without history, and says so once."""
    with caplog.at_level("WARNING", logger="corral"):
        with Sandbox(home) as sb:
            assert sb.call("write_file", {"path": "notes.txt", "content": "new\n"})["ok"]
            assert sb.history() == []
            off = sb.history_off
            assert off is not None and "[history] path" in off and str(home) in off
            refused = sb.undo("notes.txt")
            assert refused["error"]["code"] == "tool_disabled"
            assert off in refused["error"]["message"]
        with Sandbox(home):
            pass
    warnings = [r.getMessage() for r in caplog.records if "history is off" in r.getMessage()]
    assert len(warnings) == 1 and "[history] path" in warnings[0], warnings
    assert not (home / ".local").exists()  # nothing was made in the root
    outside = tmp_path / "op.toml"  # the fix the warning names works
    outside.write_text(f'[workspace]\nroot = "{home}"\n[history]\npath = "{tmp_path}/h"\n')
    with Sandbox.from_config(outside) as sb:
        assert sb.history_off is None
        assert sb.call("write_file", {"path": "notes.txt", "content": "again\n"})["ok"]
        assert sb.history("notes.txt")


def test_an_explicit_store_inside_the_workspace_stays_an_error(home: Path) -> None:
    from corral.config import HistoryOptions

    with pytest.raises(ConfigError, match=r"\[history\] path"):
        Sandbox(home, history=HistoryOptions(path=str(home / "store")))
    assert not (home / "store").exists()


def test_call_in_the_home_folder_runs_and_warns_in_one_line(home: Path) -> None:
    done = corral("call", "stat_file", '{"path": "notes.txt"}', cwd=home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("corral: history is off: the default history store ")
    assert "[history] path" in line and "--config" in line
    undo = corral("undo", "notes.txt", cwd=home)
    assert undo.returncode == 2 and undo.stdout == ""
    assert "history is off" in undo.stderr and len(undo.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("json_output", [False, True])
def test_doctor_reports_the_default_store_inside_the_workspace(
    capsys: pytest.CaptureFixture[str], home: Path, json_output: bool
) -> None:
    code, out, error = run(capsys, "doctor", "--workspace", str(home),
                           *(["--json"] if json_output else []))
    assert error == "" and code in (0, 1), error  # 1 only for a missing confinement layer
    if json_output:
        shown = json.loads(out)["history"]
    else:
        (shown,) = [line for line in out.splitlines() if line.startswith("history: ")]
        assert "policy in effect:" in out and f"a worker for {home} runs with:" in out
    assert "history is off: the default history store" in shown and "[history] path" in shown
    assert not (home / ".local").exists()


# -- 2. mcp-config checks what serve would refuse ----------------------------------------


@pytest.mark.parametrize("case", ["hostile", "unknown section", "store inside"])
def test_mcp_config_refuses_a_config_serve_would_refuse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, home: Path, case: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    argv = ["--workspace", str(ws)]
    if case == "hostile":
        (ws / "corral.toml").write_text('[tools]\ndelete_file = "allow"\n')
    elif case == "unknown section":
        argv += write_config(tmp_path, '[tenant]\nname = "x"\n')
    else:  # the operator's own store inside the root (the default one turns history off)
        inside = write_config(tmp_path, f'[history]\npath = "{home}/s"\n')
        argv = ["--workspace", str(home), *inside]
    tools = run(capsys, "tools", *argv)
    code, out, error = run(capsys, "mcp-config", *argv)
    assert code == 2 and out == "", (code, out)
    assert error == tools[2] and tools[0] == 2
    assert error.startswith("corral: error: ") and len(error.strip().splitlines()) == 1


# -- 3. a misspelt section or key in the workspace's corral.toml ---------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ('[tols]\nread_file = "allow"\n', "[tols]: unknown section; allowed: "),
    ('[policy]\ndefualt_action = "deny"\n', "[policy] defualt_action: unknown key; "),
])
def test_a_typo_in_the_workspace_config_gets_did_you_mean(
    capsys: pytest.CaptureFixture[str], workspace: Path, text: str, expected: str
) -> None:
    (workspace / "corral.toml").write_text(text)
    code, out, error = run(capsys, "tools", "--workspace", str(workspace))
    assert code == 2 and out == ""
    assert expected in error and "did you mean" in error, error
    assert "only the operator's config may set it" not in error


# -- 4. undo says --force on the command line, force=True in Python --------------------------


def test_undo_names_the_flag_of_the_face_it_runs_in(
    capsys: pytest.CaptureFixture[str], workspace: Path
) -> None:
    with Sandbox(workspace) as sb:
        assert sb.call("write_file", {"path": "hello.txt", "content": "corral\n"})["ok"]
    (workspace / "hello.txt").write_text("someone else\n")
    code, out, _ = run(capsys, "undo", "hello.txt", "--workspace", str(workspace))
    assert code == 1
    assert "--force" in out and "force=True" not in out, out
    with Sandbox(workspace) as sb:
        text = sb.undo("hello.txt")["text"]
    assert "force=True" in text and "--force" not in text
    assert (workspace / "hello.txt").read_text() == "someone else\n"


# -- 5. read_before_write across the trust boundary, and in doctor --------------------------


def test_read_before_write_is_a_narrowing_a_workspace_may_make(
    capsys: pytest.CaptureFixture[str], workspace: Path, tmp_path: Path
) -> None:
    (workspace / "corral.toml").write_text('[policy]\nread_before_write = "require"\n')
    code, out, _ = run(capsys, "doctor", "--workspace", str(workspace))
    assert code == 0
    assert "  read_before_write require\n" in out and "  hardlinks         allow\n" in out
    operator = write_config(tmp_path, '[policy]\nread_before_write = "require"\n')
    (workspace / "corral.toml").write_text('[policy]\nread_before_write = "off"\n')
    code, out, error = run(capsys, "doctor", "--workspace", str(workspace), *operator)
    assert code == 2 and out == ""
    assert "[policy] read_before_write = 'off': looser than the operator's 'require'" in error


# -- 6. an approval nobody can be asked for, over MCP ---------------------------------------


def test_stdio_client_without_elicitation_is_told_what_to_do(
    tmp_path: Path, workspace: Path
) -> None:
    extra = write_config(tmp_path, '[tools]\nwrite_file = "supervised"\n')
    messages: list[str] = []

    async def body(session: ClientSession) -> None:
        result = await session.call_tool("write_file", {"path": "x.txt", "content": "x"})
        messages.append(structured(result)["error"]["message"])

    run_session(workspace, body, extra=extra)
    (message,) = messages
    assert "nobody can be asked to approve it" in message
    assert "elicitation" in message and 'write_file = "allow" in [tools]' in message
    assert not (workspace / "x.txt").exists()


def session_answer(session: McpSession, message: dict[str, Any]) -> dict[str, Any]:
    actions = session.handle(message)
    while runs := [action for action in actions if isinstance(action, Run)]:
        (run,) = runs
        actions = session.submitted(run.call, run.sandbox.submit(run.request))
    (answer,) = [action.message for action in actions if isinstance(action, Reply)]
    return answer


def test_a_handshake_over_http_is_told_to_use_the_stateless_revision(workspace: Path) -> None:
    """What the HTTP face's handshake sessions are: no requests to the client."""
    policy = Policy({"write_file": "supervised"})
    session = McpSession(lambda approve: Sandbox(workspace, policy=policy, approve=approve),
                         can_ask=False)
    session_answer(session, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "t", "version": "1"}}})
    answer = session_answer(session, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                      "params": {"name": "write_file",
                                                 "arguments": {"path": "x", "content": "x"}}})
    error = answer["result"]["structuredContent"]["error"]
    assert error["code"] == "approval_required"
    assert "2026-07-28" in error["message"] and '[tools]' in error["message"]
    session.close()
    assert not (workspace / "x").exists()


# -- 7. the HTTP face: a missing session id is 400; a public bind warns ----------------------


def test_a_handshake_request_without_a_session_is_400(tmp_path: Path) -> None:
    process, warned, port = start_http(tmp_path, "127.0.0.1:0")
    try:
        assert warned == ""  # loopback: nothing to warn about
        server = Server(port, process, tmp_path / "ws", tmp_path / "ws")
        read = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "read_file", "arguments": {"path": "secret.txt"}}}
        status, _, body = post(server, read)
        assert status == 400
        answer = json.loads(body)
        assert answer["id"] == 7 and answer["error"]["code"] == -32600
        assert "mcp-session-id" in answer["error"]["message"]
        assert SECRET.encode() not in body
        status, _, body = post(server, {"jsonrpc": "2.0", "id": 8, "method": "ping"})
        assert status == 200 and json.loads(body)["result"] == {}
    finally:
        stop(process)


def test_a_non_loopback_bind_warns_that_it_is_plain_http(tmp_path: Path) -> None:
    process, warned, _ = start_http(tmp_path, "0.0.0.0:0")
    try:
        (line,) = warned.splitlines()
        assert line.startswith("corral: warning: 0.0.0.0 is not a loopback address")
        assert "plain HTTP" in line and "TLS" in line
    finally:
        stop(process)
