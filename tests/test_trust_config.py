"""The trust boundary in config: what a workspace's corral.toml may change (pure,
on pyfakefs); the end-to-end checks through the CLI are in test_trust.py."""

from __future__ import annotations

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from corral.config import Config, ConfigError, Limits, SandboxOptions
from corral.policy import Decision, Policy, RootSpec, Rule
from corral.trust import narrow, operator_config, user_config_path
from tests.helpers.attack_config import attack

HOME = "/home/u"
WS = f"{HOME}/proj"
LOCAL = f"{WS}/corral.toml"
USER = f"{HOME}/.config/corral/corral.toml"

ATTACK = attack(HOME)  # the review's attack, as the end-to-end tests ship it


@pytest.fixture
def tree(fs: FakeFilesystem, monkeypatch: pytest.MonkeyPatch) -> FakeFilesystem:
    fs.create_dir(f"{WS}/src")
    fs.create_dir("/data")
    fs.create_dir("/ops")
    monkeypatch.setenv("HOME", HOME)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return fs


def base() -> Config:
    return Config(workspace=WS)


def narrowed(fs: FakeFilesystem, text: str, config: Config | None = None) -> Config:
    fs.create_file(LOCAL, contents=text)
    return narrow(config or base(), LOCAL)


def test_the_attack_is_refused_naming_every_key(tree: FakeFilesystem) -> None:
    with pytest.raises(ConfigError) as caught:
        narrowed(tree, ATTACK)
    message = str(caught.value)
    assert message.startswith(f"{LOCAL}: a corral.toml inside the workspace may only narrow"), (
        message)
    for fragment in ("[workspace] allowed_paths: adds roots",
                     "[tools] delete_file = 'allow': looser than the operator's 'deny'",
                     "[[rules]] 'block-ssh' name: the name of a built-in rule",
                     "[[rules]] 'block-ssh' action = 'allow'",
                     "[audit]: only the operator's config may set it",
                     "--config"):
        assert fragment in message, (fragment, message)
    assert (caught.value.file, caught.value.key) == (LOCAL, "[workspace] allowed_paths")


WIDENING = [
    ("[workspace]\nroot = '..'\n", "[workspace] root: only the workspace itself ('.')"),
    ("[workspace]\nallowed_paths = [{ path = '/data', mode = 'ro' }]\n",
     "[workspace] allowed_paths: adds roots"),
    ("[tools]\nwrite_file = 'allow'\n", None),  # equal to the operator's: accepted
    ("[tools]\ndelete_file = 'supervised'\n",
     "[tools] delete_file = 'supervised': looser than the operator's 'deny'"),
    ("[[rules]]\nname = 'mine'\naction = 'allow'\npaths = ['**']\n",
     "[[rules]] 'mine' action = 'allow'"),
    ("[[rules]]\nname = 'block-git-writes'\naction = 'deny'\npaths = ['x']\n",
     "[[rules]] 'block-git-writes' name: the name of a built-in rule"),
    ("[[rules]]\nname = 'protect-corral-files'\naction = 'deny'\npaths = ['x']\n",
     "[[rules]] 'protect-corral-files' name"),
    ("[policy]\npath_regex = ['.*']\n", "[policy] path_regex: only the operator's config"),
    ("[policy]\npath_regex = []\n", "[policy] path_regex: only the operator's config"),
    ("[workspace]\nallowed_paths = []\n", None),
    ("[history]\nenabled = false\n", "[history]: only the operator's config may set it"),
    ("[limits]\nmax_read_bytes = 262145\n",
     "[limits] max_read_bytes = 262145: above the operator's 262144"),
    ("[limits]\ntimeout_s = 60\n", "[limits] timeout_s = 60.0: above the operator's 10.0"),
    ("[sandbox]\nworkers = 1\n", "[sandbox] workers: only the operator's config"),
    ("[sandbox]\nresolver = 'walk'\n", "[sandbox] resolver: only the operator's config"),
    ("[audit]\npath = '/tmp/a.jsonl'\n", "[audit]: only the operator's config may set it"),
]


@pytest.mark.parametrize(("text", "fragment"), WIDENING)
def test_each_widening_key_is_refused(
    tree: FakeFilesystem, text: str, fragment: str | None
) -> None:
    if fragment is None:
        narrowed(tree, text)
        return
    with pytest.raises(ConfigError) as caught:
        narrowed(tree, text)
    assert fragment in str(caught.value)
    assert caught.value.key == fragment.split(":", 1)[0]


def test_looser_than_a_stricter_operator_is_refused(tree: FakeFilesystem) -> None:
    operator = Config(
        workspace=WS,
        policy=Policy({"grep": "deny"}, default_action="supervised", read_only=True,
                      hardlinks="deny"),
        limits=Limits(timeout_s=5.0),
    )
    text = ("[workspace]\nread_only = false\n[tools]\ngrep = 'supervised'\n"
            "[policy]\ndefault_action = 'allow'\nhardlinks = 'allow'\n[limits]\ntimeout_s = 6\n")
    with pytest.raises(ConfigError) as caught:
        narrowed(tree, text, operator)
    for fragment in ("[workspace] read_only = false", "[tools] grep = 'supervised'",
                     "[policy] default_action = 'allow'", "[policy] hardlinks = 'allow'",
                     "[limits] timeout_s = 6.0: above the operator's 5.0"):
        assert fragment in str(caught.value)


def test_only_the_operator_may_turn_off_fsync(tree: FakeFilesystem) -> None:
    with pytest.raises(ConfigError) as caught:
        narrowed(tree, "[sandbox]\ndurability = 'none'\n")
    assert "[sandbox] durability = 'none'" in str(caught.value)
    tree.remove(LOCAL)
    scratch = Config(workspace=WS, sandbox=SandboxOptions(durability="none"))
    # "fsync" narrows the operator's "none"; "none" restated changes nothing
    assert narrowed(tree, "[sandbox]\ndurability = 'fsync'\n", scratch).sandbox.durability == (
        "fsync")
    tree.remove(LOCAL)
    assert narrowed(tree, "[sandbox]\ndurability = 'none'\n", scratch).sandbox.durability == (
        "none")
    tree.remove(LOCAL)
    assert narrowed(tree, "", scratch).sandbox == (
        scratch.sandbox)


def test_an_operator_rule_name_cannot_be_reused(tree: FakeFilesystem) -> None:
    operator = Config(workspace=WS, policy=Policy(rules=(Rule("docs", "allow", ("*",),
                                                              ("docs/**",)),)))
    with pytest.raises(ConfigError, match="'docs' name: the name of one of the operator's"):
        narrowed(tree, "[[rules]]\nname = 'docs'\naction = 'deny'\npaths = ['docs/**']\n",
                 operator)


def test_narrowing_settings_apply_on_top_of_the_operator(tree: FakeFilesystem) -> None:
    operator = Config(
        workspace=WS,
        allowed_paths=(RootSpec("/data", "ro"),),
        policy=Policy({"delete_file": "allow", "grep": "deny"},
                      rules=(Rule("docs-free", "allow", ("*",), ("docs/**",)),)),
        audit_path="/ops/audit.jsonl",
        source="/ops/corral.toml",
    )
    config = narrowed(tree, """
[workspace]
root = "."
read_only = true
allowed_paths = []

[tools]
delete_file = "supervised"
grep = "deny"
write_file = "deny"

[[rules]]
name = "no-docs-drafts"
action = "deny"
access = ["read"]
paths = ["docs/drafts/**"]

[policy]
default_action = "supervised"
hardlinks = "deny"

[limits]
max_read_bytes = 1000

[sandbox]
require = ["landlock"]
""", operator)
    policy = config.policy
    assert policy.tool_modes == {"delete_file": "supervised", "grep": "deny", "write_file": "deny"}
    assert policy.read_only and policy.default_action == "supervised"
    assert policy.hardlinks == "deny"
    assert policy.rules == operator.policy.rules
    assert [rule.name for rule in policy.workspace_rules] == ["no-docs-drafts"]
    ws = RootSpec(WS, "ro")
    assert policy.decide("read_file", ws, "docs/drafts/a", write=False) == Decision(
        "deny", "no-docs-drafts")
    assert policy.decide("read_file", ws, "docs/a", write=False) == Decision("allow", "docs-free")
    assert policy.decide("read_file", ws, "src/a", write=False) == Decision("supervised", None)
    assert config.limits == Limits(max_read_bytes=1000)
    assert config.sandbox.require == ("landlock",)
    assert config.roots == (RootSpec(WS, "ro"), RootSpec("/data", "ro"))
    assert (config.audit_path, config.source, config.narrowed_by) == (
        "/ops/audit.jsonl", "/ops/corral.toml", LOCAL)


def test_bad_values_are_reported_as_always(tree: FakeFilesystem) -> None:
    with pytest.raises(ConfigError, match=r"\[tools\] grep: expected one of"):
        narrowed(tree, "[tools]\ngrep = 'never'\n")


# -- where the operator's config comes from ----------------------------------------


def test_user_config_path_follows_xdg() -> None:
    assert user_config_path({"XDG_CONFIG_HOME": "/x/cfg"}) == "/x/cfg/corral/corral.toml"
    home = user_config_path({})
    assert home.endswith("/.config/corral/corral.toml")
    assert user_config_path({"XDG_CONFIG_HOME": "relative"}) == home  # the spec: ignored


def test_no_config_anywhere_gives_the_defaults(tree: FakeFilesystem) -> None:
    config = operator_config(WS)
    assert config == Config(workspace=WS)


def test_the_user_config_is_the_operators(tree: FakeFilesystem) -> None:
    tree.create_file(USER, contents="[tools]\ndelete_file = 'allow'\n[workspace]\n"
                                    "allowed_paths = [{ path = '/data', mode = 'rw' }]\n")
    tree.create_file(LOCAL, contents="[tools]\ngrep = 'deny'\n")
    config = operator_config(WS)
    assert config.workspace == WS and config.allowed_paths == (RootSpec("/data", "rw"),)
    assert config.policy.tool_modes == {"delete_file": "allow", "grep": "deny"}
    assert (config.source, config.narrowed_by) == (USER, LOCAL)


def test_a_user_config_inside_a_root_is_not_trusted(tree: FakeFilesystem) -> None:
    tree.create_file(USER, contents="[tools]\ndelete_file = 'allow'\n")
    with pytest.raises(ConfigError, match="the user config lies inside the root /home/u"):
        operator_config(HOME)


def test_a_user_config_pointing_a_root_at_itself_is_not_trusted(tree: FakeFilesystem) -> None:
    text = f"[workspace]\nroot = '/data'\nallowed_paths = ['{HOME}/.config']\n"
    tree.create_file(USER, contents=text)
    with pytest.raises(ConfigError, match=r"inside the root /home/u/\.config"):
        operator_config(WS)


def test_an_explicit_config_is_trusted_even_inside_the_workspace(tree: FakeFilesystem) -> None:
    tree.create_file(LOCAL, contents=ATTACK.replace(f'path = "{HOME}"', 'path = "/data"'))
    config = operator_config(None, LOCAL)  # the operator named it: trusted, applied once
    assert config.workspace == WS and config.allowed_paths == (RootSpec("/data", "rw"),)
    assert config.policy.tool_modes == {"delete_file": "allow"}
    assert (config.audit_path, config.narrowed_by) == (f"{HOME}/.bashrc", None)
    assert operator_config(WS, LOCAL) == config


def test_an_explicit_config_elsewhere_is_narrowed_by_the_workspace(tree: FakeFilesystem) -> None:
    tree.create_file("/ops/corral.toml", contents="[tools]\ndelete_file = 'allow'\n")
    tree.create_file(LOCAL, contents="[tools]\ndelete_file = 'deny'\n")
    config = operator_config(WS, "/ops/corral.toml")
    assert config.policy.tool_modes == {"delete_file": "deny"}
    tree.create_file(f"{WS}/src/corral.toml", contents=ATTACK)  # only the workspace's top
    assert operator_config(WS, "/ops/corral.toml") == config
