"""corral.toml parsing, discovery and every error message, on pyfakefs."""

from __future__ import annotations

import os

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from corral.config import (
    Config,
    ConfigError,
    HistoryOptions,
    Limits,
    SandboxOptions,
    find_config,
    load_config,
    resolve_roots,
)
from corral.policy import Decision, Policy, RootSpec, Rule

WS = "/home/u/proj"
CONFIG = f"{WS}/corral.toml"

DESIGN_EXAMPLE = """
[workspace]
root = "."
read_only = false
allowed_paths = [{ path = "/data", mode = "ro" }]

[tools]
read_file = "allow"
delete_file = "deny"
write_file = "supervised"

[[rules]]
name = "no-build-output"
action = "deny"
tools = ["write_file", "edit_file"]
paths = ["dist/**"]

[policy]
default_action = "allow"
path_regex = []

[limits]
max_read_bytes = 262144
timeout_s = 10

[sandbox]
workers = 2
require = []

[audit]
path = "corral-audit.jsonl"
"""


@pytest.fixture
def tree(fs: FakeFilesystem) -> FakeFilesystem:
    fs.create_dir(WS)
    fs.create_dir("/data")
    fs.create_dir("/home/u/other")
    fs.create_dir("/etc")
    fs.create_dir("/proc")
    return fs


def write(fs: FakeFilesystem, text: str, path: str = CONFIG) -> str:
    fs.create_file(path, contents=text)
    return path


def test_design_example_parses(tree: FakeFilesystem) -> None:
    config = load_config(write(tree, DESIGN_EXAMPLE))
    assert config.workspace == WS
    assert config.allowed_paths == (RootSpec("/data", "ro"),)
    assert config.roots == (RootSpec(WS, "rw"), RootSpec("/data", "ro"))
    assert config.policy.tool_modes == {
        "read_file": "allow", "delete_file": "deny", "write_file": "supervised",
    }
    assert config.policy.rules == (
        Rule("no-build-output", "deny", ("write_file", "edit_file"), ("dist/**",)),
    )
    assert config.limits == Limits(max_read_bytes=262144, timeout_s=10.0)
    assert config.sandbox == SandboxOptions(workers=2, require=())
    assert config.audit_path == f"{WS}/corral-audit.jsonl"
    assert config.source == CONFIG
    assert set(config.policy.protected_paths) == {CONFIG, f"{WS}/corral-audit.jsonl"}


def test_empty_file_gives_defaults(tree: FakeFilesystem) -> None:
    config = load_config(write(tree, ""))
    assert config == Config(
        workspace=WS, policy=Policy(protected_paths=(CONFIG,)), source=CONFIG,
    )
    assert config.roots == (RootSpec(WS, "rw"),)


def test_relative_paths_are_taken_from_the_config_directory(tree: FakeFilesystem) -> None:
    os.chdir("/data")
    path = write(tree, """
[workspace]
root = "proj"
allowed_paths = ["other", { path = "../../data", mode = "rw" }]
[audit]
path = "logs/audit.jsonl"
""", "/home/u/corral.toml")
    config = load_config(path)
    assert config.workspace == WS
    assert config.allowed_paths == (RootSpec("/home/u/other", "ro"), RootSpec("/data", "rw"))
    assert config.audit_path == "/home/u/logs/audit.jsonl"


def test_read_only_makes_the_workspace_root_ro(tree: FakeFilesystem) -> None:
    config = load_config(write(tree, "[workspace]\nread_only = true\n"))
    assert config.policy.read_only
    assert config.roots == (RootSpec(WS, "ro"),)
    assert config.policy.tool_mode("write_file", writes=True) == "deny"


def test_roots_are_resolved_through_symlinks(tree: FakeFilesystem) -> None:
    tree.create_symlink("/home/u/link", "/home/u/other")
    config = load_config(write(tree, '[workspace]\nallowed_paths = ["/home/u/link"]\n'))
    assert config.allowed_paths == (RootSpec("/home/u/other", "ro"),)


def test_rules_default_to_every_tool_and_keep_their_order(tree: FakeFilesystem) -> None:
    config = load_config(write(tree, """
[[rules]]
name = "ask-src"
action = "supervised"
paths = ["src/**"]
[[rules]]
name = "no-src"
action = "deny"
paths = ["src/**"]
"""))
    assert [rule.name for rule in config.policy.rules] == ["ask-src", "no-src"]
    decision = config.policy.decide("grep", config.roots[0], "src/a.py", write=False)
    assert decision == Decision("supervised", "ask-src")


def test_find_config(tree: FakeFilesystem) -> None:
    assert find_config(WS) is None
    write(tree, "")
    assert find_config(WS) == CONFIG
    tree.create_dir("/home/u/other/corral.toml")
    assert find_config("/home/u/other") is None  # a directory is not a config


def test_resolve_roots_for_hosts_without_a_file(tree: FakeFilesystem) -> None:
    assert resolve_roots(WS, [RootSpec("/data", "ro")]) == (WS, (RootSpec("/data", "ro"),))
    with pytest.raises(ConfigError, match="system paths"):
        resolve_roots("/etc")


def test_missing_file(tree: FakeFilesystem) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(f"{WS}/nope.toml")
    assert str(caught.value).startswith(f"{WS}/nope.toml: cannot read the config file")


# Each case: the file's text and fragments its error message must contain (besides
# the file's path, checked for all): the key and what is allowed.
ERRORS = [
    ("a = 1\nx = = 2\n", ["invalid TOML", "line 2"]),
    ("[toolz]\n", ["[toolz]", "unknown section", "workspace, tools, rules, policy"]),
    ("workspace = 5\n", ["[workspace]", "expected a table, got an integer"]),
    ("[workspace]\nrot = '.'\n", ["[workspace] rot", "unknown key", "root, read_only"]),
    ("[workspace]\nread_only = 'yes'\n", ["[workspace] read_only", "expected true or false"]),
    ("[workspace]\nroot = ''\n", ["[workspace] root", "non-empty string"]),
    ("[workspace]\nroot = 'missing'\n", ["[workspace] root", "not an existing directory"]),
    ("[workspace]\nroot = '/proc'\n", ["[workspace] root", "system paths", "/proc, /sys"]),
    ("[workspace]\nroot = '/'\n", ["[workspace] root", "'/' is not allowed"]),
    ("[workspace]\nallowed_paths = '/data'\n", ["[workspace] allowed_paths", "expected an array"]),
    ("[workspace]\nallowed_paths = [5]\n",
     ["[workspace] allowed_paths[0]", "a table {path, mode} or a path string"]),
    ("[workspace]\nallowed_paths = [{ mode = 'ro' }]\n",
     ["[workspace] allowed_paths[0].path", "missing"]),
    ("[workspace]\nallowed_paths = [{ path = '/data', mode = 'rwx' }]\n",
     ["[workspace] allowed_paths[0].mode", "expected one of 'rw', 'ro', got 'rwx'"]),
    ("[workspace]\nallowed_paths = [{ path = '/data', writable = true }]\n",
     ["[workspace] allowed_paths[0] writable", "unknown key", "path, mode"]),
    ("[workspace]\nallowed_paths = ['/etc']\n", ["[workspace] allowed_paths[0].path", "system"]),
    ("[workspace]\nallowed_paths = ['/nowhere']\n",
     ["[workspace] allowed_paths[0].path", "/nowhere is not an existing directory"]),
    ("[workspace]\nallowed_paths = ['/data', '/data']\n",
     ["[workspace] allowed_paths", "/data is listed twice"]),
    ("[workspace]\nallowed_paths = ['sub']\n",
     ["[workspace] allowed_paths", "root /home/u/proj/sub lies inside root /home/u/proj",
      "two spellings"]),
    ("[workspace]\nread_only = true\nallowed_paths = [{ path = 'sub', mode = 'rw' }]\n",
     ["[workspace] allowed_paths", "root /home/u/proj/sub lies inside root /home/u/proj"]),
    ("[workspace]\nallowed_paths = [{ path = 'sub', mode = 'rw' }]\n",
     ["[workspace] allowed_paths", "root /home/u/proj/sub lies inside root /home/u/proj"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = ['a']\naccess = ['exec']\n",
     ["[[rules]] 'r' access[0]", "expected one of 'read', 'write', 'list', got 'exec'"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = ['a']\naccess = 'read'\n",
     ["[[rules]] 'r' access", "expected an array"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = ['a']\naccess = []\ntools = []\n",
     ["[[rules]] 'r' tools", "empty"]),
    ("[policy]\nhardlinks = 'maybe'\n",
     ["[policy] hardlinks", "expected one of 'allow', 'deny', got 'maybe'"]),
    ("[tools]\nreed_file = 'allow'\n",
     ["[tools] reed_file", "unknown key", "read_file, write_file, edit_file"]),
    ("[tools]\nwrite_file = 'maybe'\n",
     ["[tools] write_file", "expected one of 'allow', 'deny', 'supervised', got 'maybe'"]),
    ("[tools]\nwrite_file = true\n", ["[tools] write_file", "got True"]),
    ("rules = 5\n", ["[[rules]]", "expected an array"]),
    ("[rules]\nname = 'x'\n", ["[[rules]]", "expected an array, got a table"]),
    ("[[rules]]\naction = 'deny'\npaths = ['a']\n", ["[[rules]] #1 name", "missing"]),
    ("[[rules]]\nname = 'r'\npaths = ['a']\n", ["[[rules]] #1 action", "missing"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\n", ["[[rules]] #1 paths", "missing"]),
    ("[[rules]]\nname = 'r'\naction = 'block'\npaths = ['a']\n",
     ["[[rules]] 'r' action", "expected one of 'allow', 'deny', 'supervised', got 'block'"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npath = ['a']\n",
     ["[[rules]] #1 path", "unknown key", "name, action, tools, access, paths"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = ['a']\ntools = ['cat']\n",
     ["[[rules]] 'r' tools", "expected one of '*', 'read_file'", "got 'cat'"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = ['a']\ntools = []\n",
     ["[[rules]] 'r' tools", "empty"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = []\n", ["[[rules]] 'r' paths", "empty"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = 'a'\n",
     ["[[rules]] 'r' paths", "expected an array of strings"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = ['../a']\n",
     ["[[rules]] 'r' paths", "'..' never matches"]),
    ("[[rules]]\nname = 'r'\naction = 'deny'\npaths = ['a']\n"
     "[[rules]]\nname = 'r'\naction = 'allow'\npaths = ['b']\n",
     ["[[rules]] 'r' name", "repeated"]),
    ("[policy]\ndefault_action = 'permit'\n",
     ["[policy] default_action", "expected one of 'allow', 'deny', 'supervised', got 'permit'"]),
    ("[policy]\npath_regex = '.*'\n", ["[policy] path_regex", "expected an array of strings"]),
    ("[policy]\npath_regex = ['ok', '(unclosed']\n",
     ["[policy] path_regex[1]", "invalid path_regex '(unclosed'"]),
    ("[policy]\nregex = []\n",
     ["[policy] regex", "unknown key", "default_action, path_regex, hardlinks"]),
    ("[limits]\nmax_reed_bytes = 1\n",
     ["[limits] max_reed_bytes", "unknown key", "max_read_bytes, max_write_bytes"]),
    ("[limits]\nmax_read_bytes = -1\n", ["[limits] max_read_bytes", "positive integer, got -1"]),
    ("[limits]\nmax_file_bytes = '64M'\n", ["[limits] max_file_bytes", "got '64M'"]),
    ("[limits]\nmax_list_entries = true\n", ["[limits] max_list_entries", "got True"]),
    ("[limits]\nmax_write_bytes = 1.5\n", ["[limits] max_write_bytes", "positive integer"]),
    ("[limits]\ntimeout_s = 0\n", ["[limits] timeout_s", "positive number, got 0"]),
    ("[sandbox]\nworkers = 0\n", ["[sandbox] workers", "positive integer, got 0"]),
    ("[sandbox]\nrequire = ['apparmor']\n",
     ["[sandbox] require[0]", "expected one of 'landlock', 'seccomp'", "got 'apparmor'"]),
    ("[sandbox]\nrequire = 'landlock'\n", ["[sandbox] require", "expected an array"]),
    ("[sandbox]\nresolver = 'fast'\n",
     ["[sandbox] resolver", "expected one of 'auto', 'openat2', 'walk', got 'fast'"]),
    ("[sandbox]\ndurability = 'fdatasync'\n",
     ["[sandbox] durability", "expected one of 'fsync', 'none', got 'fdatasync'"]),
    ("[sandbox]\npool = 2\n", ["[sandbox] pool", "unknown key", "workers, require"]),
    ("[audit]\npath = 5\n", ["[audit] path", "non-empty string, got 5"]),
    ("[audit]\nfile = 'a'\n", ["[audit] file", "unknown key", "allowed keys: path"]),
]


@pytest.mark.parametrize(("text", "fragments"), ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_error_messages_name_file_key_and_allowed_values(
    tree: FakeFilesystem, text: str, fragments: list[str]
) -> None:
    tree.create_dir(f"{WS}/sub")
    with pytest.raises(ConfigError) as caught:
        load_config(write(tree, text))
    message = str(caught.value)
    assert message.startswith(f"{CONFIG}: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert caught.value.file == CONFIG


def test_resolve_roots_errors_name_arguments_without_a_file(tree: FakeFilesystem) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_roots(WS, [RootSpec("/data", "ro"), RootSpec("/nowhere", "ro")])
    assert str(caught.value) == "allowed_paths[1].path: /nowhere is not an existing directory"
    with pytest.raises(ConfigError, match=r"^workspace: root '/proc/1' is not allowed"):
        resolve_roots("/proc/1")


@pytest.mark.parametrize("modes", [("rw", "rw"), ("rw", "ro"), ("ro", "rw"), ("ro", "ro")])
def test_no_root_lies_inside_another(tree: FakeFilesystem, modes: tuple[str, str]) -> None:
    tree.create_dir(f"{WS}/vendor")
    outer, inner = modes
    with pytest.raises(ConfigError, match=f"root {WS}/vendor lies inside root {WS}"):
        resolve_roots(WS, [RootSpec(f"{WS}/vendor", inner)], read_only=outer == "ro")
    with pytest.raises(ConfigError, match=f"root {WS} lies inside root /home/u"):
        resolve_roots(WS, [RootSpec("/home/u", inner)], read_only=outer == "ro")
    tree.create_dir(f"{WS}-old")  # a sibling sharing a prefix is not inside
    assert resolve_roots(WS, [RootSpec(f"{WS}-old", inner)])[1] == (RootSpec(f"{WS}-old", inner),)


def test_rules_may_name_access_kinds(tree: FakeFilesystem) -> None:
    config = load_config(write(tree, """
[[rules]]
name = "no-secret-reads"
action = "deny"
access = ["read"]
paths = ["secret/**"]

[[rules]]
name = "stat-and-writes"
action = "supervised"
tools = ["stat_file"]
access = ["write", "list"]
paths = ["build/**"]

[policy]
hardlinks = "deny"
"""))
    first, second = config.policy.rules
    assert (first.tools, first.access) == ((), ("read",))
    assert (second.tools, second.access) == (("stat_file",), ("write", "list"))
    assert config.policy.hardlinks == "deny"
    assert load_config(write(tree, "", f"{WS}/empty.toml")).policy.hardlinks == "allow"


@pytest.mark.parametrize("make", [
    lambda: Limits(max_file_bytes=-5),
    lambda: Limits(timeout_s=0),
    lambda: Limits(max_read_bytes=True),
    lambda: SandboxOptions(workers=0),
    lambda: SandboxOptions(durability="sometimes"),
    lambda: SandboxOptions(spin="yes"),
    lambda: HistoryOptions(max_age_days=float("inf")),
])
def test_value_types_refuse_what_no_sandbox_can_run_with(make) -> None:
    """Limits(max_file_bytes=-5, timeout_s=0) used to be taken, and failed later."""
    with pytest.raises(ValueError, match="must be"):
        make()
