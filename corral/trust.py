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
    Remedy,
    check_names,
    find_config,
    load_config,
    parse_config,
    read_workspace_config,
    resolve_roots,
)
from corral.config_keys import BY_PLACE, Key, section_keys
from corral.policy import BUILTIN_NAMES

USER_CONFIG = os.path.join("corral", CONFIG_NAME)  # under $XDG_CONFIG_HOME (~/.config)


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
    naming every key that would widen anything. How each key may be narrowed is the
    key table's `narrows` (corral.config_keys): a key it does not list is refused."""
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
            f"configuration; not allowed here: {'; '.join(text for _, text in problems)}",
            file=source,
            remedy=Remedy("operator", tuple(dict.fromkeys(key for key, _ in problems))),
        )
        error.key = problems[0][1].split(":", 1)[0]  # the first, for programs; the text names all
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


Problems = list[tuple[str, str]]  # (the key, "key: why") for each setting refused


def _refused(data: dict[str, Any], workspace: str, base: str) -> tuple[Problems, dict[str, Any]]:
    """The settings a workspace may never make, and the data without them.
    `[workspace] root` is compared as written (relative to `base`, the file's
    directory) and never resolved: the host does not look at a path it names."""
    problems: Problems = []
    kept: dict[str, Any] = {}
    for name, value in data.items():
        if name == "rules":  # [[rules]]: checked once parsed, by _looser_rules
            kept[name] = value
        elif all(key.narrows == "operator" for key in section_keys(name)):
            problems.append((f"[{name}]", f"[{name}]: only the operator's config may set it"))
        elif not isinstance(value, dict):
            kept[name] = value  # parse_config says what is wrong with it
        else:
            kept[name] = {}
            for item, setting in value.items():
                key = BY_PLACE.get((name, item))
                refusal = _refusal(key, setting, base, workspace)
                if key is None or refusal:
                    where = f"[{name}] {item}"
                    problems.append((where, f"{where}: {refusal or _OPERATOR_ONLY}"))
                elif key.narrows not in ("itself", "empty"):  # those two change nothing
                    kept[name][item] = setting
    return problems, kept


_OPERATOR_ONLY = "only the operator's config may set it"


def _refusal(key: Key | None, value: object, base: str, workspace: str) -> str | None:
    """Why a workspace config may not set `key` to `value` whatever the operator's
    value is, or None."""
    if key is None or key.narrows == "operator":
        return _OPERATOR_ONLY
    if key.narrows == "itself" and not _names(value, base, workspace):
        return "only the workspace itself ('.') may be named here"
    if key.narrows == "empty" and value != []:
        return "adds roots"
    return None


def _names(root: object, base: str, workspace: str) -> bool:
    """Whether `root`, as written in a file in `base`, names `workspace` (lexically)."""
    if not isinstance(root, str) or not root or "\0" in root:
        return False
    return os.path.normpath(os.path.join(base, os.path.expanduser(root))) == workspace


def _setting(config: Config, key: Key) -> Any:
    """The value of a key a workspace may narrow, in effect in `config`."""
    if key.section == "tools":
        return config.policy.tool_mode(key.name, writes=False)
    field = policy_field(key)
    if field is not None:
        return getattr(config.policy, field)
    return getattr(getattr(config, key.section), key.name)


def policy_field(key: Key) -> str | None:
    """The Policy field a key's value lives in ([workspace] read_only, [policy] and
    [edit] keys travel to the worker with the policy), or None: its section's type."""
    if key.section in ("workspace", "policy"):
        return key.name
    return f"edit_{key.name}" if key.section == "edit" else None


def _shown(value: object) -> str:
    """A value as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def _looser(data: dict[str, Any], local: Config, base: Config) -> Problems:
    """Each value of the workspace file looser than the operator's."""
    problems: Problems = []
    for section, items in data.items():
        if section == "rules":
            problems += _looser_rules(local, base)
            continue
        for name in items:
            key = BY_PLACE[section, name]
            mine, theirs = _setting(local, key), _setting(base, key)
            said = f"{key.where} = {_shown(mine)}"
            if key.narrows == "lower" and theirs is not None and mine > theirs:
                problems.append((key.where, f"{said}: above the operator's {_shown(theirs)}"))
            elif key.narrows == "order" and key.order.index(mine) < key.order.index(theirs):
                problems.append((key.where,
                                 f"{said}: looser than the operator's {_shown(theirs)}"))
    return problems


def _looser_rules(local: Config, base: Config) -> Problems:
    problems: Problems = []
    operator_rules = {rule.name for rule in (*base.policy.rules, *base.policy.workspace_rules)}
    for rule in local.policy.rules:
        where = f"[[rules]] {rule.name!r}"
        if rule.action == "allow":
            problems.append(("[[rules]]", f"{where} action = 'allow': a workspace rule may "
                             "only deny or supervise"))
        if rule.name in BUILTIN_NAMES:
            problems.append(("[[rules]]", f"{where} name: the name of a built-in rule, which "
                             "it would replace"))
        elif rule.name in operator_rules:
            problems.append(("[[rules]]", f"{where} name: the name of one of the operator's "
                             "rules"))
    return problems


def _narrower(key: Key, mine: Any, theirs: Any) -> Any:
    """The workspace's value of `key` merged with the operator's (already checked by
    _looser to be no looser)."""
    if key.narrows == "lower":  # the operator's none is no bound ([quota])
        return mine if theirs is None else min(mine, theirs)
    if key.narrows == "union":
        return tuple(dict.fromkeys((*theirs, *mine)))
    return max(mine, theirs, key=key.order.index)


def _merged(base: Config, local: Config, data: dict[str, Any]) -> Config:
    modes = dict(base.policy.tool_modes)
    in_policy: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for section, items in data.items():
        for name in items if section != "rules" else ():
            key = BY_PLACE[section, name]
            value = _narrower(key, _setting(local, key), _setting(base, key))
            field = policy_field(key)
            if section == "tools":
                modes[name] = value
            elif field is not None:
                in_policy[field] = value
            else:
                sections.setdefault(section, {})[name] = value
    policy = dataclasses.replace(
        base.policy, tool_modes=modes,
        workspace_rules=(*base.policy.workspace_rules, *local.policy.rules), **in_policy,
    )
    return dataclasses.replace(  # read_only also makes the workspace root "ro": Config.roots
        base, policy=policy, narrowed_by=local.source,
        **{section: dataclasses.replace(getattr(base, section), **values)
           for section, values in sections.items()},
    )


def _check_outside_roots(path: str, config: Config) -> None:
    real = os.path.realpath(path)
    for root in config.roots:
        if real.startswith(root.path.rstrip("/") + "/"):
            raise ConfigError(
                f"the user config lies inside the root {root.path}, where the workspace's "
                "content could have put it, so it is not trusted; move it out of every "
                "root",
                file=path, remedy=Remedy("name_file"),
            )


def _same_file(first: str, second: str) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False
