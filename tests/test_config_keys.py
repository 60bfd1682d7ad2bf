"""The key table (corral.config_keys) is what the value types, the parser and the
trust boundary read: walked here key by key, so a key added to the table is
covered without a new test."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from corral.config import (
    AuditOptions,
    Config,
    ConfigError,
    HistoryOptions,
    Limits,
    QuotaOptions,
    SandboxOptions,
    load_config,
)
from corral.config_keys import KEYS, SECTION_KEYS, Key
from corral.trust import narrow, policy_field

VALUE_TYPES = {"audit": AuditOptions, "limits": Limits, "sandbox": SandboxOptions,
               "history": HistoryOptions, "quota": QuotaOptions}


@pytest.mark.parametrize("section", sorted(VALUE_TYPES))
def test_each_value_type_has_exactly_the_keys_of_its_section(section: str) -> None:
    settings = VALUE_TYPES[section]()
    names = tuple(field.name for field in dataclasses.fields(settings))
    assert names == SECTION_KEYS[section]
    for key in KEYS:
        if key.section == section:
            assert getattr(settings, key.name) == key.default, key.where


@pytest.mark.parametrize("key", [key for key in KEYS if key.kind in ("int", "number")],
                         ids=lambda key: key.where)
def test_a_value_type_refuses_what_the_table_refuses(key: Key) -> None:
    with pytest.raises(ValueError, match=f"{key.name} must be a positive"):
        VALUE_TYPES[key.section](**{key.name: 0})


def toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return f"[{', '.join(toml(item) for item in value)}]"
    return json.dumps(value)


def in_effect(config: Config, key: Key) -> Any:
    """The value `key` has in `config`, read through the public types."""
    if key.section == "tools":
        return config.policy.tool_mode(key.name, writes=False)
    field = policy_field(key)
    if field is not None:
        return getattr(config.policy, field)
    return getattr(getattr(config, key.section), key.name)


def cases(key: Key) -> tuple[Any, Any, Any]:
    """(the operator's value, a workspace value that narrows it or None, one that
    widens it or None), from how the table says the key narrows."""
    if key.narrows == "lower" and key.default is None:  # none by default: a bound set
        return 100, 50, 101
    if key.narrows == "lower":
        return key.default, key.default / 2 if key.kind == "number" else key.default - 1, (
            key.default + 1)
    if key.narrows == "order":  # the operator in the middle ground is not needed: ends
        return key.order[0], key.order[-1], None
    if key.narrows == "union":
        added = key.choices[0] if key.choices else "build/"
        return key.default, [added], None  # adding to a union can only narrow
    if key.narrows == "itself":
        return ".", ".", ".."
    if key.narrows == "empty":
        return [], [], ["/"]
    return key.default, None, key.default if key.default is not None else "x"  # operator


def operator(tmp_path: Path, ws: Path, key: Key, value: Any) -> Config:
    text = f'[workspace]\nroot = "{ws}"\n'
    if key.section != "workspace" and value is not None:
        text += f"[{key.section}]\n{key.name} = {toml(value)}\n"
    elif key.name == "read_only":
        text += f"read_only = {toml(value)}\n"
    path = tmp_path / "operator.toml"
    path.write_text(text)
    return load_config(path)


def workspace_config(ws: Path, key: Key, value: Any) -> Path:
    path = ws / "corral.toml"
    path.write_text(f"[{key.section}]\n{key.name} = {toml(value)}\n")
    return path


@pytest.mark.parametrize("key", KEYS, ids=lambda key: key.where)
def test_a_workspace_config_may_narrow_each_key_and_never_widen_it(
    tmp_path: Path, ws: Path, key: Key
) -> None:
    theirs, narrower, wider = cases(key)
    if narrower is not None:
        merged = narrow(operator(tmp_path, ws, key, theirs), workspace_config(ws, key, narrower))
        if key.narrows not in ("itself", "empty"):  # those two change nothing
            expected = tuple(narrower) if isinstance(narrower, list) else narrower
            assert in_effect(merged, key) == expected, key.where
    for config, value in [(operator(tmp_path, ws, key, theirs), wider)] + (
        # an "order" key: the loosest value under the strictest operator
        [(operator(tmp_path, ws, key, key.order[-1]), key.order[0])]
        if key.narrows == "order" else []
    ):
        if value is None:
            continue
        with pytest.raises(ConfigError) as caught:
            narrow(config, workspace_config(ws, key, value))
        assert key.where in str(caught.value) or f"[{key.section}]:" in str(caught.value)
        assert caught.value.remedy is not None and caught.value.remedy.where == "operator"


def test_a_key_the_table_does_not_list_is_refused_from_a_workspace_config(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: how a key narrows comes only from the table, so a key the parser
    knows but the table lacks is the operator's alone."""
    import corral.trust

    timeout = next(key for key in KEYS if key.where == "[limits] timeout_s")
    config = operator(tmp_path, ws, timeout, None)
    path = workspace_config(ws, timeout, 1)
    assert narrow(config, path).limits.timeout_s == 1.0  # a narrowing, while listed
    listed = {place: key for place, key in corral.trust.BY_PLACE.items() if key is not timeout}
    monkeypatch.setattr(corral.trust, "BY_PLACE", listed)
    with pytest.raises(ConfigError, match=r"\[limits\] timeout_s: only the operator's config"):
        narrow(config, path)
