"""Policy, config, approvals and audit end to end, through Sandbox on the real
file system: decisions are made on resolved paths, whatever the caller names."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import ConfigError, Limits
from corral.config_keys import TOOL_NAMES
from corral.policy import Policy, RootSpec, Rule
from corral.tools.registry import TOOLS

MARKER = "CONTENT-MARKER-5d1e0b7a"  # must never reach the audit log
ENV_SECRET = "ENV-SECRET-91c4"


@pytest.fixture
def secrets_ws(workspace: Path) -> Path:
    (workspace / ".env").write_text(f"TOKEN={ENV_SECRET}\n")
    (workspace / "notes.txt").symlink_to(".env")
    (workspace / "deep").mkdir()
    (workspace / "deep" / "link").symlink_to("../.env")
    hooks = workspace / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("print('app')\n")
    (workspace / "alias.py").symlink_to("src/app.py")
    return workspace


@pytest.fixture
def sandbox(secrets_ws: Path) -> Iterator[Sandbox]:
    with Sandbox(secrets_ws) as sb:
        yield sb


def code(result: dict[str, Any]) -> str | None:
    return None if result["ok"] else result["error"]["code"]


# -- decisions on resolved paths ----------------------------------------------


@pytest.mark.parametrize("path", [".env", "notes.txt", "deep/link", "./deep/../notes.txt"])
def test_symlinks_into_a_denied_file_are_denied_like_it(sandbox: Sandbox, path: str) -> None:
    for tool, args in [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "x"}),
        ("append_file", {"path": path, "content": "x"}),
        ("edit_file", {"path": path, "old_string": "TOKEN", "new_string": "T"}),
        ("copy_file", {"source": path, "destination": "copy.txt"}),
    ]:
        result = sandbox.call(tool, args)
        assert code(result) == "path_denied", (tool, result)
        assert result["error"]["rule"] == "block-dotenv"
        assert ENV_SECRET not in json.dumps(result)


def test_denied_file_is_untouched_and_never_found(sandbox: Sandbox, secrets_ws: Path) -> None:
    assert code(sandbox.call("stat_file", {"path": ".env"})) == "path_denied"
    sandbox.call("write_file", {"path": "notes.txt", "content": "overwritten"})
    assert (secrets_ws / ".env").read_text() == f"TOKEN={ENV_SECRET}\n"
    for tool, args in [("grep", {"pattern": "TOKEN"}), ("search_files", {"pattern": "**"}),
                       ("list_directory", {"recursive": True}),
                       ("read_multiple_files", {"paths": ["notes.txt", ".env", "hello.txt"]})]:
        assert ENV_SECRET not in json.dumps(sandbox.call(tool, args)), tool


def test_git_writes_denied_reads_allowed(sandbox: Sandbox, secrets_ws: Path) -> None:
    for tool, args in [
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}),
        ("write_file", {"path": ".git/config", "content": "[core]\nfsmonitor = evil\n"}),
        ("append_file", {"path": ".git/config", "content": "x"}),
        ("create_directory", {"path": ".git/hooks/x"}),
        ("copy_file", {"source": "hello.txt", "destination": ".git/hooks/post-checkout"}),
        ("move_file", {"source": "hello.txt", "destination": ".git/hooks/pre-push"}),
    ]:
        result = sandbox.call(tool, args)
        assert code(result) == "path_denied", (tool, result)
        assert result["error"]["rule"] == "block-git-writes"
    assert list((secrets_ws / ".git" / "hooks").iterdir()) == []
    assert (secrets_ws / ".git" / "config").read_text() == "[core]\n"
    assert (secrets_ws / "hello.txt").exists()
    assert sandbox.call("read_file", {"path": ".git/config"})["ok"]


def test_a_symlink_into_git_cannot_be_written_through(sandbox: Sandbox, secrets_ws: Path) -> None:
    (secrets_ws / "hook").symlink_to(".git/hooks/pre-commit")
    result = sandbox.call("write_file", {"path": "hook", "content": "#!/bin/sh\nevil\n"})
    assert code(result) == "path_denied"
    assert not (secrets_ws / ".git" / "hooks" / "pre-commit").exists()


def test_ro_root_written_by_absolute_path_is_read_only(secrets_ws: Path, outside: Path) -> None:
    with Sandbox(secrets_ws, allowed_paths=[RootSpec(str(outside), "ro")]) as sb:
        target = str(outside / "new.txt")
        assert code(sb.call("write_file", {"path": target, "content": "x"})) == "read_only"
        assert code(sb.call("create_directory", {"path": str(outside / "d")})) == "read_only"
        moved = sb.call("move_file", {"source": str(outside / "secret.txt"),
                                      "destination": "stolen.txt"})
        assert code(moved) == "read_only"
        assert sb.call("read_file", {"path": str(outside / "secret.txt")})["ok"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_user_rules_and_default_action(secrets_ws: Path) -> None:
    policy = Policy(
        rules=(Rule("no-src-writes", "deny", ("write_file", "edit_file"), ("src/**",)),),
        default_action="deny",
    )
    (secrets_ws / "README.md").write_text("readme\n")
    policy = Policy(
        rules=(*policy.rules, Rule("docs", "allow", ("*",), ("*.md", "src/**", "."))),
        default_action="deny",
    )
    with Sandbox(secrets_ws, policy=policy) as sb:
        assert sb.call("read_file", {"path": "alias.py"})["ok"]  # resolves to src/app.py
        denied = sb.call("write_file", {"path": "alias.py", "content": "x"})
        assert denied["error"]["rule"] == "no-src-writes"
        assert sb.call("read_file", {"path": "README.md"})["ok"]
        default = sb.call("read_file", {"path": "hello.txt"})
        assert code(default) == "path_denied" and "rule" not in default["error"]


def test_path_regex_whitelist(secrets_ws: Path) -> None:
    with Sandbox(secrets_ws, policy=Policy(path_regex=(r"\.py$",))) as sb:
        assert sb.call("read_file", {"path": "src/app.py"})["ok"]
        assert sb.call("read_file", {"path": "alias.py"})["ok"]
        miss = sb.call("read_file", {"path": "hello.txt"})
        assert (code(miss), miss["error"]["rule"]) == ("path_denied", "path-regex")


def test_builtin_overridden_by_a_rule_of_the_same_name(secrets_ws: Path) -> None:
    (secrets_ws / ".env.example").write_text("TOKEN=changeme\n")
    policy = Policy(rules=(Rule("block-dotenv", "deny", ("*",), ("**/.env",)),))
    with Sandbox(secrets_ws, policy=policy) as sb:
        assert sb.call("read_file", {"path": ".env.example"})["ok"]
        assert code(sb.call("read_file", {"path": "notes.txt"})) == "path_denied"


# -- tool discovery -------------------------------------------------------------


def names(sb: Sandbox) -> set[str]:
    return {spec["name"] for spec in sb.tools()}


def test_contract_tool_names_match_the_registry() -> None:
    assert set(TOOL_NAMES) == set(TOOLS)


def test_tools_hides_denied_tools_and_calls_fail_tool_disabled(secrets_ws: Path) -> None:
    with Sandbox(secrets_ws) as sb:
        assert names(sb) == set(TOOL_NAMES) - {"delete_file", "delete_directory"}
        assert code(sb.call("delete_file", {"path": "hello.txt"})) == "tool_disabled"
    assert (secrets_ws / "hello.txt").exists()
    with Sandbox(secrets_ws, policy=Policy({"delete_file": "allow", "grep": "deny"})) as sb:
        assert names(sb) == set(TOOL_NAMES) - {"grep", "delete_directory"}
        assert code(sb.call("grep", {"pattern": "x"})) == "tool_disabled"
        assert sb.call("delete_file", {"path": "hello.txt"})["ok"]


def test_read_only_hides_every_writer(secrets_ws: Path) -> None:
    policy = Policy({"delete_file": "allow", "write_file": "allow"}, read_only=True)
    with Sandbox(secrets_ws, policy=policy) as sb:
        writers = {name for name, tool in TOOLS.items() if tool.writes}
        assert names(sb) == set(TOOL_NAMES) - writers
        assert {"write_file", "edit_file", "append_file", "delete_file"} <= writers
        for name in writers:
            assert code(sb.call(name, {})) == "tool_disabled", name
        assert sb.roots[0].mode == "ro"


# -- approvals ------------------------------------------------------------------


class Approver:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> bool:
        self.requests.append(request)
        return self.answer


SUPERVISED_TOOL = Policy({"write_file": "supervised"})
SUPERVISED_RULE = Policy(rules=(Rule("ask-src", "supervised", ("*",), ("src/**",)),))


@pytest.mark.parametrize("policy", [SUPERVISED_TOOL, SUPERVISED_RULE], ids=["tool", "rule"])
def test_no_callback_means_approval_required(secrets_ws: Path, policy: Policy) -> None:
    with Sandbox(secrets_ws, policy=policy) as sb:
        result = sb.call("write_file", {"path": "alias.py", "content": "changed\n"})
    assert code(result) == "approval_required"
    assert (secrets_ws / "src" / "app.py").read_text() == "print('app')\n"


@pytest.mark.parametrize("policy", [SUPERVISED_TOOL, SUPERVISED_RULE], ids=["tool", "rule"])
def test_refusal_means_approval_denied(secrets_ws: Path, policy: Policy) -> None:
    approver = Approver(False)
    with Sandbox(secrets_ws, policy=policy, approve=approver) as sb:
        result = sb.call("write_file", {"path": "alias.py", "content": "changed\n"})
    assert code(result) == "approval_denied"
    assert len(approver.requests) == 1
    assert (secrets_ws / "src" / "app.py").read_text() == "print('app')\n"


@pytest.mark.parametrize("policy", [SUPERVISED_TOOL, SUPERVISED_RULE], ids=["tool", "rule"])
def test_approval_runs_the_call(secrets_ws: Path, policy: Policy) -> None:
    approver = Approver(True)
    with Sandbox(secrets_ws, policy=policy, approve=approver) as sb:
        result = sb.call("write_file", {"path": "alias.py", "content": "changed\n"})
    assert result["ok"], result
    assert (secrets_ws / "src" / "app.py").read_text() == "changed\n"
    (request,) = approver.requests
    assert request["tool"] == "write_file"
    assert request["arguments"]["path"] == "alias.py"
    assert request["paths"] == ["alias.py"]


def test_rule_approval_names_the_resolved_path_and_rule(secrets_ws: Path) -> None:
    approver = Approver(True)
    with Sandbox(secrets_ws, policy=SUPERVISED_RULE, approve=approver) as sb:
        assert sb.call("read_file", {"path": "alias.py"})["ok"]
        assert sb.call("read_file", {"path": "hello.txt"})["ok"]  # not supervised: no ask
    (request,) = approver.requests
    assert request["resolved"] == [str(secrets_ws / "src" / "app.py")]
    assert request["rules"] == ["ask-src"]


def test_rule_supervision_without_callback_names_the_rule(secrets_ws: Path) -> None:
    with Sandbox(secrets_ws, policy=SUPERVISED_RULE) as sb:
        result = sb.call("read_file", {"path": "src/app.py"})
    assert (code(result), result["error"].get("rule")) == ("approval_required", "ask-src")


# -- config end to end ----------------------------------------------------------

CONFIG = """
[workspace]
allowed_paths = [{{ path = "{outside}", mode = "ro" }}]

[tools]
delete_file = "allow"
write_file = "supervised"

[[rules]]
name = "no-build-output"
action = "deny"
tools = ["write_file", "edit_file", "append_file"]
paths = ["dist/**"]

[limits]
max_read_bytes = 64
max_write_bytes = 32
max_file_bytes = 4096
max_list_entries = 3

[audit]
path = "../audit.jsonl"
"""


@pytest.fixture
def configured(secrets_ws: Path, outside: Path) -> Path:
    path = secrets_ws / "corral.toml"
    path.write_text(CONFIG.format(outside=outside))
    return path


def test_from_config_applies_every_section(
    configured: Path, secrets_ws: Path, outside: Path
) -> None:
    with Sandbox.from_config(configured, approve=Approver(True)) as sb:
        assert sb.roots == (RootSpec(str(secrets_ws), "rw"), RootSpec(str(outside), "ro"))
        assert "delete_file" in names(sb)
        assert sb.call("append_file", {"path": "dist/a.js", "content": "x"})["error"]["rule"] \
            == "no-build-output"
        assert code(sb.call("write_file", {"path": str(outside / "x"), "content": "x"})) \
            == "read_only"
    assert (secrets_ws.parent / "audit.jsonl").exists()


def test_from_config_keyword_arguments_win(configured: Path, secrets_ws: Path) -> None:
    with Sandbox.from_config(configured, limits=Limits(max_write_bytes=4)) as sb:
        result = sb.call("append_file", {"path": "a.txt", "content": "12345"})
        assert code(result) == "too_large"
        # No approve= here: the file's supervised write_file needs one.
        assert code(sb.call("write_file", {"path": "b", "content": "x"})) == "approval_required"


def test_limits_from_config_are_honoured(configured: Path, secrets_ws: Path) -> None:
    (secrets_ws / "big.txt").write_text("line\n" * 100)  # 500 bytes
    (secrets_ws / "huge.txt").write_text("x" * 5000)
    with Sandbox.from_config(configured, approve=Approver(True)) as sb:
        read = sb.call("read_file", {"path": "big.txt"})
        assert read["result"]["truncated"] and len(read["result"]["content"]) <= 64
        assert sb.call("read_file", {"path": "huge.txt"})["result"]["start_byte"] == 0  # a window
        too_long = sb.call("write_file", {"path": "w.txt", "content": "x" * 33})
        assert code(too_long) == "too_large" and "33" in too_long["error"]["message"]
        assert sb.call("write_file", {"path": "w.txt", "content": "x" * 32})["ok"]
        listing = sb.call("list_directory", {"path": "."})
        assert listing["result"]["truncated"] and listing["result"]["count"] == 3
        edit = {"path": "w.txt", "old_string": "x", "new_string": "xx", "replace_all": True}
        assert code(sb.call("edit_file", edit)) == "too_large"
        assert code(sb.call("append_file", {"path": "w.txt", "content": "y" * 33})) == "too_large"
        assert code(sb.call("copy_file", {"source": "huge.txt", "destination": "c"})) == "too_large"
        (many,) = sb.call("read_multiple_files", {"paths": ["huge.txt"]})["result"]["files"]
        assert many["ok"] and many["start_byte"] == 0 and len(many["content"]) <= 64
    assert (secrets_ws / "w.txt").read_text() == "x" * 32


def test_config_file_and_audit_log_cannot_be_rewritten(secrets_ws: Path) -> None:
    (secrets_ws / "corral.toml").write_text('[audit]\npath = "logs/audit.jsonl"\n')
    (secrets_ws / "logs").mkdir()
    with Sandbox.from_config(secrets_ws / "corral.toml") as sb:
        for path in ("corral.toml", "logs/audit.jsonl"):
            result = sb.call("write_file", {"path": path, "content": "[tools]\n"})
            assert result["error"]["rule"] == "protect-corral-files", result
        assert sb.call("read_file", {"path": "corral.toml"})["ok"]


def test_from_config_errors_are_config_errors(secrets_ws: Path) -> None:
    (secrets_ws / "corral.toml").write_text("[tools]\nwrite_file = 'sometimes'\n")
    with pytest.raises(ConfigError, match=r"corral\.toml: \[tools\] write_file: expected one of"):
        Sandbox.from_config(secrets_ws / "corral.toml")


@pytest.mark.parametrize("root", ["/proc", "/etc", "/"])
def test_system_paths_are_never_roots(secrets_ws: Path, root: str) -> None:
    with pytest.raises(ConfigError, match="not allowed"):
        Sandbox(root)
    with pytest.raises(ConfigError, match="not allowed"):
        Sandbox(secrets_ws, allowed_paths=[RootSpec(root, "ro")])


# -- audit end to end -----------------------------------------------------------


def test_audit_has_one_line_per_call_and_never_contents(secrets_ws: Path) -> None:
    log = secrets_ws.parent / "audit.jsonl"
    calls = [
        ("write_file", {"path": "m.txt", "content": MARKER}),
        ("read_file", {"path": "m.txt"}),
        ("edit_file", {"path": "m.txt", "old_string": MARKER, "new_string": MARKER + "2"}),
        ("grep", {"pattern": MARKER}),
        ("append_file", {"path": "m.txt", "content": MARKER}),
        ("read_file", {"path": "notes.txt"}),
        ("copy_file", {"source": "m.txt", "destination": "n.txt"}),
        ("delete_file", {"path": "m.txt"}),
        ("no_such_tool", {"content": MARKER}),
        ("write_file", {"path": "x", "content": MARKER, "bogus": MARKER}),
    ]
    with Sandbox(secrets_ws, audit=log) as sb:
        results = [sb.call(tool, args) for tool, args in calls]
    text = log.read_text()
    assert MARKER not in text and ENV_SECRET not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == len(calls)
    assert [r["tool"] for r in records] == [tool for tool, _ in calls]
    assert [r["ok"] for r in records] == [r["ok"] for r in results]
    write, read, _, _, _, denied, copy, disabled, unknown, invalid = records
    assert (write["path"], write["resolved"], write["root"], write["decision"]) == (
        "m.txt", "m.txt", str(secrets_ws), "allow")
    assert write["bytes"] == len(MARKER) and read["bytes"] == len(MARKER)
    assert (denied["path"], denied["resolved"], denied["rule"], denied["error"]) == (
        "notes.txt", ".env", "block-dotenv", "path_denied")
    assert [t["path"] for t in copy["touched"]] == ["m.txt", "n.txt"]
    assert disabled["error"] == "tool_disabled"
    assert unknown["error"] == "unknown_tool"
    assert invalid["error"] == "invalid_arguments"
    assert all(r["duration_ms"] >= 0 for r in records)


def test_audit_sink_that_cannot_open_fails_the_sandbox(secrets_ws: Path) -> None:
    from corral.audit import AuditError

    with pytest.raises(AuditError, match="cannot open audit log"):
        Sandbox(secrets_ws, audit=secrets_ws / "missing" / "audit.jsonl")


def test_an_audit_log_inside_the_workspace_cannot_be_replaced(secrets_ws: Path) -> None:
    log = secrets_ws / "audit.jsonl"
    with Sandbox(secrets_ws, audit=log, policy=Policy({"delete_file": "allow"})) as sb:
        for tool, args in [
            ("write_file", {"path": "audit.jsonl", "content": "{}\n"}),
            ("append_file", {"path": "audit.jsonl", "content": "{}\n"}),
            ("move_file", {"source": "audit.jsonl", "destination": "gone.jsonl"}),
            ("move_file", {"source": "hello.txt", "destination": "audit.jsonl",
                           "overwrite": True}),
            ("delete_file", {"path": "audit.jsonl"}),
        ]:
            result = sb.call(tool, args)
            assert result["error"]["rule"] == "protect-corral-files", (tool, result)
        assert sb.call("read_file", {"path": "audit.jsonl"})["ok"]
    assert len(log.read_text().splitlines()) == 6


def test_async_sandbox_approvals(secrets_ws: Path) -> None:
    from corral import AsyncSandbox

    async def scenario() -> list[str | None]:
        answers = iter([False, True])
        asked: list[dict[str, Any]] = []

        async def approve(request: dict[str, Any]) -> bool:
            asked.append(request)
            return next(answers)

        async with AsyncSandbox(secrets_ws, policy=SUPERVISED_TOOL, approve=approve) as sb:
            args = {"path": "./src/../alias.py", "content": "async\n"}
            first = await sb.call("write_file", args)
            second = await sb.call("write_file", args)
        # asked about the file the write lands in, not the lexically tidied spelling
        assert [request["paths"] for request in asked] == [["./src/../alias.py"]] * 2
        assert [request["targets"][0]["path"] for request in asked] == ["src/app.py"] * 2
        return [code(first), code(second)]

    assert asyncio.run(scenario()) == ["approval_denied", None]
    assert (secrets_ws / "src" / "app.py").read_text() == "async\n"


def test_a_record_that_cannot_be_written_is_raised_from_call(secrets_ws: Path) -> None:
    from corral.audit import Audit, AuditError

    audit = Audit(secrets_ws.parent / "audit.jsonl")
    with Sandbox(secrets_ws, audit=audit) as sb:
        assert sb.call("read_file", {"path": "hello.txt"})["ok"]
        audit.close()  # the host's sink breaks: the next call must say so
        with pytest.raises(AuditError, match="closed"):
            sb.call("read_file", {"path": "hello.txt"})
    assert len((secrets_ws.parent / "audit.jsonl").read_text().splitlines()) == 1
