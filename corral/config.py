"""corral.toml -> Config (roots, Policy, Limits, SandboxOptions, audit path).

Strict: an unknown section or key, a wrong type, a bad enum value, an invalid
glob or regex, a missing or system root all raise ConfigError naming the file,
the key and what is allowed. Relative paths are taken from the directory of the
config file. Roots are resolved to real paths here (the one place allowed to
look at the file system before the sandbox exists). What each key is, its
default and how it is checked come from the key table, corral.config_keys.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from corral.config_keys import (
    BY_PLACE,
    SECTION_KEYS,
    SECTIONS,
    TOOL_NAMES,
    Key,
    default,
    section_keys,
)
from corral.errors import did_you_mean
from corral.policy import (
    ACCESS_KINDS,
    ACTIONS,
    ROOT_MODES,
    Policy,
    PolicyError,
    RootSpec,
    Rule,
    check_root,
    check_rule,
    compile_path_regex,
)

T = TypeVar("T")

CONFIG_NAME = "corral.toml"
# A workspace's corral.toml is read by the unconfined host at every session start: a
# real one is a few hundred bytes, and nothing larger is read at all.
WORKSPACE_CONFIG_MAX_BYTES = 64 * 1024
# What a workspace config may add to the operator's policy: every path of every
# call is checked against its rules, and the shared zygote compiles them.
WORKSPACE_MAX_RULES = 64
WORKSPACE_MAX_GLOBS_PER_RULE = 16


def _check_fields(value: object, section: str) -> None:
    """Value types check themselves, by the key table: Limits(max_file_bytes=-5) is
    refused where it is made, not when a call first trips over it."""
    for key in section_keys(section):
        field_value = getattr(value, key.name)
        if field_value is None and key.default is None:  # "none": the setting is off
            continue
        what = f"{type(value).__name__}.{key.name}"
        if key.kind == "int" and (isinstance(field_value, bool) or not isinstance(
                field_value, int) or field_value < 1):
            raise ValueError(f"{what} must be a positive integer, not {field_value!r}")
        if key.kind == "number" and (isinstance(field_value, bool) or not isinstance(
                field_value, int | float) or not (0 < field_value < float("inf"))):
            raise ValueError(f"{what} must be a positive number, not {field_value!r}")
        if key.kind == "choice" and field_value not in key.choices:
            raise ValueError(f"{what} must be one of {', '.join(key.choices)}, "
                             f"not {field_value!r}")
        if key.kind == "bool" and not isinstance(field_value, bool):
            raise ValueError(f"{what} must be true or false, not {field_value!r}")


@dataclass(frozen=True)
class Limits:
    """[limits]; each field's default and meaning: config_keys.KEYS."""

    max_read_bytes: int = default("limits", "max_read_bytes")
    max_write_bytes: int = default("limits", "max_write_bytes")
    max_file_bytes: int = default("limits", "max_file_bytes")
    max_list_entries: int = default("limits", "max_list_entries")
    timeout_s: float = default("limits", "timeout_s")

    def __post_init__(self) -> None:
        _check_fields(self, "limits")


@dataclass(frozen=True)
class QuotaOptions:
    """[quota]: how much a sandbox (or a tenant) may do in a sliding window (none:
    no bound); each field's meaning: config_keys.KEYS. Counted in corral/host/quota.py."""

    calls_per_minute: int | None = default("quota", "calls_per_minute")
    write_bytes_per_hour: int | None = default("quota", "write_bytes_per_hour")
    files_created_per_hour: int | None = default("quota", "files_created_per_hour")

    def __post_init__(self) -> None:
        _check_fields(self, "quota")

    @property
    def bounded(self) -> bool:
        """Whether any quota is set (none: nothing is counted)."""
        return any(getattr(self, key.name) is not None for key in section_keys("quota"))

    def stricter(self, other: QuotaOptions) -> QuotaOptions:
        """Each quota at the lower of the two (none: no bound)."""
        return QuotaOptions(**{
            key.name: min((v for v in (getattr(self, key.name), getattr(other, key.name))
                           if v is not None), default=None)
            for key in section_keys("quota")
        })


@dataclass(frozen=True)
class SandboxOptions:
    """[sandbox]; each field's default and meaning: config_keys.KEYS."""

    workers: int = default("sandbox", "workers")
    require: tuple[str, ...] = default("sandbox", "require")
    max_calls_per_worker: int = default("sandbox", "max_calls_per_worker")
    max_worker_rss_mb: int = default("sandbox", "max_worker_rss_mb")
    max_frame_bytes: int = default("sandbox", "max_frame_bytes")
    resolver: str = default("sandbox", "resolver")
    durability: str = default("sandbox", "durability")
    spin: bool = default("sandbox", "spin")

    def __post_init__(self) -> None:
        _check_fields(self, "sandbox")


@dataclass(frozen=True)
class HistoryOptions:
    """[history]: what every changing call replaced, kept so it can be undone; each
    field's default and meaning: config_keys.KEYS."""

    enabled: bool = default("history", "enabled")
    path: str | None = default("history", "path")
    max_bytes: int = default("history", "max_bytes")
    max_age_days: float = default("history", "max_age_days")
    snapshots: bool = default("history", "snapshots")
    snapshot_ignore: tuple[str, ...] = default("history", "snapshot_ignore")
    snapshot_watch: bool = default("history", "snapshot_watch")

    def __post_init__(self) -> None:
        _check_fields(self, "history")


@dataclass(frozen=True)
class AuditOptions:
    """[audit]: the tamper-evident log; Sandbox(audit=AuditOptions(...)) opens it
    and closes it. Each field's default and meaning: config_keys.KEYS."""

    path: str | None = default("audit", "path")
    key_file: str | None = default("audit", "key_file")
    max_bytes: int | None = default("audit", "max_bytes")

    def __post_init__(self) -> None:
        _check_fields(self, "audit")


@dataclass(frozen=True)
class Config:
    workspace: str  # real absolute path
    allowed_paths: tuple[RootSpec, ...] = ()
    policy: Policy = field(default_factory=Policy)
    limits: Limits = field(default_factory=Limits)
    sandbox: SandboxOptions = field(default_factory=SandboxOptions)
    audit_path: str | None = None  # absolute; None: no audit log
    source: str | None = None  # the operator's file this came from
    narrowed_by: str | None = None  # the workspace's own corral.toml, applied on top
    history: HistoryOptions = field(default_factory=HistoryOptions)
    audit_key_file: str | None = None  # absolute; None: the chain is plain SHA-256
    audit_max_bytes: int | None = None  # None: the log is never rotated
    quota: QuotaOptions = field(default_factory=QuotaOptions)

    @property
    def roots(self) -> tuple[RootSpec, ...]:
        """The workspace (ro under read_only) first, then allowed_paths."""
        mode = "ro" if self.policy.read_only else "rw"
        return (RootSpec(self.workspace, mode), *self.allowed_paths)


@dataclass(frozen=True)
class Remedy:
    """What fixes a ConfigError, as data, so each face can say it in its own words
    (the command line names --config, Python Sandbox.from_config, the HTTP face
    the tenants file) without rewriting the message. `keys`: settings that belong
    in the operator's config (where = "operator"); or the file itself may be named
    as the operator's config (where = "name_file")."""

    where: str  # "operator" | "name_file"
    keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.where not in ("operator", "name_file") or (self.where == "operator") != bool(
                self.keys):
            raise ValueError(f"Remedy({self.where!r}, {self.keys!r}): 'operator' names the keys "
                             "to set, 'name_file' none")


def any_face(remedy: Remedy) -> str:
    """A remedy as the library says it when it cannot know the face: both the
    command line's and Python's spelling."""
    if remedy.where == "name_file":
        return ("To trust the file, name it as the operator's config: --config FILE "
                "(Python: Sandbox.from_config(FILE))")
    return ("Put such settings in a config passed with --config (or the user config; Python: "
            "Sandbox.from_config or Sandbox's keyword arguments)")


class ConfigError(ValueError):
    """A config that cannot be used; the message names the file and the key, then
    says what fixes it: `remedy`, spelled by the face that shows it (`spelled`)."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None,
                 remedy: Remedy | None = None) -> None:
        self.file = file
        self.key = key
        self.problem = message
        self.remedy = remedy
        self._where = tuple(part for part in (file, key) if part)  # as the message names it
        super().__init__(self.spelled(any_face))

    def spelled(self, say: Callable[[Remedy], str]) -> str:
        """The message, its remedy said by `say` (a face's own words)."""
        problem = self.problem
        if self.remedy is not None:
            problem = f"{problem.rstrip('.')}. {say(self.remedy)}"
        return ": ".join((*self._where, problem))


def find_config(workspace: str | os.PathLike[str]) -> str | None:
    """The workspace's own corral.toml, if it has one (the workspace only, no parents):
    anything of that name but a directory, a symlink included (whatever it points
    at: read_workspace_config refuses it, so its target is never looked at)."""
    candidate = os.path.join(os.fspath(workspace), CONFIG_NAME)
    try:
        mode = os.lstat(candidate).st_mode
    except OSError:
        return None
    return None if stat.S_ISDIR(mode) else candidate


def resolve_roots(
    workspace: str | os.PathLike[str],
    allowed_paths: Iterable[RootSpec] = (),
    *,
    read_only: bool = False,
    source: str | None = None,
) -> tuple[str, tuple[RootSpec, ...]]:
    """Real absolute paths of the roots, each an existing directory that is not a
    system path; no root may lie inside another (see _check_nesting). Errors name
    the config key when `source` is a file, else the argument."""
    keys = ("[workspace] root", "[workspace] allowed_paths") if source else (
        "workspace", "allowed_paths")
    real = _real_directory(os.fspath(workspace), keys[0], source)
    others = []
    for index, spec in enumerate(allowed_paths):
        key = f"{keys[1]}[{index}]"
        if spec.mode not in ROOT_MODES:
            raise ConfigError(_expected(ROOT_MODES, spec.mode), file=source, key=f"{key}.mode")
        others.append(RootSpec(_real_directory(spec.path, f"{key}.path", source), spec.mode))
    roots = [RootSpec(real, "ro" if read_only else "rw"), *others]
    for index, inner in enumerate(roots):
        for outer in roots[:index]:
            _check_nesting(outer, inner, source, keys[1])
    return real, tuple(others)


def _check_nesting(first: RootSpec, second: RootSpec, source: str | None, key: str) -> None:
    if first.path == second.path:
        raise ConfigError(f"{second.path} is listed twice", file=source, key=key)
    for inner, outer in ((first, second), (second, first)):
        if inner.path.startswith(outer.path.rstrip("/") + "/"):
            # One file must get one decision however it is spelled: through the outer
            # root a rule sees "inner/x", through the inner one "x", and Landlock
            # grants the union of both roots' rights.
            raise ConfigError(
                f"root {inner.path} lies inside root {outer.path}: a file there would have "
                "two spellings that rules decide differently; keep only the outer root "
                "(and use [[rules]] for the inner directory) or only the inner one",
                file=source, key=key,
            )


def _real_directory(path: str, key: str, source: str | None) -> str:
    real = os.path.realpath(path)
    try:
        check_root(real)
    except PolicyError as exc:
        raise ConfigError(str(exc), file=source, key=key) from None
    if not os.path.isdir(real):
        raise ConfigError(f"{path} is not an existing directory", file=source, key=key)
    return real


def load_config(path: str | os.PathLike[str]) -> Config:
    """Parse and check one corral.toml."""
    return parse_config(*read_config(path))


def read_config(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(absolute path, TOML data) of one config file."""
    import tomllib  # here, not at the top: the zygote imports this module and never parses TOML

    source = os.path.abspath(os.fspath(path))
    try:
        with open(source, "rb") as handle:
            return source, tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror}", file=source) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", file=source) from None
    except RecursionError:  # tomllib recurses per level of nesting
        raise ConfigError("invalid TOML: arrays or tables nested too deeply",
                          file=source) from None


def read_workspace_config(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(absolute path, TOML data) of a workspace's own, untrusted corral.toml: only a
    regular file with no other name (a symlink or a hard link could name a file
    outside the workspace, such as another tenant's config), of at most
    WORKSPACE_CONFIG_MAX_BYTES. A refusal says why, never what the file holds."""
    import tomllib

    source = os.path.abspath(os.fspath(path))
    # O_NOFOLLOW: the last name is never followed; O_NONBLOCK: a FIFO cannot hang us
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    name_file = Remedy("name_file")
    try:
        fd = os.open(source, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError("a workspace config must be a regular file in the workspace, "
                              "not a symbolic link (it may point anywhere); put a copy of the "
                              "file there", file=source, remedy=name_file) from None
        raise ConfigError(f"cannot read the config file: {exc.strerror}", file=source) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("a workspace config must be a regular file; this is not a "
                              "regular file", file=source)
        if info.st_nlink != 1:
            raise ConfigError("a workspace config must be a file of its own, not a hard link "
                              "(its other name may lie anywhere); put a copy of the file there",
                              file=source, remedy=name_file)
        content = _read_at_most(fd, WORKSPACE_CONFIG_MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror}", file=source) from None
    finally:
        os.close(fd)
    if len(content) > WORKSPACE_CONFIG_MAX_BYTES:
        raise ConfigError(f"a workspace config may hold at most {WORKSPACE_CONFIG_MAX_BYTES} "
                          "bytes; this one holds more (a larger config is the operator's)",
                          file=source, remedy=name_file)
    try:
        return source, tomllib.loads(content.decode())
    except UnicodeDecodeError:
        raise ConfigError("invalid TOML: the file is not UTF-8 text", file=source) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", file=source) from None
    except RecursionError:  # tomllib recurses per level of nesting
        raise ConfigError("invalid TOML: arrays or tables nested too deeply",
                          file=source) from None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def check_names(source: str, data: dict[str, Any]) -> None:
    """ConfigError for an unknown section or key of a table section, with a "did you
    mean"; nothing is resolved (the data may be untrusted)."""
    _Parser(source).names(data)


def parse_config(source: str, data: dict[str, Any]) -> Config:
    """Check the TOML data of the file `source` and build its Config."""
    return _Parser(source).config(data)


def _expected(allowed: Iterable[str], got: object) -> str:
    allowed = tuple(allowed)
    hint = did_you_mean(got, allowed)
    listed = ", ".join(repr(a) for a in allowed)
    return f"expected one of {listed}, got {got!r}{hint}"


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.base = os.path.dirname(source)

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, file=self.source, key=key)

    # -- typed getters -------------------------------------------------------

    def table(self, data: dict[str, Any], name: str, allowed: Iterable[str]) -> dict[str, Any]:
        value = data.get(name, {})
        if not isinstance(value, dict):
            raise self.fail(f"[{name}]", f"expected a table, got {_type_name(value)}")
        self.no_unknown(value, f"[{name}]", allowed)
        return value

    def no_unknown(self, value: dict[str, Any], where: str, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in value:
            if key not in allowed:
                raise self.fail(
                    f"{where} {key}",
                    f"unknown key; allowed keys: {', '.join(allowed)}{did_you_mean(key, allowed)}",
                )

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {_type_name(value)}")
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value or "\0" in value:
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        return value

    def enum(self, value: Any, key: str, allowed: tuple[str, ...]) -> str:
        if value not in allowed or not isinstance(value, str):
            raise self.fail(key, _expected(allowed, value))
        return value

    def positive_int(self, value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(key, f"expected a positive integer, got {value!r}")
        return value

    def positive_number(self, value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.fail(key, f"expected a positive number, got {value!r}")
        return float(value)

    def strings(self, value: Any, key: str) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(key, f"expected an array of strings, got {_type_name(value)}")
        return tuple(self.string(item, f"{key}[{i}]") for i, item in enumerate(value))

    def path(self, value: Any, key: str) -> str:
        return os.path.join(self.base, os.path.expanduser(self.string(value, key)))

    # -- sections -------------------------------------------------------------

    def names(self, data: dict[str, Any]) -> None:
        for name in data:
            if name not in SECTIONS:
                hint = did_you_mean(name, SECTIONS)
                raise self.fail(
                    f"[{name}]", f"unknown section; allowed: {', '.join(SECTIONS)}{hint}"
                )
        for name, allowed in SECTION_KEYS.items():
            if isinstance(data.get(name), dict):
                self.no_unknown(data[name], f"[{name}]", allowed)

    def config(self, data: dict[str, Any]) -> Config:
        self.names(data)
        workspace = self.section(data, "workspace", defaults=True)
        root, read_only, specs = workspace["root"], workspace["read_only"], workspace[
            "allowed_paths"]
        real, others = resolve_roots(root, specs, read_only=read_only, source=self.source)
        audit = self.section(data, "audit")
        audit_path = audit.get("path")
        self.check_audit(audit, [real, *(spec.path for spec in others)])
        # No tool may rewrite the policy it runs under or the log of what it did.
        protected = tuple(os.path.realpath(p) for p in (self.source, audit_path) if p)
        return Config(
            workspace=real,
            allowed_paths=others,
            policy=self.policy(data, workspace, protected),
            limits=Limits(**self.section(data, "limits")),
            sandbox=SandboxOptions(**self.section(data, "sandbox")),
            audit_path=audit_path,
            source=self.source,
            history=HistoryOptions(**self.section(data, "history")),
            audit_key_file=audit.get("key_file"),
            audit_max_bytes=audit.get("max_bytes"),
            quota=QuotaOptions(**self.section(data, "quota")),
        )

    def check_audit(self, audit: dict[str, Any], roots: list[str]) -> None:
        """The key and the rotation need a log, and the key must lie outside every
        root (a worker can read anything inside one). api.py checks the key again
        for a Sandbox made in Python."""
        for name in ("key_file", "max_bytes"):
            if name in audit and audit.get("path") is None:
                raise self.fail(f"[audit] {name}", "set without [audit] path: there is no "
                                "log to chain or rotate")
        key = audit.get("key_file")
        if key is None:
            return
        real_key = os.path.realpath(key)
        for root in roots:
            real_root = os.path.realpath(root)
            if os.path.commonpath((real_key, real_root)) == real_root:
                raise self.fail("[audit] key_file", f"{key} lies inside the root {root}, "
                                "where a worker could read it; keep the key outside every root")

    def section(self, data: dict[str, Any], name: str, defaults: bool = False) -> dict[str, Any]:
        """The keys the section sets (every key of it with `defaults`), each parsed as
        the key table says."""
        section = self.table(data, name, SECTION_KEYS[name])
        keys = section_keys(name) if defaults else [BY_PLACE[name, key] for key in section]
        return {key.name: self.value(key, section.get(key.name, key.default)) for key in keys}

    def value(self, key: Key, value: Any) -> Any:
        where = key.where
        if key.kind == "int":
            return self.positive_int(value, where)
        if key.kind == "number":
            return self.positive_number(value, where)
        if key.kind == "bool":
            return self.boolean(value, where)
        if key.kind == "choice":
            return self.enum(value, where, key.choices)
        if key.kind == "choices":
            return tuple(self.enum(item, f"{where}[{i}]", key.choices)
                         for i, item in enumerate(self.array(value, where)))
        if key.kind == "path":
            return os.path.abspath(self.path(value, where))
        if key.kind == "globs":  # as in git, any line is a pattern (a malformed one
            return self.strings(value, where)  # matches nothing)
        if key.kind == "regexes":
            regexes = self.strings(value, where)
            for index, pattern in enumerate(regexes):
                self.check(partial(compile_path_regex, (pattern,)), f"{where}[{index}]")
            return regexes
        return self.allowed_paths(value)  # "roots"

    def allowed_paths(self, value: Any) -> list[RootSpec]:
        key = "[workspace] allowed_paths"
        specs = []
        for index, item in enumerate(self.array(value, key)):
            where = f"{key}[{index}]"
            if isinstance(item, str):  # a bare path: read-only, the safe default
                item = {"path": item}
            if not isinstance(item, dict):
                raise self.fail(where, "expected a table {path, mode} or a path string")
            self.no_unknown(item, where, ("path", "mode"))
            if "path" not in item:
                raise self.fail(f"{where}.path", "missing; every allowed path needs one")
            path = self.path(item["path"], f"{where}.path")
            specs.append(RootSpec(path, self.enum(item.get("mode", "ro"), f"{where}.mode",
                                                  ROOT_MODES)))
        return specs

    def policy(self, data: dict[str, Any], workspace: dict[str, Any],
               protected: tuple[str, ...]) -> Policy:
        modes = self.section(data, "tools")
        section = self.section(data, "policy", defaults=True)
        rules = self.rules(data.get("rules", []))
        encodings = self.section(data, "workspace").get("fallback_encodings", ())
        edit = self.section(data, "edit", defaults=True)
        return self.check(
            lambda: Policy(modes, rules, section["default_action"], section["path_regex"],
                           workspace["read_only"], protected, hardlinks=section["hardlinks"],
                           read_before_write=section["read_before_write"],
                           fallback_encodings=encodings, edit_match=edit["match"],
                           ignore=workspace["ignore"]),
            "[[rules]]",
        )

    def rules(self, value: Any) -> tuple[Rule, ...]:
        rules: list[Rule] = []
        names: set[str] = set()
        for index, item in enumerate(self.array(value, "[[rules]]")):
            where = f"[[rules]] #{index + 1}"
            if not isinstance(item, dict):
                raise self.fail(where, f"expected a table, got {_type_name(item)}")
            self.no_unknown(item, where, ("name", "action", "tools", "access", "paths"))
            for required in ("name", "action", "paths"):
                if required not in item:
                    raise self.fail(f"{where} {required}", "missing; a rule needs name, action "
                                    "and paths (tools defaults to [\"*\"] unless access is set)")
            name = self.string(item["name"], f"{where} name")
            where = f"[[rules]] {name!r}"
            if name in names:
                raise self.fail(f"{where} name", "repeated; rule names must be unique")
            names.add(name)
            action = self.enum(item["action"], f"{where} action", ACTIONS)
            access = tuple(
                self.enum(kind, f"{where} access[{i}]", ACCESS_KINDS)
                for i, kind in enumerate(self.array(item.get("access", []), f"{where} access"))
            )
            # A rule that names kinds of access applies to those, plus any tools it names.
            tools = self.strings(item.get("tools", [] if access else ["*"]), f"{where} tools")
            for tool in tools:
                if tool != "*" and tool not in TOOL_NAMES:
                    raise self.fail(f"{where} tools", _expected(("*", *TOOL_NAMES), tool))
            if not tools and not access:
                raise self.fail(f"{where} tools", "empty; name tools, access kinds or [\"*\"]")
            paths = self.strings(item["paths"], f"{where} paths")
            if not paths:
                raise self.fail(f"{where} paths", "empty; a rule needs at least one glob")
            rule = Rule(name, action, tools, paths, access)
            self.check(partial(check_rule, rule), f"{where} paths")
            rules.append(rule)
        return tuple(rules)

    def check(self, build: Callable[[], T], key: str) -> T:
        try:
            return build()
        except PolicyError as exc:
            raise self.fail(key, str(exc)) from None

    def array(self, value: Any, key: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(key, f"expected an array, got {_type_name(value)}")
        return value
