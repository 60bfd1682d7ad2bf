"""What a workspace config may add is bounded (rules, globs per rule, bytes), and
checking a config, or building a policy, costs time linear in its rules: one
tenant's corral.toml must not stall the host or the shared zygote for others."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from corral import globs, policy
from corral.config import (
    WORKSPACE_MAX_GLOBS_PER_RULE,
    WORKSPACE_MAX_RULES,
    Config,
    ConfigError,
    parse_config,
    resolve_roots,
)
from corral.sandbox.protocol import CONTROL_FRAME_BYTES, recv_frame_with_fds
from corral.sandbox.zygote import Zygote
from corral.trust import narrowed


def rules_toml(count: int, globs_each: int = 1) -> str:
    return "".join(
        f'[[rules]]\nname = "r{i}"\naction = "deny"\n'
        f"paths = [{', '.join(repr(f'd{i}/g{j}/**') for j in range(globs_each))}]\n"
        for i in range(count)
    )


def narrow_ws(ws: Path, text: str) -> Config:
    (ws / "corral.toml").write_text(text)
    real, others = resolve_roots(ws)
    return narrowed(Config(real, others))


def test_a_workspace_config_may_add_a_bounded_number_of_rules(ws: Path) -> None:
    config = narrow_ws(ws, rules_toml(WORKSPACE_MAX_RULES))
    assert len(config.policy.workspace_rules) == WORKSPACE_MAX_RULES
    with pytest.raises(ConfigError) as caught:
        narrow_ws(ws, rules_toml(WORKSPACE_MAX_RULES + 1))
    assert caught.value.key == "[[rules]]"
    assert f"at most {WORKSPACE_MAX_RULES} rules" in str(caught.value)


def test_a_workspace_rule_may_have_a_bounded_number_of_globs(ws: Path) -> None:
    config = narrow_ws(ws, rules_toml(1, WORKSPACE_MAX_GLOBS_PER_RULE))
    assert len(config.policy.workspace_rules[0].paths) == WORKSPACE_MAX_GLOBS_PER_RULE
    with pytest.raises(ConfigError) as caught:
        narrow_ws(ws, rules_toml(2, WORKSPACE_MAX_GLOBS_PER_RULE + 1))
    assert caught.value.key == "[[rules]] #1 paths"
    assert f"at most {WORKSPACE_MAX_GLOBS_PER_RULE} globs" in str(caught.value)


class Name(str):
    """A rule name that counts how often it is compared with another."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_checking_rule_names_is_linear(tmp_path: Path) -> None:
    """The operator's config has no bound: 2,000 rules must not cost 2,000 squared."""
    count = 2000
    rules = [{"name": Name(f"r{i}"), "action": "deny", "paths": [f"d{i}/**"]}
             for i in range(count)]
    Name.compared = 0
    parse_config(str(tmp_path / "corral.toml"), {"rules": rules})
    assert Name.compared < 10 * count


def test_each_glob_is_compiled_a_few_times_not_once_per_rule(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The built-in rules are compiled once, not again for every rule checked."""
    calls = 0
    translate = globs.glob_to_regex

    def counted(glob: str) -> Any:
        nonlocal calls
        calls += 1
        return translate(glob)

    monkeypatch.setattr(globs, "glob_to_regex", counted)
    monkeypatch.setattr(policy, "glob_to_regex", counted)
    builtins = sum(len(rule.paths) for rule in policy.BUILTIN_RULES)
    narrow_ws(ws, rules_toml(WORKSPACE_MAX_RULES))
    assert calls <= builtins + 8 * WORKSPACE_MAX_RULES


def test_the_shared_zygote_builds_no_sandboxs_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared pool's zygote forks blank workers: each builds its own sandbox's
    policy, so the zygote (and every worker forked after) holds no sandbox's rules,
    and a fork for B never pays for A's rules (however many)."""
    builds: list[int] = []
    build = policy._Matcher.__init__

    def counted(self: Any, built: policy.Policy) -> None:
        builds.append(len(built.rules))
        build(self, built)

    monkeypatch.setattr(policy._Matcher, "__init__", counted)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    zygote = Zygote(ours, None)
    try:
        for _ in range(3):
            zygote.fork_one(None)
            reply, fds = recv_frame_with_fds(theirs, CONTROL_FRAME_BYTES, 2)
            assert reply is not None and "pid" in reply, reply
            for fd in fds:
                os.close(fd)
            os.kill(reply["pid"], signal.SIGKILL)
            os.waitpid(reply["pid"], 0)
    finally:
        zygote.stop_children()
        ours.close()
        theirs.close()
    assert builds == []
