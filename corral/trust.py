"""The trust boundary: the operator configures, the workspace only narrows.

A sandbox exists to run an agent over files nobody vetted: a cloned repository,
a pull request. So the configuration that can widen what a tool may do (roots,
tools enabled, rules relaxed or built-ins replaced, the sandbox's processes,
the audit log's path, higher limits) comes only from the operator: a file named
explicitly (`--config`, `Sandbox.from_config`), keyword arguments, or the user
config, which is honoured only when it lies outside every root.

A `corral.toml` found in the workspace is applied on top of that as untrusted
input: every value it sets must be at least as strict as the operator's
(equal values change nothing), its rules may only deny or supervise and never
reuse a built-in's or an operator rule's name, and anything that is not a
narrowing is a ConfigError listing each offending key, so nothing starts.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from corral.config import (
    CONFIG_NAME,
    WORKSPACE_MAX_GLOBS_PER_RULE,
    WORKSPACE_MAX_RULES,
    Config,
    ConfigError,
    check_names,
    find_config,
    load_config,
    parse_config,
    read_workspace_config,
    resolve_roots,
)
from corral.policy import BUILTIN_NAMES, STRICTNESS, stricter

USER_CONFIG = os.path.join("corral", CONFIG_NAME)  # under $XDG_CONFIG_HOME (~/.config)

# [policy] keys a workspace may set, each with its values from loosest to strictest.
POLICY_ORDER = {
    "default_action": tuple(sorted(STRICTNESS, key=STRICTNESS.__getitem__)),
    "hardlinks": ("allow", "deny"),
    "read_before_write": ("off", "require"),
}
NARROWING_SECTIONS = ("workspace", "tools", "rules", "policy", "limits", "sandbox")


def user_config_path(environ: dict[str, str] | None = None) -> str:
    """$XDG_CONFIG_HOME/corral/corral.toml; ~/.config when the variable is unset or
    not absolute (as the XDG base directory spec says)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, USER_CONFIG)


def find_user_config() -> str | None:
    path = user_config_path()
    return path if os.path.isfile(path) else None


def operator_config(
    workspace: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
) -> Config:
    """What the command line describes: the operator's config (`config`, else the
    user config, else the defaults) for `workspace` (default: the config's
    [workspace] root when `config` is given, else the current directory), with
    the workspace's own corral.toml narrowing it. `config` is trusted wherever it
    lies, even inside the workspace: the operator named it."""
    trusted = os.fspath(config) if config is not None else find_user_config()
    if trusted is None:
        real, others = resolve_roots(workspace if workspace is not None else ".")
        base = Config(workspace=real, allowed_paths=others)
    else:
        base = load_config(trusted)
        if workspace is not None or config is None:
            # The user config serves every workspace: the command line names it.
            base = with_workspace(base, workspace if workspace is not None else ".")
        if config is None:
            _check_outside_roots(trusted, base)
    return narrowed(base, trusted)


def narrowed(config: Config, trusted: str | None = None) -> Config:
    """`config` (the operator's) with its workspace's own corral.toml, if any,
    applied on top as untrusted input; unless that file is `trusted` (the operator
    named it, or it is already applied). The command line and Sandbox both come here."""
    local = find_config(config.workspace)
    if local is None or (trusted is not None and _same_file(local, trusted)):
        return config
    return narrow(config, local)


def with_workspace(config: Config, workspace: str | os.PathLike[str]) -> Config:
    """`config` serving another workspace (its allowed paths checked against it)."""
    real, others = resolve_roots(
        workspace, config.allowed_paths, read_only=config.policy.read_only
    )
    return dataclasses.replace(config, workspace=real, allowed_paths=others)


def narrow(config: Config, path: str | os.PathLike[str]) -> Config:
    """`config` with the untrusted corral.toml at `path` applied on top; ConfigError
    naming every key that would widen anything."""
    source, data = read_workspace_config(path)
    check_names(source, data)  # a typo gets "did you mean", not "not allowed here"
    _check_bounds(source, data)
    problems, kept = _refused(data, config.workspace, os.path.dirname(source))
    # The kept settings get the same checks as any config (types, enums, globs);
    # the refused ones are never looked at (an untrusted root is not even resolved).
    local = parse_config(source, kept)
    problems += _looser(kept, local, config)
    if problems:
        error = ConfigError(
            "a corral.toml inside the workspace may only narrow the operator's "
            f"configuration; not allowed here: {'; '.join(problems)}. Put such settings in "
            "a config passed with --config (or the user config; Python: "
            "Sandbox.from_config or Sandbox's keyword arguments)",
            file=source,
        )
        error.key = problems[0].split(":", 1)[0]
        raise error
    return _merged(config, local, kept)


def _check_bounds(source: str, data: dict[str, Any]) -> None:
    """ConfigError for more rules, or more globs in a rule, than a workspace config
    may add (counted before anything is parsed or compiled)."""
    rules = data.get("rules")
    if not isinstance(rules, list):
        return  # not an array: parse_config says so
    if len(rules) > WORKSPACE_MAX_RULES:
        raise ConfigError(f"a workspace config may add at most {WORKSPACE_MAX_RULES} rules; "
                          f"this one has {len(rules)}", file=source, key="[[rules]]")
    for index, rule in enumerate(rules):
        paths = rule.get("paths") if isinstance(rule, dict) else None
        if isinstance(paths, list) and len(paths) > WORKSPACE_MAX_GLOBS_PER_RULE:
            raise ConfigError(
                f"a workspace rule may have at most {WORKSPACE_MAX_GLOBS_PER_RULE} globs; "
                f"this one has {len(paths)}", file=source, key=f"[[rules]] #{index + 1} paths")


def _refused(
    data: dict[str, Any], workspace: str, base: str
) -> tuple[list[str], dict[str, Any]]:
    """("key: why" for each setting a workspace may never make, the data without them).
    `[workspace] root` is compared as written (relative to `base`, the file's
    directory) and never resolved: the host does not look at a path it names."""
    problems: list[str] = []
    kept: dict[str, Any] = {}
    allowed_keys = {"workspace": ("read_only",), "sandbox": ("require", "durability"),
                    "policy": tuple(POLICY_ORDER)}
    for name, value in data.items():
        if name not in NARROWING_SECTIONS:
            problems.append(f"[{name}]: only the operator's config may set it")
            continue
        if name not in allowed_keys or not isinstance(value, dict):
            kept[name] = value
            continue
        kept[name] = {}
        for key, item in value.items():
            if name == "workspace" and key == "root":
                if not _names(item, base, workspace):
                    problems.append("[workspace] root: only the workspace itself ('.') may be "
                                    "named here")
            elif key in allowed_keys[name]:
                kept[name][key] = item
            elif name == "workspace" and key == "allowed_paths":
                if item != []:
                    problems.append("[workspace] allowed_paths: adds roots")
            else:
                problems.append(f"[{name}] {key}: only the operator's config may set it")
    return problems, kept


def _names(root: object, base: str, workspace: str) -> bool:
    """Whether `root`, as written in a file in `base`, names `workspace` (lexically)."""
    if not isinstance(root, str) or not root or "\0" in root:
        return False
    return os.path.normpath(os.path.join(base, os.path.expanduser(root))) == workspace


def _looser(data: dict[str, Any], local: Config, base: Config) -> list[str]:
    """"key: why" for each value of the workspace file looser than the operator's."""
    problems = []
    workspace = data.get("workspace", {})
    if workspace.get("read_only") is False and base.policy.read_only:
        problems.append("[workspace] read_only = false: the operator's config sets true")
    for name in data.get("tools", {}):
        mode = local.policy.tool_modes[name]
        theirs = base.policy.tool_mode(name, writes=False)
        if STRICTNESS[mode] < STRICTNESS[theirs]:
            problems.append(f"[tools] {name} = {mode!r}: looser than the operator's {theirs!r}")
    operator_rules = {rule.name for rule in (*base.policy.rules, *base.policy.workspace_rules)}
    for rule in local.policy.rules:
        where = f"[[rules]] {rule.name!r}"
        if rule.action == "allow":
            problems.append(f"{where} action = 'allow': a workspace rule may only deny or "
                            "supervise")
        if rule.name in BUILTIN_NAMES:
            problems.append(f"{where} name: the name of a built-in rule, which it would replace")
        elif rule.name in operator_rules:
            problems.append(f"{where} name: the name of one of the operator's rules")
    for key in data.get("policy", {}):
        order = POLICY_ORDER[key]
        mine, theirs = getattr(local.policy, key), getattr(base.policy, key)
        if order.index(mine) < order.index(theirs):
            problems.append(f"[policy] {key} = {mine!r}: looser than the operator's {theirs!r}")
    if local.sandbox.durability == "none" and base.sandbox.durability != "none":
        problems.append("[sandbox] durability = 'none': writes would no longer be fsync'd")
    for key in data.get("limits", {}):
        mine, theirs = getattr(local.limits, key), getattr(base.limits, key)
        if mine > theirs:
            problems.append(f"[limits] {key} = {mine}: above the operator's {theirs}")
    return problems


def _merged(base: Config, local: Config, data: dict[str, Any]) -> Config:
    theirs = base.policy
    modes = dict(theirs.tool_modes)
    for name, mode in local.policy.tool_modes.items():
        modes[name] = stricter(mode, theirs.tool_mode(name, writes=False))
    chosen: dict[str, Any] = {
        key: max(getattr(theirs, key), getattr(local.policy, key), key=order.index)
        for key, order in POLICY_ORDER.items()
    }
    policy = dataclasses.replace(
        theirs,
        tool_modes=modes,
        read_only=theirs.read_only or local.policy.read_only,
        workspace_rules=(*theirs.workspace_rules, *local.policy.rules),
        **chosen,
    )
    limits = dataclasses.replace(
        base.limits, **{key: getattr(local.limits, key) for key in data.get("limits", {})}
    )
    require = tuple(dict.fromkeys((*base.sandbox.require, *local.sandbox.require)))
    durability = local.sandbox.durability if "durability" in data.get("sandbox", {}) else (
        base.sandbox.durability)  # "fsync" (narrower), or "none" restated: checked by _looser
    return dataclasses.replace(  # read_only also makes the workspace root "ro": Config.roots
        base,
        policy=policy,
        limits=limits,
        sandbox=dataclasses.replace(base.sandbox, require=require, durability=durability),
        narrowed_by=local.source,
    )


def _check_outside_roots(path: str, config: Config) -> None:
    real = os.path.realpath(path)
    for root in config.roots:
        if real.startswith(root.path.rstrip("/") + "/"):
            raise ConfigError(
                f"the user config lies inside the root {root.path}, where the workspace's "
                "content could have put it, so it is not trusted; move it out of every "
                "root or name it with --config",
                file=path,
            )


def _same_file(first: str, second: str) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False
