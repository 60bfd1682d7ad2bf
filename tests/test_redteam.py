"""Red-team findings: an attacker who controls the tool arguments (the model),
through Sandbox on the real confined worker pool. Each test failed before its fix."""

from __future__ import annotations

import fnmatch
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import Limits
from corral.policy import Policy, RootSpec, Rule, glob_to_regex
from corral.tools.diff import DIFF_MAX_BYTES, unified_diff
from corral.tools.search import MAX_MATCHES

AWS_KEY = "AWS-KEY-2b7e"
PRIVATE = "PRIVATE-c41d"


def code(result: dict[str, Any]) -> str | None:
    return None if result["ok"] else result["error"]["code"]


@pytest.fixture
def secrets_ws(workspace: Path) -> Path:
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
def sandbox(secrets_ws: Path) -> Iterator[Sandbox]:
    rule = Rule("no-priv", "deny", ("*",), ("priv/*.txt",))
    with Sandbox(secrets_ws, policy=Policy(rules=(rule,))) as sb:
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
    sandbox: Sandbox, secrets_ws: Path, source: str, destination: str, rule: str
) -> None:
    before = sorted(p.relative_to(secrets_ws).as_posix() for p in secrets_ws.rglob("*"))
    result = sandbox.call("move_file", {"source": source, "destination": destination})
    assert code(result) == "path_denied", result
    assert result["error"]["rule"] == rule
    assert sorted(p.relative_to(secrets_ws).as_posix() for p in secrets_ws.rglob("*")) == before
    for path in ("aws2/credentials", "pub/a.txt"):
        assert code(sandbox.call("read_file", {"path": path})) == "not_found"


def test_moving_a_clean_directory_still_works(sandbox: Sandbox, secrets_ws: Path) -> None:
    (secrets_ws / "src" / "pkg").mkdir(parents=True)
    (secrets_ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    result = sandbox.call("move_file", {"source": "src", "destination": "lib"})
    assert result["ok"], result
    assert (secrets_ws / "lib" / "pkg" / "mod.py").read_text() == "x = 1\n"


# -- the caller's tool name is echoed, bounded --------------------------------


def test_any_tool_name_is_an_unknown_tool_result(sandbox: Sandbox) -> None:
    nested: list[Any] = []
    for _ in range(100_000):  # repr() of this raises RecursionError
        nested = [nested]
    for name in (nested, {"a": 1}, None, 7, "x" * 1_000_000):
        result = sandbox.call(name, {})  # type: ignore[arg-type]
        assert code(result) == "unknown_tool"
        assert len(result["tool"]) < 200 and len(result["error"]["message"]) < 300


# -- globs from the caller cannot backtrack exponentially ---------------------


def test_glob_bombs_finish(secrets_ws: Path) -> None:
    deep = secrets_ws / "/".join(["a"] * 40)
    deep.mkdir(parents=True)
    (deep / "y").write_text("y\n")
    (secrets_ws / ("a" * 250)).write_text("needle\n")
    with Sandbox(secrets_ws, limits=Limits(timeout_s=5)) as sb:
        found = sb.call("search_files", {"pattern": "**/" * 25 + "x"})
        assert found["ok"] and found["result"]["matches"] == [], found
        found = sb.call("search_files", {"pattern": "**/a/" * 20 + "**/y"})
        assert found["ok"] and found["result"]["matches"] == ["/".join(["a"] * 40) + "/y"]
        grep = sb.call("grep", {"pattern": "needle", "glob": "*a" * 14 + "*b"})
        assert grep["ok"] and grep["result"]["matches"] == [], grep


def test_repeated_double_star_in_a_rule_still_matches() -> None:
    # "**/**" once compiled to a regex that needed a "/", so this rule missed secrets/a.
    policy = Policy(rules=(Rule("no-secrets", "deny", ("*",), ("secrets/**/**",)),))
    decision = policy.decide("read_file", RootSpec("/w", "rw"), "secrets/a", write=False)
    assert decision.action == "deny"


def _reference_match(glob: str, path: str) -> bool:
    """Component by component (relative globs): "**" takes any number of whole
    components, a lone "**" everything."""
    pattern = [c for c in glob.split("/") if c not in ("", ".")]
    parts = path.split("/")
    reachable = {0}
    for component in pattern:
        if component == "**":
            reachable = set(range(min(reachable), len(parts) + 1)) if reachable else set()
            continue
        reachable = {
            at + 1 for at in reachable
            if at < len(parts) and fnmatch.fnmatchcase(parts[at], component)
        }
    return len(parts) in reachable


def test_glob_translation_agrees_with_a_component_matcher() -> None:
    pieces = ["a", "b", "*", "?", "**", "**", "[ab]", "[!a]", "*a*", "a*b*", "*b"]
    names = ["a", "b", "ab", "ba", "aa", "bab", "abab", ".x"]
    rnd = random.Random(7)
    for _ in range(3000):
        glob = "/".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 6)))
        compiled = re.compile(glob_to_regex(glob), re.DOTALL)
        for _ in range(5):
            path = "/".join(rnd.choice(names) for _ in range(rnd.randint(1, 7)))
            assert bool(compiled.fullmatch(path)) == _reference_match(glob, path), (glob, path)


# -- expected_version never reads a huge file whole ---------------------------


def test_expected_version_against_a_huge_file_is_a_quick_conflict(secrets_ws: Path) -> None:
    with open(secrets_ws / "sparse.bin", "wb") as f:
        f.truncate(3 * 1024**3)  # sparse: costs no disk, but 3 GiB to read
    with Sandbox(secrets_ws, limits=Limits(timeout_s=5)) as sb:
        args = {"path": "sparse.bin", "content": "x", "expected_version": "0" * 24}
        assert code(sb.call("write_file", args)) == "conflict"
    assert (secrets_ws / "sparse.bin").stat().st_size == 3 * 1024**3


def test_grep_results_have_a_ceiling(secrets_ws: Path) -> None:
    (secrets_ws / "lines.txt").write_bytes(b"x\n" * 3_000_000)
    with Sandbox(secrets_ws) as sb:
        result = sb.call("grep", {"pattern": "x", "path": "lines.txt", "max_results": 10**9})
    assert result["ok"], result["error"]
    assert result["result"]["truncated"] and len(result["result"]["matches"]) == MAX_MATCHES


# -- edit_file's diff: bounded time, bounded size -----------------------------


def test_a_diff_that_difflib_chokes_on_finishes(secrets_ws: Path) -> None:
    rnd = random.Random(1)
    text = "".join(f"{rnd.randrange(50)}\n" for _ in range(4000))  # difflib: ~20 s
    (secrets_ws / "nums.txt").write_text(text)
    with Sandbox(secrets_ws, limits=Limits(timeout_s=5)) as sb:
        args = {"path": "nums.txt", "old_string": "\n", "new_string": "\n\n", "replace_all": True}
        result = sb.call("edit_file", args)
    assert result["ok"], result["error"]
    assert (secrets_ws / "nums.txt").read_text() == text.replace("\n", "\n\n")
    assert result["result"]["diff"].count("\n+\n") == 4000


def test_a_huge_diff_is_cut_and_the_edit_still_answers(secrets_ws: Path) -> None:
    (secrets_ws / "wide.txt").write_text(
        "".join(f"row {i:06d} a {'x' * 30}\n" for i in range(120_000))
    )
    with Sandbox(secrets_ws) as sb:
        args = {"path": "wide.txt", "old_string": " a ", "new_string": " b ", "replace_all": True}
        result = sb.call("edit_file", args)
    assert result["ok"], result["error"]
    assert result["result"]["diff_truncated"] is True
    assert len(result["result"]["diff"].encode()) <= DIFF_MAX_BYTES
    assert result["result"]["diff"].endswith("\n")
    assert " a " not in (secrets_ws / "wide.txt").read_text()


def _apply_unified(before: str, diff: str) -> str:
    """Apply a unified diff (as edit_file writes it) to `before`."""
    old = before.splitlines(keepends=True)
    out: list[str] = []
    at, last = 0, ""
    for line in diff.splitlines(keepends=True)[2:]:
        if line.startswith("@@"):
            start, _, count = line.split()[1][1:].partition(",")
            begin = int(start) - (0 if count == "0" else 1)
            out += old[at:begin]
            at = begin
        elif line.startswith("\\"):  # the line before has no newline
            if last in " +":
                out[-1] = out[-1].removesuffix("\n")
        else:
            last = line[0]
            if last in " -":
                assert old[at].removesuffix("\n") == line[1:].removesuffix("\n"), (at, line)
                at += 1
            if last in " +":
                out.append(line[1:])
    return "".join(out + old[at:])


def test_the_patience_diff_applies_back() -> None:
    rnd = random.Random(3)
    for _ in range(500):
        pool = ["x\n", "y\n", "z\n"] + [f"u{k}\n" for k in range(rnd.randint(0, 30))]
        before = "".join(rnd.choice(pool) for _ in range(rnd.randint(1, 60)))
        before += rnd.choice(["", "tail"])
        chars = list(before)
        for _ in range(rnd.randint(1, 5)):
            at = rnd.randint(0, len(chars))
            chars[at:at + rnd.randint(0, 6)] = rnd.choice(["", "x\n", "n\n", "\n", "u3\nu4\n"])
        after = "".join(chars)
        diff = unified_diff("f", before, after)
        assert _apply_unified(before, diff) == after, (before, after, diff)


def test_a_move_whose_tree_cannot_be_walked_whole_is_refused(workspace: Path) -> None:
    # Deeper than the worker's open-file limit: the check cannot see the bottom.
    fd = os.open(workspace, os.O_RDONLY)
    name = "top"
    for _ in range(1200):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd, name = child, "a"
    os.close(os.open("secret.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)
    rule = Rule("no-secret", "deny", ("*",), ("top/**/secret.txt",))
    try:
        with Sandbox(workspace, policy=Policy(rules=(rule,))) as sb:
            result = sb.call("move_file", {"source": "top", "destination": "moved"})
        assert not result["ok"]
        assert (workspace / "top").is_dir() and not (workspace / "moved").exists()
    finally:
        _remove_chain(workspace / "top")


def _remove_chain(top: Path) -> None:
    """Remove a chain of directories too deep for shutil.rmtree's recursion, a
    level at a time (pytest's tmp_path cleanup would fail on it)."""
    while (top / "a").is_dir():
        os.rename(top / "a", top.with_name("next"))
        for leftover in top.iterdir():
            leftover.unlink()
        top.rmdir()
        os.rename(top.with_name("next"), top)
    for leftover in top.iterdir():
        leftover.unlink()
    top.rmdir()
