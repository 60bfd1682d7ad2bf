"""Pure policy: tool modes, path rules, a regex whitelist and built-in deny rules.

No I/O. Decisions are made on the *resolved* path relative to its root (the fs
guard hands it over after opening), so a symlink `notes.txt -> .env` is decided
as `.env`. Order for one path: the built-in deny rules, then the user rules
(first match wins), the `path_regex` whitelist, then `default_action`. Built-ins
come first so that only a user rule carrying a built-in's *name* can override it
(it replaces that built-in and takes its place among the user rules): a broad
`allow **` rule must not unblock ~/.ssh by accident. A name on the way to a path
that is missing (a write creates it) or not a directory is decided with that
path: only a deny that comes before the path's own decision refuses it
(Policy.on_the_way).

Glob syntax (rule `paths`): `*` and `?` stay within one path component, `[...]`
is a character class, `**` is any number of whole components (zero included, so
`dist/**` matches `dist` itself and everything beneath it). A glob is matched
against the whole root-relative path (`"."` is the root itself); a glob that
starts with `/` is matched against the absolute path (root + relative path).
Dotfiles are not special: `*` matches `.env`.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from corral.errors import PolicyError
from corral.globs import compile_globs, glob_to_regex
from corral.tool_table import ROWS, TABLE

ACTIONS = ("allow", "deny", "supervised")
ROOT_MODES = ("rw", "ro")

# Never roots: they expose the kernel, devices, host config or live sockets, and
# "/" holds all of them.
SYSTEM_PATHS = ("/proc", "/sys", "/dev", "/etc", "/run", "/var/run")

DEFAULT_OFF = frozenset(row.name for row in ROWS if row.default_off)  # unless [tools] enables them

PATH_REGEX_RULE = "path-regex"  # the rule name a whitelist miss reports
PROTECT_RULE = "protect-corral-files"  # writes to corral.toml and Policy.protected_paths
HARDLINKS_RULE = "hardlinks"  # reads refused under [policy] hardlinks = "deny"
HARDLINK_MODES = ("allow", "deny")

# The kinds of access a rule's `access` names. A tool's access to one path is
# decided from the tool and whether the path is written: `read` is every access
# that returns (or relocates) file content, `write` every change to the tree,
# `list` every access that returns names or metadata.
ACCESS_KINDS = ("read", "write", "list")
# Each tool's kinds are in its tool_table row; a tool not in the table (none
# today) is treated as doing everything it could.
_UNKNOWN_ACCESS = (frozenset({"read", "list"}), frozenset({"read", "write"}))

# Bounded so a long session over many paths cannot grow the cache without limit.
DECISION_CACHE_SIZE = 4096
# Compiled rules kept per process: a config's rules are compiled once, however many
# policies are built of them (a config check, the narrowed policy, each session).
RULE_CACHE_SIZE = 1024


READ_BEFORE_WRITE = ("off", "require")
EDIT_MATCH = ("tolerant", "exact")  # [edit] match, loosest first
# [workspace] fallback_encodings may name these: stateless codecs whose bytes
# round-trip character by character, so an edit changes only the bytes it targets
# (UTF-7 and the ISO-2022 family are stateful: a change can alter bytes after it).
LEGACY_ENCODINGS = (
    "cp1252", "latin-1", "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5", "iso8859-6",
    "iso8859-7", "iso8859-8", "iso8859-9", "iso8859-10", "iso8859-13", "iso8859-14",
    "iso8859-15", "iso8859-16", "cp1250", "cp1251", "cp1253", "cp1254", "cp1255", "cp1256",
    "cp1257", "cp1258", "cp437", "cp850", "cp852", "cp866", "koi8-r", "koi8-u", "mac-roman",
    "shift_jis", "cp932", "euc-jp", "euc-kr", "cp949", "gbk", "gb18030", "big5", "big5hkscs",
)


@dataclass(frozen=True)
class RootSpec:
    path: str  # absolute
    mode: str  # "rw" | "ro"


@dataclass(frozen=True)
class Rule:
    """A path rule; it applies to a call whose tool is in `tools` ("*": every
    tool) or whose access to the path is of a kind in `access`."""

    name: str
    action: str  # "allow" | "deny" | "supervised"
    tools: tuple[str, ...]  # tool names or "*"
    paths: tuple[str, ...]  # globs, "**" allowed; relative to the root (or absolute)
    access: tuple[str, ...] = ()  # "read" | "write" | "list"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.action, "tools": list(self.tools),
                "paths": list(self.paths), "access": list(self.access)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        return cls(data["name"], data["action"], tuple(data.get("tools", ("*",))),
                   tuple(data["paths"]), tuple(data.get("access", ())))


def access_kinds(tool: str, *, write: bool) -> frozenset[str]:
    """The kinds of access `tool` makes to a path it writes or does not write."""
    row = TABLE.get(tool)
    return (row.access if row is not None else _UNKNOWN_ACCESS)[write]


class Decision(NamedTuple):
    action: str  # "allow" | "deny" | "supervised"
    rule: str | None  # the rule's name, None for default_action / tool mode


class BuiltinRule(NamedTuple):
    """A built-in deny rule; `writes_only` rules leave reads alone."""

    name: str
    paths: tuple[str, ...]
    writes_only: bool = False


AUTORUN_FILES = (
    # shells (bash, sh, zsh, ksh, csh, fish) and readline
    "**/.bashrc", "**/.bash_profile", "**/.bash_login", "**/.bash_logout", "**/.profile",
    "**/.zshrc", "**/.zshenv", "**/.zprofile", "**/.zlogin", "**/.zlogout", "**/.kshrc",
    "**/.mkshrc", "**/.cshrc", "**/.tcshrc", "**/.login", "**/.logout", "**/.inputrc",
    "**/.config/fish/**",
    # desktop and user session start-up
    "**/.xprofile", "**/.xinitrc", "**/.xsession", "**/.xsessionrc", "**/.pam_environment",
    "**/.config/autostart/**", "**/.config/systemd/user/**", "**/.config/environment.d/**",
    # tools whose config names commands they run: git (aliases, hooks, filters,
    # core.pager), mercurial, direnv, aws (credential_process), npm (script-shell)
    "**/.gitconfig", "**/.config/git/**", "**/.hgrc", "**/.hg/hgrc", "**/.envrc",
    "**/.aws/config", "**/.npmrc",
    # editors and IDEs: init files and tasks run when a folder is opened
    "**/.vimrc", "**/.gvimrc", "**/.exrc", "**/.nvimrc", "**/.config/nvim/**", "**/.emacs",
    "**/.emacs.d/**", "**/.vscode/tasks.json", "**/.vscode/settings.json",
    "**/.vscode/launch.json",
    # CI run with the repository's secrets on the next push
    "**/.github/workflows/**", "**/.github/actions/**", "**/.gitlab-ci.yml",
    "**/.circleci/**",
    # Python runs these at every interpreter start when they lie on its path
    "**/sitecustomize.py", "**/usercustomize.py",
)

# Matched at any depth and case-insensitively (a case-folding file system would
# otherwise let `.ENV` through). Override one by giving a [[rules]] entry its name.
BUILTIN_RULES: tuple[BuiltinRule, ...] = (
    BuiltinRule("block-ssh", ("**/.ssh/**",)),
    BuiltinRule("block-gnupg", ("**/.gnupg/**",)),
    BuiltinRule("block-aws-credentials", ("**/.aws/credentials",)),
    BuiltinRule("block-netrc", ("**/.netrc", "**/_netrc")),
    BuiltinRule("block-git-credentials", ("**/.git-credentials",)),
    BuiltinRule("block-dotenv", ("**/.env", "**/.env.*")),
    BuiltinRule(
        "block-shell-history",
        ("**/.*history", "**/.histfile", "**/fish_history"),
    ),
    BuiltinRule(
        "block-private-keys",
        (
            "**/id_rsa*", "**/id_dsa*", "**/id_ecdsa*", "**/id_ed25519*",
            "**/*.pem", "**/*.key", "**/*.p12", "**/*.pfx",
        ),
    ),
    # A write under .git/ (hooks, config) runs code at the next human git command;
    # `.git` itself too: a worktree's `.git` file points git at another directory.
    BuiltinRule("block-git-writes", ("**/.git", "**/.git/**"), writes_only=True),
    # Files other programs run without asking: a shell's startup files, git's and
    # other tools' config that names commands, editor and IDE files that run tasks
    # when a folder opens, CI definitions run with the repository's secrets.
    BuiltinRule("block-autorun-writes", AUTORUN_FILES, writes_only=True),
    # The agent must not loosen the policy of a later session started anywhere in a
    # root; Policy.protected_paths adds the loaded config, the audit log and the
    # history store (those cannot be unprotected: see Policy._decide).
    BuiltinRule(PROTECT_RULE, ("**/corral.toml",), writes_only=True),
)
BUILTIN_NAMES = frozenset(rule.name for rule in BUILTIN_RULES)


def _absolute(root: RootSpec, rel: str) -> str:
    if rel == ".":
        return root.path
    return f"{root.path}{rel}" if root.path.endswith("/") else f"{root.path}/{rel}"


class _Compiled(NamedTuple):
    name: str
    action: str
    tools: frozenset[str] | None  # None: every tool
    access: frozenset[str]  # kinds of access the rule applies to, beside its tools
    relative: re.Pattern[str] | None  # matched against the root-relative path
    absolute: re.Pattern[str] | None  # matched against root + relative path

    def matches(self, tool: str, kinds: frozenset[str], rel: str, absolute: str) -> bool:
        by_tool = self.tools is None or tool in self.tools
        if not by_tool and self.access.isdisjoint(kinds):
            return False
        if self.relative is not None and self.relative.fullmatch(rel):
            return True
        return self.absolute is not None and self.absolute.fullmatch(absolute) is not None


def _check_action(value: object, what: str) -> None:
    if value not in ACTIONS:
        raise PolicyError(f"{what} must be one of {', '.join(ACTIONS)}; got {value!r}")


def check_rule(rule: Rule) -> None:
    """PolicyError if `rule` cannot be used (a bad action, glob or kind of access)."""
    _compile_rule(Rule(rule.name, rule.action, tuple(rule.tools), tuple(rule.paths),
                       tuple(rule.access)))


@functools.lru_cache(maxsize=RULE_CACHE_SIZE)
def _compile_rule(rule: Rule) -> _Compiled:
    if not rule.name:
        raise PolicyError("a rule needs a non-empty name")
    _check_action(rule.action, f"rule {rule.name!r} action")
    if not rule.paths:
        raise PolicyError(f"rule {rule.name!r} needs at least one path glob")
    if not rule.tools and not rule.access:
        raise PolicyError(f"rule {rule.name!r} needs at least one tool name, '*' or access kind")
    for kind in rule.access:
        if kind not in ACCESS_KINDS:
            raise PolicyError(
                f"rule {rule.name!r} access must name {', '.join(ACCESS_KINDS)}; got {kind!r}"
            )
    relative = compile_globs([g for g in rule.paths if not g.startswith("/")])
    absolute = compile_globs([g for g in rule.paths if g.startswith("/")])
    tools = None if "*" in rule.tools else frozenset(rule.tools)
    return _Compiled(rule.name, rule.action, tools, frozenset(rule.access), relative, absolute)


def _named_alternation(rules: list[BuiltinRule], anywhere: bool) -> tuple[str, dict[str, str]]:
    alternatives, names = [], {}
    for index, rule in enumerate(rules):
        globs = [g.removeprefix("**/") for g in rule.paths if g.startswith("**/") == anywhere]
        if globs:
            group = f"b{index}"
            names[group] = rule.name
            alternatives.append(f"(?P<{group}>{'|'.join(glob_to_regex(g) for g in globs)})")
    return "|".join(alternatives), names


def _needed_text(globs: list[str]) -> re.Pattern[str] | None:
    """A search for text of which every path a glob matches holds (lowercased) one
    piece, so that a path without any cannot match; None if some glob needs none.
    Only for plain globs: a class ([a-z]) or a non-ASCII character gets None."""
    pieces = []
    for glob in globs:
        if "[" in glob or not glob.isascii():
            return None
        fixed = [
            piece for component in glob.split("/") if component not in ("", ".", "**")
            for piece in re.split(r"[*?]", component)
        ]
        longest = max(fixed, key=len, default="")
        if not longest:
            return None
        pieces.append(re.escape(longest.lower()))
    return re.compile("|".join(pieces))


@functools.lru_cache(maxsize=64)
def _builtin_matcher(replaced: frozenset[str]) -> _BuiltinMatcher:
    """The built-ins but those `replaced`, compiled once per process: every policy
    (one per rule a config check builds, one per sandbox) shares it."""
    return _BuiltinMatcher([rule for rule in BUILTIN_RULES if rule.name not in replaced])


class _BuiltinMatcher:
    """The active built-in rules as one regex per kind, so a check costs one match.

    "**/" globs are matched against the absolute path, so a root that itself lies
    inside ~/.ssh or a .git directory is covered as well; the others are anchored
    at each root. Most paths hold none of the text the rules need (".ssh", ".pem",
    ...): one search of an ASCII path for it costs a fraction of the match.
    """

    def __init__(self, rules: list[BuiltinRule]) -> None:
        self._matchers: list[
            tuple[bool, re.Pattern[str], bool, dict[str, str], re.Pattern[str] | None]
        ] = []
        for writes_only in (False, True):
            group = [rule for rule in rules if rule.writes_only == writes_only]
            for anywhere in (False, True):
                source, names = _named_alternation(group, anywhere)
                if source:
                    # Lazy, so the outermost matching component names the rule.
                    prefix = "(?:.*?/)?" if anywhere else ""
                    pattern = re.compile(f"{prefix}(?:{source})", re.DOTALL | re.IGNORECASE)
                    needed = _needed_text([
                        g.removeprefix("**/") for rule in group for g in rule.paths
                        if g.startswith("**/") == anywhere
                    ])
                    self._matchers.append((writes_only, pattern, anywhere, names, needed))

    def match(self, rel: str, absolute: str, write: bool) -> str | None:
        for writes_only, pattern, anywhere, names, needed in self._matchers:
            if writes_only and not write:
                continue
            subject = absolute if anywhere else rel
            # IGNORECASE also folds a few non-ASCII letters onto ASCII ones (a long s
            # matches "s"): the shortcut is only taken for ASCII paths.
            if needed is not None and subject.isascii() and not needed.search(subject.lower()):
                continue
            found = pattern.fullmatch(subject)
            if found is not None:
                return names[found.lastgroup or ""]
        return None


def compile_path_regex(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except (re.error, OverflowError, RecursionError) as exc:  # a{4294967296}; deep nesting
            raise PolicyError(f"invalid path_regex {pattern!r}: {exc!s}") from None
    return tuple(compiled)


def check_root(path: str) -> None:
    """Refuse a root that is, or lies under, a system path (or is "/" itself).

    Pure and lexical: the caller passes the real (symlink-resolved) absolute path.
    """
    if not path.startswith("/"):
        raise PolicyError(f"root {path!r} must be an absolute path")
    normal = posixpath.normpath(path)
    if normal in ("/", "//"):
        raise PolicyError("root '/' is not allowed: it contains the system paths")
    for system in SYSTEM_PATHS:
        if normal == system or normal.startswith(system + "/"):
            raise PolicyError(
                f"root {path!r} is not allowed: system paths ({', '.join(SYSTEM_PATHS)}) "
                "are never roots"
            )


# How much an action restricts: a workspace config may only move a decision up.
STRICTNESS = {"allow": 0, "supervised": 1, "deny": 2}


def stricter(first: str, second: str) -> str:
    """The more restrictive of two actions."""
    return first if STRICTNESS[first] >= STRICTNESS[second] else second


class _Matcher:
    """A policy compiled for decide(): it runs on every path of every call."""

    def __init__(self, policy: Policy) -> None:
        self.replaced = BUILTIN_NAMES.intersection(rule.name for rule in policy.rules)
        self.rules = tuple(_compile_rule(rule) for rule in policy.rules)
        self.narrowing = tuple(_compile_rule(rule) for rule in policy.workspace_rules)
        self.protected = tuple(path.rstrip("/") or "/" for path in policy.protected_paths)
        self.regexes = compile_path_regex(policy.path_regex)
        self.default = Decision(policy.default_action, None)
        self.cache: dict[tuple[str, str, str, bool], Decision] = {}

    @functools.cached_property
    def builtins(self) -> _BuiltinMatcher:
        # At the first decision, not with the rest: the built-ins are ours and need no
        # checking, and their regexes (~20 ms) are compiled once per process, in the
        # zygote template for the workers; a host that only starts a sandbox and
        # passes its calls on (`corral call`) never decides a path itself.
        return _builtin_matcher(frozenset(self.replaced))


@dataclass(frozen=True)
class Policy:
    """What tools may run and which paths they may touch; JSON round-trips through
    to_dict/from_dict (the worker rebuilds it from that).

    `workspace_rules` come from an untrusted workspace corral.toml: the first one
    that matches a path can only make its decision stricter, never looser, and a
    built-in's name there replaces nothing (corral.config refuses such a file)."""

    tool_modes: dict[str, str] = field(default_factory=dict)  # tool -> allow|deny|supervised
    rules: tuple[Rule, ...] = ()
    default_action: str = "allow"
    path_regex: tuple[str, ...] = ()
    read_only: bool = False
    protected_paths: tuple[str, ...] = ()  # absolute real paths (and all beneath) no tool writes
    workspace_rules: tuple[Rule, ...] = ()
    hardlinks: str = "allow"  # "deny": reads of a file with more than one link are refused
    # "require": a write, edit or append of an existing file needs this session to have
    # read (or written) the file's current version
    read_before_write: str = "off"
    # [workspace] fallback_encodings: legacy encodings tried, in order, after UTF-8
    fallback_encodings: tuple[str, ...] = ()
    edit_match: str = "tolerant"  # [edit] match: "exact" turns tolerant matching off
    # [workspace] ignore: gitignore patterns listings and searches leave out (not a
    # denial: a named path is read as before)
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Normalise lists to tuples so a policy compares equal however it was built (the
        # frozen dataclass's way to convert a field), then compile once (_matcher).
        for name in ("rules", "workspace_rules"):
            object.__setattr__(self, name, tuple(
                Rule(r.name, r.action, tuple(r.tools), tuple(r.paths), tuple(r.access))
                for r in getattr(self, name)
            ))
        object.__setattr__(self, "path_regex", tuple(self.path_regex))
        object.__setattr__(self, "protected_paths", tuple(self.protected_paths))
        object.__setattr__(self, "fallback_encodings", tuple(self.fallback_encodings))
        object.__setattr__(self, "ignore", tuple(self.ignore))
        for tool, mode in self.tool_modes.items():
            _check_action(mode, f"tool mode of {tool!r}")
        _check_action(self.default_action, "default_action")
        if self.hardlinks not in HARDLINK_MODES:
            raise PolicyError(
                f"hardlinks must be one of {', '.join(HARDLINK_MODES)}; got {self.hardlinks!r}"
            )
        if self.read_before_write not in READ_BEFORE_WRITE:
            raise PolicyError(
                f"read_before_write must be 'off' or 'require', not {self.read_before_write!r}"
            )
        if self.edit_match not in EDIT_MATCH:
            raise PolicyError(f"edit_match must be 'tolerant' or 'exact', not {self.edit_match!r}")
        unknown = [name for name in self.fallback_encodings if name not in LEGACY_ENCODINGS]
        if unknown:
            raise PolicyError(f"fallback_encodings: {unknown[0]!r} is not one of "
                              f"{', '.join(LEGACY_ENCODINGS)}")
        names = Counter(rule.name for rule in (*self.rules, *self.workspace_rules))
        duplicates = sorted(name for name, count in names.items() if count > 1)
        if duplicates:
            raise PolicyError(f"rule names must be unique; repeated: {', '.join(duplicates)}")
        for rule in self.workspace_rules:
            if rule.action == "allow" or rule.name in BUILTIN_NAMES:
                raise PolicyError(
                    f"workspace rule {rule.name!r} must deny or supervise under a new name"
                )
        _ = self._matcher  # compiled now: a bad glob or regex fails here, not in a worker

    @functools.cached_property
    def _matcher(self) -> _Matcher:
        # cached_property stores into the instance's __dict__, beside the frozen fields
        return _Matcher(self)

    def warm(self) -> None:
        """Compile now what the first decision would (the built-in rules' regexes)."""
        _ = self._matcher.builtins

    def protecting(self, *paths: str) -> Policy:
        """This policy with more paths no tool may write, each with everything beneath
        it (the audit log, a history store): absolute real paths, symlinks resolved
        by the caller (decisions compare resolved paths)."""
        return replace(self, protected_paths=(*self.protected_paths, *paths))

    def tool_mode(self, tool: str, *, writes: bool) -> str:
        """Mode of a tool: read_only denies writers; DEFAULT_OFF ones denied unless enabled."""
        if self.read_only and writes:
            return "deny"
        default = "deny" if tool in DEFAULT_OFF else "allow"
        return self.tool_modes.get(tool, default)

    def disabled_reason(self, tool: str, *, writes: bool) -> str:
        """Why a tool whose mode is deny is off, and the setting that turns it on."""
        if self.read_only and writes:
            return (f"the tool {tool} writes and this workspace is read-only "
                    "([workspace] read_only = true).")
        if tool in self.tool_modes:
            return (f"the tool {tool} is disabled by policy ({tool} = \"deny\" in [tools]); "
                    f"set {tool} = \"allow\" there to enable it.")
        return (f"the tool {tool} is off by default; enable it with {tool} = \"allow\" "
                "(or \"supervised\") in [tools].")

    def decide(self, tool: str, root: RootSpec, rel: str, *, write: bool) -> Decision:
        """Decision for one resolved root-relative path: built-in deny rules (each
        replaced by a user rule of the same name), the protected paths, then user
        rules in order, then the path_regex whitelist, then default_action; a
        matching workspace rule then may make it stricter. A write into an "ro"
        root is decided by the caller (read_only error), not here."""
        key = (tool, root.path, rel, write)
        cache = self._matcher.cache
        decision = cache.get(key)
        if decision is None:
            decision = self._decide(tool, root, rel, write)
            if len(cache) >= DECISION_CACHE_SIZE:
                cache.clear()
            cache[key] = decision
        return decision

    def _decide(self, tool: str, root: RootSpec, rel: str, write: bool) -> Decision:
        rel = rel or "."
        absolute = _absolute(root, rel)
        kinds = access_kinds(tool, write=write)
        _, decision = self._ranked(tool, kinds, rel, absolute, write)
        if decision.action == "deny":
            return decision
        narrowing = self._narrowing(tool, kinds, rel, absolute)
        if narrowing is not None:
            rule = narrowing[1]
            if stricter(rule.action, decision.action) != decision.action:
                return Decision(rule.action, rule.name)
        return decision

    def on_the_way(
        self, tool: str, root: RootSpec, rel: str, target: str, *, write: bool
    ) -> Decision | None:
        """The deny that refuses `rel`, a name on the way to `target` that is missing
        (a write creates it) or is not a directory; None if nothing does.

        The target's rule decides: `rel` is refused only by a deny that comes before
        that rule (a built-in, a protected path, an earlier rule; the whitelist
        before default_action), or by a workspace rule before the first one that
        matches the target. So a write and the directories it creates are decided
        as one, and a denied name answers the same whether it exists or not."""
        rel, target = rel or ".", target or "."
        kinds = access_kinds(tool, write=write)
        here, there = _absolute(root, rel), _absolute(root, target)
        rank, decision = self._ranked(tool, kinds, rel, here, write)
        target_rank, target_decision = self._ranked(tool, kinds, target, there, write)
        if decision.action == "deny" and rank < target_rank:
            return decision
        if target_decision.action == "deny":
            return None  # the target's own check refuses it, and names it
        mine = self._narrowing(tool, kinds, rel, here)
        theirs = self._narrowing(tool, kinds, target, there)
        if mine is not None and mine[1].action == "deny" and (
            theirs is None or mine[0] < theirs[0]
        ):
            return Decision("deny", mine[1].name)
        return None

    def _ranked(
        self, tool: str, kinds: frozenset[str], rel: str, absolute: str, write: bool
    ) -> tuple[int, Decision]:
        """The operator's decision for one path, and the place of what decided it in
        the order: built-ins, protected paths, rules, the whitelist, default_action."""
        matcher = self._matcher
        builtin = matcher.builtins.match(rel, absolute, write)
        if builtin is not None:
            return -2, Decision("deny", builtin)
        # Not overridable, not even by a rule named after PROTECT_RULE: the loaded
        # config, the audit log and the history store are the operator's.
        if write and self._is_protected(absolute):
            return -1, Decision("deny", PROTECT_RULE)
        for index, rule in enumerate(matcher.rules):
            if rule.matches(tool, kinds, rel, absolute):
                return index, Decision(rule.action, rule.name)
        regexes = matcher.regexes
        if regexes and not any(r.search(rel) or r.search(absolute) for r in regexes):
            return len(matcher.rules), Decision("deny", PATH_REGEX_RULE)
        return len(matcher.rules) + 1, matcher.default

    def _narrowing(
        self, tool: str, kinds: frozenset[str], rel: str, absolute: str
    ) -> tuple[int, _Compiled] | None:
        """The first workspace rule that matches the path, and its place."""
        for index, rule in enumerate(self._matcher.narrowing):
            if rule.matches(tool, kinds, rel, absolute):
                return index, rule
        return None

    def _is_protected(self, absolute: str) -> bool:
        return any(
            absolute == path or absolute.startswith(path + "/")
            for path in self._matcher.protected
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_modes": dict(self.tool_modes),
            "rules": [rule.to_dict() for rule in self.rules],
            "default_action": self.default_action,
            "path_regex": list(self.path_regex),
            "read_only": self.read_only,
            "protected_paths": list(self.protected_paths),
            "workspace_rules": [rule.to_dict() for rule in self.workspace_rules],
            "hardlinks": self.hardlinks,
            "read_before_write": self.read_before_write,
            "fallback_encodings": list(self.fallback_encodings),
            "edit_match": self.edit_match,
            "ignore": list(self.ignore),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Policy:
        return cls(
            tool_modes=dict(data.get("tool_modes", {})),
            rules=tuple(Rule.from_dict(r) for r in data.get("rules", ())),
            default_action=data.get("default_action", "allow"),
            path_regex=tuple(data.get("path_regex", ())),
            read_only=bool(data.get("read_only", False)),
            protected_paths=tuple(data.get("protected_paths", ())),
            workspace_rules=tuple(Rule.from_dict(r) for r in data.get("workspace_rules", ())),
            hardlinks=data.get("hardlinks", "allow"),
            read_before_write=data.get("read_before_write", "off"),
            fallback_encodings=tuple(data.get("fallback_encodings", ())),
            edit_match=data.get("edit_match", "tolerant"),
            ignore=tuple(data.get("ignore", ())),
        )
