"""A write is decided by its target's rule: the directories it creates on the way
are part of that write, refused only by a deny that comes before that rule, and a
refusal names the path actually refused. The answer is the same whether the
directories on the way exist or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral import Sandbox
from corral.config import SandboxOptions
from corral.policy import Policy, Rule
from tests.helpers.calls import err, ok

KEEP_DIST = Policy(rules=(
    Rule("keep", "allow", ("write_file",), ("dist/keep/**",)),
    Rule("deny-dist", "deny", ("write_file",), ("dist/**",)),
))
NO_BUILD = Policy(rules=(
    Rule("no-build", "deny", ("*",), ("build",)),
    Rule("anything", "allow", ("*",), ("**",)),
))


@pytest.mark.parametrize("existing", ["", "dist", "dist/keep"])
def test_the_target_rule_decides_whatever_exists_on_the_way(
    workspace: Path, resolver: SandboxOptions, existing: str
) -> None:
    if existing:
        (workspace / existing).mkdir(parents=True)
    with Sandbox(workspace, policy=KEEP_DIST, options=resolver) as sb:
        ok(sb, "write_file", path="dist/keep/a.txt", content="kept\n")
        refused = err(sb, "write_file", path="dist/other.txt", content="x")
    assert (workspace / "dist/keep/a.txt").read_text() == "kept\n"
    assert refused == {"code": "path_denied", "rule": "deny-dist",
                       "message": "dist/other.txt is denied by policy rule 'deny-dist'."}


@pytest.mark.parametrize("build", ["missing", "file"])
@pytest.mark.parametrize("tool", ["write_file", "append_file", "create_directory"])
def test_a_directory_denied_by_an_earlier_rule_is_named(
    workspace: Path, resolver: SandboxOptions, build: str, tool: str
) -> None:
    """`build` is denied, its content is not: a write that would create `build` is
    refused naming it, with the same answer when a file `build` is there."""
    if build == "file":
        (workspace / "build").write_text("not a directory\n")
    arguments = {"path": "build/out/x.txt"} | ({} if tool == "create_directory" else
                                               {"content": "x"})
    with Sandbox(workspace, policy=NO_BUILD, options=resolver) as sb:
        refused = err(sb, tool, **arguments)
        absolute = err(sb, tool, **{**arguments, "path": f"{workspace}/build/out/x.txt"})
    assert refused == {
        "code": "path_denied", "rule": "no-build",
        "message": "build is denied by policy rule 'no-build' (on the way to build/out/x.txt).",
    }
    assert absolute["message"].startswith(f"{workspace}/build is denied by")
    assert not (workspace / "build").is_dir()


def test_a_workspace_rule_refuses_the_directory_it_names(workspace: Path) -> None:
    (workspace / "corral.toml").write_text(
        '[[rules]]\nname = "no-vault"\naction = "deny"\npaths = ["vault"]\n')
    with Sandbox(workspace) as sb:
        refused = err(sb, "write_file", path="vault/x.txt", content="x")
    assert refused["rule"] == "no-vault"
    assert refused["message"].startswith("vault is denied by policy rule 'no-vault'")
