"""A glob or regex that cannot be compiled is the caller's mistake: invalid_arguments
with a clear message, never io_error (the worker's answer for its own failures)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.policy import Policy, PolicyError, Rule
from tests.helpers.calls import err, ok

NESTED = 3000
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("search_files", {"pattern": "[z-a]"}, "not a valid glob"),
    ("search_files", {"pattern": "src/[!z-a]*.py"}, "not a valid glob"),
    ("grep", {"pattern": "x", "glob": "[z-a]"}, "not a valid glob"),
    ("grep", {"pattern": "a{4294967296}"}, "a repeat count is too large"),
    ("grep", {"pattern": "(" * NESTED + "a" + ")" * NESTED}, "nested too deeply"),
    ("grep", {"pattern": "(?:" * NESTED + "a" + ")" * NESTED}, "nested too deeply"),
    ("grep", {"pattern": "[z-a]"}, "not a valid regular expression"),
]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    ws = tmp_path_factory.mktemp("ws")
    (ws / "a.txt").write_text("aaa\n")
    with Sandbox(ws) as sb:
        yield sb


@pytest.mark.parametrize(("tool", "arguments", "why"), CASES, ids=[str(i) for i in range(7)])
def test_bad_pattern_is_invalid_arguments(
    sandbox: Sandbox, tool: str, arguments: dict[str, Any], why: str
) -> None:
    error = err(sandbox, tool, **arguments)
    assert error["code"] == "invalid_arguments", error
    assert why in error["message"] and "argument '" in error["message"]
    ok(sandbox, "grep", pattern="a{3}")  # the worker serves on


@pytest.mark.parametrize("glob", ["[z-a]", "[!z-a]"])
def test_bad_rule_glob_is_a_policy_error(glob: str) -> None:
    with pytest.raises(PolicyError, match="invalid glob"):
        Policy(rules=(Rule("bad", "deny", ("*",), (glob,)),))


@pytest.mark.parametrize("regex", ["a{4294967296}", "(" * NESTED + ")" * NESTED, "[z-a]"])
def test_bad_path_regex_is_a_policy_error(regex: str, tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="invalid path_regex"):
        Policy(path_regex=(regex,))
