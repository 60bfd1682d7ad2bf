"""Every key of corral.toml, declared once: section, name, type, default, allowed
values, how a workspace config may narrow it, and one line of docs.

The parser (config.py), the value types' own checks (Limits, SandboxOptions,
HistoryOptions), the trust boundary (trust.py) and the docs test all read this
table, so a key added here is parsed, checked, narrowed (or refused from a
workspace config) and required in docs/configuration.md without another edit.
`[[rules]]` is an array of tables, not a key: its checks live in the parser and
in trust.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.policy import (
    ACTIONS,
    EDIT_MATCH,
    HARDLINK_MODES,
    LEGACY_ENCODINGS,
    READ_BEFORE_WRITE,
    STRICTNESS,
)
from corral.tool_table import ROWS

# The tool names of the contract (DESIGN.md "Tools"); [tools] and rules' `tools`
# are checked against them so a typo cannot leave a tool silently enabled.
TOOL_NAMES = tuple(row.name for row in ROWS)
LAYERS = (  # what require names
    "landlock", "seccomp", "openat2", "no_new_privs", "rlimits", "mount_namespace",
)
RESOLVERS = ("auto", "openat2", "walk")
DURABILITY = ("fsync", "none")

# What a value is (each kind is parsed and checked one way):
KINDS = (
    "int",      # a positive integer
    "number",   # a positive number
    "bool",
    "choice",   # one of `choices`
    "choices",  # an array of `choices`
    "path",     # a string, relative to the config file's directory
    "regexes",  # an array of Python regexes
    "globs",    # an array of gitignore patterns
    "roots",    # an array of {path, mode} tables or path strings
)
# How a workspace's own corral.toml may set the key (see trust.py):
NARROWS = (
    "lower",     # at most the operator's value (none: no bound); it replaces it
    "order",     # at least as far along `order` (loosest first); the stricter one is kept
    "union",     # its values are added to the operator's
    "itself",    # only naming the workspace itself, as written (never resolved)
    "empty",     # only an empty array (anything in it adds to what is reachable)
    "operator",  # never: only the operator's config may set it
)


@dataclass(frozen=True)
class Key:
    section: str
    name: str
    kind: str
    default: Any
    narrows: str
    doc: str
    choices: tuple[Any, ...] = ()
    order: tuple[Any, ...] = ()  # for narrows="order": the values from loosest to strictest

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.narrows not in NARROWS:
            raise ValueError(f"{self.where}: kind {self.kind!r}, narrows {self.narrows!r}")
        if (self.narrows == "order") != bool(self.order):
            raise ValueError(f"{self.where}: an order is what narrows='order' needs")

    @property
    def where(self) -> str:
        """The key as messages name it: `[section] name`."""
        return f"[{self.section}] {self.name}"


_BY_STRICTNESS = tuple(sorted(STRICTNESS, key=STRICTNESS.__getitem__))
MIB = 1024 * 1024

KEYS: tuple[Key, ...] = (
    Key("workspace", "root", "path", ".", "itself",
        "the workspace: relative tool paths are taken from here"),
    Key("workspace", "read_only", "bool", False, "order",
        "the workspace root becomes ro and every tool that writes is denied",
        order=(False, True)),
    Key("workspace", "allowed_paths", "roots", [], "empty",
        "more roots, reachable by absolute path"),
    Key("workspace", "fallback_encodings", "choices", [], "union",
        "legacy encodings tried in order after UTF-8: such files read as text and are "
        "edited in their encoding", choices=LEGACY_ENCODINGS),
    Key("workspace", "ignore", "globs", [], "union",
        "gitignore patterns listings and searches leave out, beside .gitignore files"),
    *(Key("tools", row.name, "choice", "deny" if row.default_off else "allow", "order",
          f"whether {row.name} may run", choices=ACTIONS, order=_BY_STRICTNESS)
      for row in ROWS),
    Key("policy", "default_action", "choice", "allow", "order",
        "the decision for a path no rule matched", choices=ACTIONS, order=_BY_STRICTNESS),
    Key("policy", "path_regex", "regexes", [], "operator",
        "a whitelist: a path no rule decided must match one of these"),
    Key("policy", "hardlinks", "choice", "allow", "order",
        "deny: tools that return content refuse a file with more than one hard link",
        choices=HARDLINK_MODES, order=("allow", "deny")),
    Key("policy", "read_before_write", "choice", "off", "order",
        "require: a write to an existing file needs this session to have read it",
        choices=READ_BEFORE_WRITE, order=("off", "require")),
    Key("edit", "match", "choice", "tolerant", "order",
        "exact: edit_file's old_string must match the file byte for byte (no tolerant "
        "matching)", choices=EDIT_MATCH, order=EDIT_MATCH),
    Key("limits", "max_read_bytes", "int", 256 * 1024, "lower",
        "content returned per read: what fits a model's context"),
    Key("limits", "max_write_bytes", "int", MIB, "lower",
        "per write or append, and the bytes one edit puts in"),
    Key("limits", "max_file_bytes", "int", 64 * MIB, "lower",
        "largest file read, edited or grown by append"),
    Key("limits", "max_list_entries", "int", 500, "lower",
        "entries per listing: a larger one floods a model's context"),
    Key("limits", "timeout_s", "number", 10.0, "lower",
        "per call; the worker is killed and replaced after it"),
    Key("sandbox", "workers", "int", 2, "operator", "worker processes in the pool"),
    Key("sandbox", "require", "choices", (), "union",
        "layers that must be active, or the sandbox does not start", choices=LAYERS),
    Key("sandbox", "max_calls_per_worker", "int", 10_000, "operator",
        "a worker is recycled after this many calls"),
    Key("sandbox", "max_worker_rss_mb", "int", 256, "operator",
        "a worker is recycled when its RSS passes this"),
    Key("sandbox", "max_frame_bytes", "int", 64 * MIB, "operator",
        "largest frame between host and worker"),
    Key("sandbox", "resolver", "choice", "auto", "operator",
        "forces a resolver (the tests run both)", choices=RESOLVERS),
    Key("sandbox", "durability", "choice", "fsync", "order",
        "fsync: a write reaches the disk before it is reported; none: atomic only",
        choices=DURABILITY, order=("none", "fsync")),
    Key("sandbox", "spin", "bool", True, "operator",
        "poll a few hundred microseconds before sleeping: faster small calls"),
    Key("audit", "path", "path", None, "operator",
        "the JSON-lines audit log; none: no log"),
    Key("audit", "key_file", "path", None, "operator",
        "an HMAC-SHA256 key for the chain, outside every root; none: plain SHA-256"),
    Key("audit", "max_bytes", "int", None, "operator",
        "the log is renamed to PATH.N past this size; none: never"),
    # Quotas: none by default. A workspace config may add one or lower one, never raise
    # or remove one ("lower" treats the operator's none as no bound).
    Key("quota", "calls_per_minute", "int", None, "lower",
        "tool calls accepted in any 60 seconds; none: no bound"),
    Key("quota", "write_bytes_per_hour", "int", None, "lower",
        "bytes written to files in any hour; none: no bound"),
    Key("quota", "files_created_per_hour", "int", None, "lower",
        "files and directories created in any hour; none: no bound"),
    Key("history", "enabled", "bool", True, "operator",
        "keep what every changing call replaced, so it can be undone"),
    Key("history", "path", "path", None, "operator",
        "the store's base directory; none: $XDG_STATE_HOME/corral/history"),
    Key("history", "max_bytes", "int", 256 * MIB, "operator",
        "the store's size; the oldest records go first"),
    Key("history", "max_age_days", "number", 14.0, "operator",
        "records older than this go"),
    Key("history", "snapshots", "bool", True, "operator",
        "each checkpoint snapshots the whole workspace, so rewind brings back what "
        "others changed too"),
    Key("history", "snapshot_ignore", "globs", (), "operator",
        "gitignore patterns snapshots leave out, beside the ignore rules"),
    Key("history", "snapshot_watch", "bool", True, "operator",
        "a worker watches the workspace's directories (inotify), so a checkpoint lists "
        "again only those that changed; false: every checkpoint walks the whole tree"),
)

BY_PLACE = {(key.section, key.name): key for key in KEYS}
SECTIONS = (
    "workspace", "tools", "rules", "policy", "edit", "limits", "quota", "sandbox", "audit",
    "history",
)
# The keys of each table section ([[rules]] is an array of tables, checked per rule).
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    section: tuple(key.name for key in KEYS if key.section == section)
    for section in SECTIONS if section != "rules"
}


def section_keys(section: str) -> tuple[Key, ...]:
    return tuple(key for key in KEYS if key.section == section)


def default(section: str, name: str) -> Any:
    """A key's default, for the value types' fields."""
    return BY_PLACE[section, name].default
