"""Red-team findings: an attacker who controls the tool arguments (the model),
through Sandbox on the real confined worker pool. Each test failed before its fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.policy import Policy, Rule

AWS_KEY = "AWS-KEY-2b7e"
PRIVATE = "PRIVATE-c41d"


def code(result: dict[str, Any]) -> str | None:
    return None if result["ok"] else result["error"]["code"]


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / ".aws").mkdir()
    (workspace / ".aws" / "credentials").write_text(AWS_KEY + "\n")
    (workspace / "priv").mkdir()
    (workspace / "priv" / "a.txt").write_text(PRIVATE + "\n")
    (workspace / "sub" / "deeper").mkdir(parents=True)
    (workspace / "sub" / "deeper" / ".env").write_text("TOKEN=1\n")
    (workspace / "home").mkdir()
    (workspace / "plain").mkdir()
    (workspace / "plain" / "credentials").write_text("not yet\n")
    return workspace


@pytest.fixture
def sandbox(ws: Path) -> Iterator[Sandbox]:
    rule = Rule("no-priv", "deny", ("*",), ("priv/*.txt",))
    with Sandbox(ws, policy=Policy(rules=(rule,))) as sb:
        yield sb


# -- a directory move renames everything beneath it ---------------------------


@pytest.mark.parametrize(
    ("source", "destination", "rule"),
    [
        (".aws", "aws2", "block-aws-credentials"),  # then read aws2/credentials
        ("priv", "pub", "no-priv"),  # then read pub/a.txt
        ("sub", "moved", "block-dotenv"),  # renames sub/deeper/.env
        ("plain", "home/.aws", "block-aws-credentials"),  # creates home/.aws/credentials
    ],
)
def test_moving_a_directory_checks_every_entry_beneath_it(
    sandbox: Sandbox, ws: Path, source: str, destination: str, rule: str
) -> None:
    before = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*"))
    result = sandbox.call("move_file", {"source": source, "destination": destination})
    assert code(result) == "path_denied", result
    assert result["error"]["rule"] == rule
    assert sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*")) == before
    for path in ("aws2/credentials", "pub/a.txt"):
        assert code(sandbox.call("read_file", {"path": path})) == "not_found"


def test_moving_a_clean_directory_still_works(sandbox: Sandbox, ws: Path) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    result = sandbox.call("move_file", {"source": "src", "destination": "lib"})
    assert result["ok"], result
    assert (ws / "lib" / "pkg" / "mod.py").read_text() == "x = 1\n"


# -- the caller's tool name is echoed, bounded --------------------------------


def test_any_tool_name_is_an_unknown_tool_result(sandbox: Sandbox) -> None:
    nested: list[Any] = []
    for _ in range(100_000):  # repr() of this raises RecursionError
        nested = [nested]
    for name in (nested, {"a": 1}, None, 7, "x" * 1_000_000):
        result = sandbox.call(name, {})  # type: ignore[arg-type]
        assert code(result) == "unknown_tool"
        assert len(result["tool"]) < 200 and len(result["error"]["message"]) < 300
