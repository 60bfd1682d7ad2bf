"""Ignore files: a recursive list_directory, search_files and grep leave out what
.gitignore, .ignore, .git/info/exclude and [workspace] ignore exclude, and .git;
include_ignored shows them; a named path still reads; results count what they
skipped. Through the worker pool, over both resolvers; git agreement at the end."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import SandboxOptions
from corral.policy import Policy, Rule
from tests.helpers.calls import err, ok
from tests.helpers.scripts_loader import load_script

ignore_agreement = load_script("ignore_agreement")

FILES = {
    ".gitignore": "node_modules/\n*.log\n!keep.log\n",
    ".ignore": "tmp/\n",
    ".git/HEAD": "ref: refs/heads/main\n",
    ".git/info/exclude": "notes.txt\n",
    "notes.txt": "mine\n",
    "keep.log": "kept needle\n",
    "debug.log": "needle\n",
    "node_modules/pkg/index.js": "needle\n",
    "tmp/scratch.py": "needle\n",
    "src/app.py": "needle = 1\n",
    "src/.gitignore": "generated/\n!debug.log\n",
    "src/debug.log": "needle\n",
    "src/generated/out.py": "needle\n",
}
SHOWN = {".gitignore", ".ignore", "notes.txt", "keep.log", "src", "src/app.py",
         "src/.gitignore", "src/debug.log"} - {"notes.txt"}
LEFT_OUT = {".git", "notes.txt", "debug.log", "node_modules", "tmp", "src/generated"}


@pytest.fixture
def repo(workspace: Path) -> Path:
    (workspace / "hello.txt").unlink()
    for name, text in FILES.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return workspace


def names(answer: dict[str, Any]) -> set[str]:
    return {entry["name"] for entry in answer["result"]["entries"]}


def test_a_recursive_listing_leaves_out_what_ignore_files_exclude(
    repo: Path, resolver: SandboxOptions
) -> None:
    with Sandbox(repo, options=resolver) as sb:
        listed = ok(sb, "list_directory", recursive=True)
        everything = ok(sb, "list_directory", recursive=True, include_ignored=True)
        strict = ok(sb, "list_directory", recursive=True, include_ignored=None)
    assert names(listed) == SHOWN
    assert listed["result"]["ignored"] == len(LEFT_OUT)  # a directory counts once
    assert listed["text"].endswith(f"[{len(LEFT_OUT)} ignored entries left out (.gitignore, "
                                   ".ignore); include_ignored=true shows them]")
    assert names(everything) >= SHOWN | LEFT_OUT | {"node_modules/pkg/index.js", ".git/HEAD"}
    assert everything["result"]["ignored"] == 0 and "ignored" not in everything["text"]
    assert strict["result"] == listed["result"]  # null means the default, as strict models send


def test_one_directory_without_recursive_is_listed_as_before(repo: Path) -> None:
    with Sandbox(repo) as sb:
        listed = ok(sb, "list_directory")
    assert {"node_modules", "debug.log", ".git"} <= names(listed)
    assert listed["result"]["ignored"] == 0


def test_searches_skip_ignored_files_and_count_them(repo: Path, resolver: SandboxOptions
                                                    ) -> None:
    with Sandbox(repo, options=resolver) as sb:
        found = ok(sb, "search_files", pattern="**/*")
        grep = ok(sb, "grep", pattern="needle")
        grep_all = ok(sb, "grep", pattern="needle", include_ignored=True)
    assert set(found["result"]["matches"]) == SHOWN
    assert found["result"]["ignored"] == len(LEFT_OUT)
    assert {m["path"] for m in grep["result"]["matches"]} == {"keep.log", "src/app.py",
                                                               "src/debug.log"}
    assert grep["result"]["ignored"] == len(LEFT_OUT) and "ignored entries" in grep["text"]
    assert {"debug.log", "node_modules/pkg/index.js", "tmp/scratch.py",
            "src/generated/out.py"} <= {m["path"] for m in grep_all["result"]["matches"]}


def test_ignoring_is_not_denying_a_named_path_reads(repo: Path) -> None:
    with Sandbox(repo) as sb:
        read = ok(sb, "read_file", path="node_modules/pkg/index.js")
        grep = ok(sb, "grep", pattern="needle", path="debug.log")
        inside = ok(sb, "list_directory", path="node_modules", recursive=True)
        stat = ok(sb, "stat_file", path="tmp/scratch.py")
    assert "needle" in read["result"]["content"]
    assert [m["path"] for m in grep["result"]["matches"]] == ["debug.log"]
    assert names(inside) == {"pkg", "pkg/index.js"}  # an ignored directory named: listed
    assert stat["result"]["exists"]


def test_a_nested_file_overrides_its_parents(workspace: Path) -> None:
    (workspace / ".gitignore").write_text("*.txt\nbuild/\n")
    (workspace / "sub" / "build").mkdir(parents=True)
    (workspace / "sub" / ".gitignore").write_text("!*.txt\n")
    (workspace / "sub" / "a.txt").write_text("a\n")
    (workspace / "sub" / "build" / "b.txt").write_text("b\n")
    (workspace / "sub" / "deeper").mkdir()
    (workspace / "sub" / "deeper" / "c.txt").write_text("c\n")
    with Sandbox(workspace) as sb:
        listed = names(ok(sb, "list_directory", recursive=True))
        below = names(ok(sb, "list_directory", path="sub", recursive=True))
    assert listed == {".gitignore", "sub", "sub/.gitignore", "sub/a.txt", "sub/deeper",
                      "sub/deeper/c.txt"}  # hello.txt ignored at the top, build/ anywhere
    assert below == {".gitignore", "a.txt", "deeper", "deeper/c.txt"}  # parents' rules apply


def test_workspace_ignore_patterns_add_to_the_files(repo: Path, tmp_path: Path) -> None:
    config = tmp_path / "operator.toml"
    config.write_text(f'[workspace]\nroot = "{repo}"\nignore = ["src/*.py", "keep.log"]\n')
    (repo / ".gitignore").write_text("node_modules/\n*.log\n!keep.log\n")
    with Sandbox.from_config(config) as sb:
        listed = names(ok(sb, "list_directory", recursive=True))
    assert "src/app.py" not in listed
    assert "keep.log" in listed  # the repository's "!keep.log" wins over the config


def test_a_workspace_config_may_add_ignore_patterns(repo: Path) -> None:
    (repo / "corral.toml").write_text('[workspace]\nignore = ["src/"]\n')
    with Sandbox.from_config(repo / "corral.toml") as sb:
        listed = names(ok(sb, "list_directory", recursive=True))
    assert not any(name.startswith("src") for name in listed)


@pytest.mark.parametrize("action", ["deny", "supervised"])
def test_an_ignore_file_the_policy_does_not_allow_is_not_read(repo: Path, action: str) -> None:
    # Its patterns would tell the model what the file says, unasked.
    policy = Policy(rules=(Rule("ignore-files", action, ("*",), ("**/.gitignore",)),))
    with Sandbox(repo, policy=policy) as sb:
        listed = ok(sb, "list_directory", recursive=True)
        error = err(sb, "read_file", path=".gitignore")
    assert error["code"] == ("path_denied" if action == "deny" else "approval_required")
    assert {"debug.log", "node_modules", "src/generated/out.py"} <= names(listed)


def test_what_the_policy_denies_is_not_counted_as_ignored(repo: Path) -> None:
    policy = Policy(rules=(Rule("no-logs", "deny", ("*",), ("**/*.log",)),))
    with Sandbox(repo, policy=policy) as sb:
        listed = ok(sb, "list_directory", recursive=True)
    assert listed["result"]["ignored"] == len(LEFT_OUT) - 1  # debug.log: denied, not counted
    assert not any(name.endswith(".log") for name in names(listed))


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("seed", [1, 2])
def test_ignore_rules_agree_with_git_check_ignore(tmp_path: Path, seed: int) -> None:
    """A short corpus; scripts/ignore_agreement.py runs thousands of cases."""
    assert ignore_agreement.disagreements(tmp_path, seed, 60) == []


def test_ignore_files_are_read_beneath_the_root_only(workspace: Path, outside: Path) -> None:
    """Read through the Root in the worker: a .gitignore linking out of the root, a
    FIFO (which an open() would block on) and one over 1 MiB are passed by."""
    (outside / "rules").write_text("*.txt\n")
    (workspace / ".gitignore").symlink_to(outside / "rules")
    for name in ("fifo", "big"):
        (workspace / name).mkdir()
        (workspace / name / "a.txt").write_text("a\n")
    os.mkfifo(workspace / "fifo" / ".gitignore")
    (workspace / "big" / ".gitignore").write_text("*.txt\n" + "#" * (1024 * 1024))
    with Sandbox(workspace) as sb:
        listed = ok(sb, "list_directory", recursive=True)
    assert {"hello.txt", "fifo/a.txt", "big/a.txt"} <= names(listed)
    assert listed["result"]["ignored"] == 0


def test_the_ignore_benchmark_runs_its_calls_in_process(repo: Path) -> None:
    bench = load_script("bench_ignore")
    for tool, arguments in bench.CALLS:
        ruled, everything = bench.in_process(repo, 1, tool, arguments)
        assert ruled >= 0 and everything >= 0
