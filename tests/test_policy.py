"""Pure tests of corral.policy: tool modes, globs, rule order, built-ins, whitelist."""

from __future__ import annotations

import json
import re

import pytest

from corral.policy import (
    BUILTIN_NAMES,
    DECISION_CACHE_SIZE,
    PATH_REGEX_RULE,
    PROTECT_RULE,
    Decision,
    Policy,
    PolicyError,
    RootSpec,
    Rule,
    access_kinds,
    check_root,
    glob_to_regex,
)

ROOT = RootSpec("/home/u/ws", "rw")


def decide(policy: Policy, rel: str, *, tool: str = "read_file", write: bool = False,
           root: RootSpec = ROOT) -> Decision:
    return policy.decide(tool, root, rel, write=write)


# -- tool modes ---------------------------------------------------------------


def test_tool_modes_default_allow_and_delete_off() -> None:
    policy = Policy(tool_modes={})
    assert policy.tool_mode("read_file", writes=False) == "allow"
    assert policy.tool_mode("write_file", writes=True) == "allow"
    assert policy.tool_mode("delete_file", writes=True) == "deny"


def test_tool_modes_explicit() -> None:
    policy = Policy({"delete_file": "allow", "write_file": "supervised", "grep": "deny"})
    assert policy.tool_mode("delete_file", writes=True) == "allow"
    assert policy.tool_mode("write_file", writes=True) == "supervised"
    assert policy.tool_mode("grep", writes=False) == "deny"


def test_read_only_denies_every_writer_even_if_allowed() -> None:
    policy = Policy({"write_file": "allow", "delete_file": "allow"}, read_only=True)
    assert policy.tool_mode("write_file", writes=True) == "deny"
    assert policy.tool_mode("delete_file", writes=True) == "deny"
    assert policy.tool_mode("read_file", writes=False) == "allow"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tool_modes": {"read_file": "maybe"}},
        {"default_action": "permit"},
        {"rules": (Rule("r", "block", ("*",), ("a",)),)},
        {"rules": (Rule("", "deny", ("*",), ("a",)),)},
        {"rules": (Rule("r", "deny", ("*",), ()),)},
        {"rules": (Rule("r", "deny", (), ("a",)),)},
        {"rules": (Rule("r", "deny", ("*",), ("a",)), Rule("r", "allow", ("*",), ("b",)))},
        {"rules": (Rule("r", "deny", ("*",), ("../x",)),)},
        {"path_regex": ("(unclosed",)},
    ],
)
def test_invalid_policies_raise(kwargs: dict) -> None:
    with pytest.raises(PolicyError):
        Policy(**kwargs)


# -- globs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("glob", "matching", "not_matching"),
    [
        ("dist/**", ["dist", "dist/a.js", "dist/x/y/z"], ["distx", "a/dist/b", "dist2/a"]),
        ("**/*.py", ["a.py", "x/y/a.py", ".hidden.py"], ["a.pyc", "a.py/b"]),
        ("src/*.c", ["src/a.c"], ["src/x/a.c", "a.c"]),
        ("a/**/b", ["a/b", "a/x/b", "a/x/y/b"], ["a/xb", "b"]),
        ("file?.txt", ["file1.txt"], ["file.txt", "file12.txt", "file/.txt"]),
        ("[!a]b", ["cb", ".b"], ["ab", "/b"]),
        ("[]x]y", ["]y", "xy"], ["ay"]),
        ("[a-c]z", ["bz"], ["dz", "-z"]),
        ("a[b", ["a[b"], ["ab"]),
        ("**", [".", "a", "a/b/c"], []),
        ("./src/**", ["src/a"], ["./src/a"]),
        ("name\nwith newline", ["name\nwith newline"], ["name"]),
    ],
)
def test_glob_semantics(glob: str, matching: list[str], not_matching: list[str]) -> None:
    pattern = re.compile(glob_to_regex(glob), re.DOTALL)
    for path in matching:
        assert pattern.fullmatch(path), (glob, path)
    for path in not_matching:
        assert not pattern.fullmatch(path), (glob, path)


# -- user rules ---------------------------------------------------------------


def test_first_matching_user_rule_wins_then_default() -> None:
    policy = Policy(
        rules=(
            Rule("docs-ok", "allow", ("*",), ("dist/docs/**",)),
            Rule("no-dist", "deny", ("write_file", "edit_file"), ("dist/**",)),
            Rule("ask-src", "supervised", ("*",), ("src/**",)),
        ),
        default_action="deny",
    )
    assert decide(policy, "dist/docs/a.md", tool="write_file", write=True) == Decision(
        "allow", "docs-ok")
    assert decide(policy, "dist/a.js", tool="write_file", write=True) == Decision(
        "deny", "no-dist")
    # The rule names write_file and edit_file only: append_file falls to the default.
    assert decide(policy, "dist/a.js", tool="append_file", write=True) == Decision("deny", None)
    assert decide(policy, "src/app.py") == Decision("supervised", "ask-src")
    assert decide(policy, "README.md") == Decision("deny", None)


def test_absolute_glob_matches_root_plus_path() -> None:
    policy = Policy(rules=(Rule("data-ro", "deny", ("*",), ("/data/**",)),))
    data = RootSpec("/data", "ro")
    assert decide(policy, "x/y.csv", root=data) == Decision("deny", "data-ro")
    assert decide(policy, ".", root=data) == Decision("deny", "data-ro")
    assert decide(policy, "data/x") == Decision("allow", None)  # relative to the workspace


def test_default_action_supervised() -> None:
    assert decide(Policy(default_action="supervised"), "a.txt") == Decision("supervised", None)


# -- built-in rules -----------------------------------------------------------


SECRETS = [
    (".ssh/id_rsa", "block-ssh"),
    (".ssh", "block-ssh"),
    ("home/x/.ssh/authorized_keys", "block-ssh"),
    (".gnupg/secring.gpg", "block-gnupg"),
    (".aws/credentials", "block-aws-credentials"),
    ("deep/.aws/credentials", "block-aws-credentials"),
    (".netrc", "block-netrc"),
    (".git-credentials", "block-git-credentials"),
    (".env", "block-dotenv"),
    ("a/b/.env", "block-dotenv"),
    (".env.production", "block-dotenv"),
    (".ENV", "block-dotenv"),
    (".bash_history", "block-shell-history"),
    ("u/.zsh_history", "block-shell-history"),
    (".python_history", "block-shell-history"),
    (".local/share/fish/fish_history", "block-shell-history"),
    ("id_rsa", "block-private-keys"),
    ("keys/id_ed25519", "block-private-keys"),
    ("id_ecdsa.pub", "block-private-keys"),
    ("tls/server.pem", "block-private-keys"),
    ("server.key", "block-private-keys"),
]


@pytest.mark.parametrize(("rel", "rule"), SECRETS)
def test_builtin_secrets_denied_for_reads_and_writes(rel: str, rule: str) -> None:
    policy = Policy()
    assert decide(policy, rel) == Decision("deny", rule)
    assert decide(policy, rel, tool="write_file", write=True) == Decision("deny", rule)


@pytest.mark.parametrize(
    "rel", ["src/app.py", "environment.py", ".github/ISSUE_TEMPLATE.md", ".gitignore",
            "ssh/config", "history.md", "keys.txt", "id.txt", "profile.py", "bashrc",
            ".vscode/extensions.json", "workflows/ci.yml", "src/corral.toml.example"]
)
def test_ordinary_paths_allowed(rel: str) -> None:
    policy = Policy()
    assert decide(policy, rel) == Decision("allow", None)
    assert decide(policy, rel, tool="write_file", write=True) == Decision("allow", None)


@pytest.mark.parametrize("rel", [".git", ".git/hooks/pre-commit", ".git/config", "sub/.git/HEAD"])
def test_git_writes_denied_reads_allowed(rel: str) -> None:
    policy = Policy()
    denied = Decision("deny", "block-git-writes")
    assert decide(policy, rel, tool="write_file", write=True) == denied
    assert decide(policy, rel) == Decision("allow", None)


AUTORUN = [
    ".bashrc", ".zshrc", ".profile", ".bash_profile", "home/u/.zshenv", ".gitconfig",
    ".config/git/config", ".envrc", "sub/.envrc", ".aws/config", ".vscode/tasks.json",
    ".vscode/settings.json", ".github/workflows/ci.yml", ".github/workflows",
    ".GITHUB/Workflows/x.yaml", ".config/fish/config.fish", ".config/autostart/a.desktop",
    ".vimrc", ".npmrc", ".hg/hgrc", ".gitlab-ci.yml", "lib/sitecustomize.py", ".inputrc",
]


@pytest.mark.parametrize("rel", AUTORUN)
def test_files_that_run_code_are_not_written_but_read(rel: str) -> None:
    policy = Policy()
    denied = Decision("deny", "block-autorun-writes")
    for tool in ("write_file", "edit_file", "append_file", "move_file", "delete_file"):
        assert decide(policy, rel, tool=tool, write=True) == denied
    assert decide(policy, rel) == Decision("allow", None)


def test_autorun_protection_is_replaced_by_name_only() -> None:
    broad = Policy(rules=(Rule("anything", "allow", ("*",), ("**",)),))
    assert decide(broad, ".bashrc", tool="write_file", write=True).action == "deny"
    named = Policy(rules=(Rule("block-autorun-writes", "deny", ("*",), (".github/**",)),))
    assert decide(named, ".bashrc", tool="write_file", write=True) == Decision("allow", None)


def test_builtins_cover_a_root_inside_a_secret_directory() -> None:
    inside = RootSpec("/home/u/.ssh", "ro")
    assert decide(Policy(), "config", root=inside) == Decision("deny", "block-ssh")
    assert decide(Policy(), ".", root=inside) == Decision("deny", "block-ssh")


def test_broad_user_allow_rule_does_not_unblock_builtins() -> None:
    policy = Policy(rules=(Rule("everything", "allow", ("*",), ("**",)),), default_action="deny")
    assert decide(policy, ".env") == Decision("deny", "block-dotenv")
    assert decide(policy, "a.txt") == Decision("allow", "everything")


def test_user_rule_with_builtin_name_replaces_it() -> None:
    policy = Policy(rules=(Rule("block-dotenv", "deny", ("*",), ("**/.env",)),))
    assert decide(policy, ".env.example") == Decision("allow", None)
    assert decide(policy, "x/.env") == Decision("deny", "block-dotenv")
    assert decide(policy, ".ssh/id_rsa") == Decision("deny", "block-ssh")  # others stay


def test_builtin_names_are_stable() -> None:
    assert {
        "block-ssh", "block-gnupg", "block-aws-credentials", "block-netrc",
        "block-git-credentials", "block-dotenv", "block-shell-history", "block-private-keys",
        "block-git-writes", "block-autorun-writes", PROTECT_RULE,
    } == BUILTIN_NAMES


def test_protected_paths_and_config_file_are_never_written() -> None:
    policy = Policy(protected_paths=("/home/u/ws/logs/audit.jsonl",))
    write = {"tool": "write_file", "write": True}
    assert decide(policy, "logs/audit.jsonl", **write) == Decision("deny", PROTECT_RULE)
    assert decide(policy, "corral.toml", **write) == Decision("deny", PROTECT_RULE)
    assert decide(policy, "logs/audit.jsonl") == Decision("allow", None)
    for nested in ("sub/corral.toml", "a/b/c/Corral.toml"):
        assert decide(policy, nested, **write) == Decision("deny", PROTECT_RULE)
    assert decide(policy, "sub/corral.toml") == Decision("allow", None)


def test_protected_paths_cover_what_lies_beneath_and_cannot_be_unlocked() -> None:
    protected = ("/home/u/ws/logs/audit.jsonl", "/home/u/ws/state/history/")
    write = {"tool": "write_file", "write": True}
    unlocked = Policy(
        rules=(Rule(PROTECT_RULE, "allow", ("*",), ("nothing",)),), protected_paths=protected
    )
    # Replacing the built-in by name lets corral.toml be written (the operator's
    # choice), never the audit log or the history store.
    assert decide(unlocked, "sub/corral.toml", **write) == Decision("allow", None)
    assert decide(unlocked, "logs/audit.jsonl", **write) == Decision("deny", PROTECT_RULE)
    for rel in ("state/history", "state/history/ab/cd.json"):
        assert decide(unlocked, rel, **write) == Decision("deny", PROTECT_RULE)
    assert decide(unlocked, "state/history-old", **write) == Decision("allow", None)
    more = Policy().protecting("/home/u/ws/logs")
    assert more.protected_paths == ("/home/u/ws/logs",)
    assert decide(more, "logs/a", **write) == Decision("deny", PROTECT_RULE)


# -- path_regex ---------------------------------------------------------------


def test_path_regex_whitelist() -> None:
    policy = Policy(
        rules=(Rule("always-readme", "allow", ("*",), ("README.md",)),),
        path_regex=(r"\.py$", r"^/data/", r"^\.$"),
    )
    assert decide(policy, "src/a.py") == Decision("allow", None)  # search, not fullmatch
    assert decide(policy, ".") == Decision("allow", None)
    assert decide(policy, "a.txt") == Decision("deny", PATH_REGEX_RULE)
    assert decide(policy, "README.md") == Decision("allow", "always-readme")
    assert decide(policy, "x.csv", root=RootSpec("/data", "ro")) == Decision("allow", None)
    assert decide(policy, ".env.py") == Decision("deny", "block-dotenv")


# -- roots, serialisation, cache ---------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/proc", "/proc/self", "/sys/kernel", "/dev", "/etc", "/etc/ssh", "/run/user/1",
             "/var/run", "/var/run/docker", "/etc/../etc", "relative/dir"]
)
def test_system_and_relative_roots_refused(path: str) -> None:
    with pytest.raises(PolicyError, match="root"):
        check_root(path)


@pytest.mark.parametrize("path", ["/home/u/ws", "/procfs", "/etcetera/x", "/var/lib/x", "/tmp"])
def test_ordinary_roots_accepted(path: str) -> None:
    check_root(path)


def test_to_dict_round_trips_through_json() -> None:
    policy = Policy(
        {"write_file": "supervised"},
        rules=(Rule("no-dist", "deny", ("write_file",), ("dist/**",)),),
        default_action="deny",
        path_regex=(r"\.py$",),
        read_only=True,
        protected_paths=("/w/corral.toml",),
        workspace_rules=(Rule("ws-no-read", "deny", (), ("secret/**",), ("read",)),),
        hardlinks="deny",
    )
    again = Policy.from_dict(json.loads(json.dumps(policy.to_dict())))
    assert again == policy
    assert decide(again, "dist/a", tool="write_file", write=True) == Decision("deny", "no-dist")


def test_decision_cache_is_bounded_and_consistent() -> None:
    policy = Policy(rules=(Rule("odd", "deny", ("*",), ("**/*1",)),))
    for index in range(DECISION_CACHE_SIZE + 10):
        expected = "deny" if str(index).endswith("1") else "allow"
        assert decide(policy, f"f{index}").action == expected
        assert decide(policy, f"f{index}").action == expected
    assert len(policy._matcher.cache) <= DECISION_CACHE_SIZE


SHORTCUT_NAMES = [
    "a", ".ssh", ".SSH", ".\u017fsh", "ID_RSA.pub", "x.PEM", "x.pe", ".Env.local", ".envrc",
    ".GIT", "CORRAL.TOML", ".bash_history", "credentials", ".AWS", "k.\u212aey", "é", "_NETRC",
]


@pytest.mark.parametrize("root", ["/home/u/ws", "/home/u/.ssh/ws"])
def test_the_text_shortcut_never_changes_a_builtin_decision(root: str) -> None:
    fast = Policy()
    slow = Policy()
    matchers = slow._matcher.builtins._matchers
    matchers[:] = [(*matcher[:4], None) for matcher in matchers]
    spec = RootSpec(root, "rw")
    denied = 0
    for first in SHORTCUT_NAMES:
        for second in SHORTCUT_NAMES:
            for write in (False, True):
                rel = f"{first}/{second}"
                expected = decide(slow, rel, write=write, root=spec)
                assert decide(fast, rel, write=write, root=spec) == expected, rel
                denied += expected.action == "deny"
    assert denied  # the names do hit the rules


def test_case_folding_letters_outside_ascii_still_match() -> None:
    # re.IGNORECASE matches a long s with "s" and the Kelvin sign with "k"
    assert decide(Policy(), ".\u017fsh/id") == Decision("deny", "block-ssh")
    assert decide(Policy(), "x.\u212aey") == Decision("deny", "block-private-keys")


# -- access kinds ---------------------------------------------------------------


NO_READING_SECRET = Policy(rules=(Rule("no-secret-reads", "deny", (), ("secret/**",), ("read",)),))
DENIED_READ = Decision("deny", "no-secret-reads")


@pytest.mark.parametrize(("tool", "write", "denied"), [
    ("read_file", False, True), ("read_multiple_files", False, True), ("grep", False, True),
    ("edit_file", True, True), ("copy_file", False, True), ("move_file", True, True),
    ("copy_file", True, False), ("write_file", True, False), ("append_file", True, False),
    ("list_directory", False, False), ("search_files", False, False),
    ("stat_file", False, False), ("create_directory", True, False),
    ("delete_file", True, False),
])
def test_access_read_covers_every_tool_that_returns_content(
    tool: str, write: bool, denied: bool
) -> None:
    decision = decide(NO_READING_SECRET, "secret/a.txt", tool=tool, write=write)
    assert decision == (DENIED_READ if denied else Decision("allow", None))


def test_access_kinds_of_each_tool() -> None:
    assert access_kinds("read_file", write=False) == {"read"}
    assert access_kinds("grep", write=False) == {"read", "list"}
    assert access_kinds("list_directory", write=False) == {"list"}
    assert access_kinds("edit_file", write=True) == {"read", "write"}
    assert access_kinds("copy_file", write=False) == {"read"}
    assert access_kinds("copy_file", write=True) == {"write"}
    assert access_kinds("write_file", write=True) == {"write"}
    assert access_kinds("some_future_tool", write=False) == {"read", "list"}


def test_access_beside_tools_is_a_union() -> None:
    rule = Rule("r", "deny", ("stat_file",), ("x/**",), ("write",))
    policy = Policy(rules=(rule,))
    assert decide(policy, "x/a", tool="stat_file").action == "deny"
    assert decide(policy, "x/a", tool="write_file", write=True).action == "deny"
    assert decide(policy, "x/a", tool="read_file").action == "allow"
    with pytest.raises(PolicyError, match="access must name"):
        Policy(rules=(Rule("bad", "deny", (), ("x",), ("execute",)),))
    with pytest.raises(PolicyError, match="tool name, '\\*' or access kind"):
        Policy(rules=(Rule("none", "deny", (), ("x",), ()),))


# -- workspace rules narrow only ------------------------------------------------


def test_workspace_rules_only_make_a_decision_stricter() -> None:
    operator = Rule("docs-free", "allow", ("*",), ("docs/**",))
    gated = Rule("ws-gate", "supervised", ("*",), ("docs/**", "src/**"))
    sealed = Rule("ws-seal", "deny", ("*",), ("docs/private/**", "vendor/**"))
    policy = Policy(
        rules=(operator, Rule("op-deny", "deny", ("*",), ("src/gen/**",))),
        workspace_rules=(sealed, gated),
    )
    assert decide(policy, "docs/a.md") == Decision("supervised", "ws-gate")
    assert decide(policy, "docs/private/a.md") == Decision("deny", "ws-seal")
    assert decide(policy, "src/gen/x.py") == Decision("deny", "op-deny")  # stays deny
    assert decide(policy, "vendor/x") == Decision("deny", "ws-seal")
    assert decide(policy, "other") == Decision("allow", None)
    assert decide(policy, ".env") == Decision("deny", "block-dotenv")


@pytest.mark.parametrize("rule", [
    Rule("ws-allow", "allow", ("*",), ("**",)),
    Rule("block-ssh", "deny", ("*",), ("nothing",)),
])
def test_a_workspace_rule_cannot_allow_or_replace_a_builtin(rule: Rule) -> None:
    with pytest.raises(PolicyError, match="must deny or supervise under a new name"):
        Policy(workspace_rules=(rule,))
    with pytest.raises(PolicyError, match="unique"):
        Policy(rules=(Rule("x", "deny", ("*",), ("a",)),),
               workspace_rules=(Rule("x", "deny", ("*",), ("b",)),))
