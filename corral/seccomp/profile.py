"""The seccomp profile: OCI/Docker JSON -> validated records. Pure; no kernel."""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

from corral.seccomp.arches import ARCHES, HERE, load_arch

WORKER_PROFILE = "worker.json"  # shipped next to this module

ACTIONS = frozenset({"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL_PROCESS"})
# The comparisons the compiler implements; each compares the full 64-bit argument.
OPS = frozenset({"SCMP_CMP_EQ", "SCMP_CMP_NE", "SCMP_CMP_MASKED_EQ"})
MAX_ARG_INDEX = 5  # seccomp_data carries six arguments
_U64 = (1 << 64) - 1


class ProfileError(ValueError):
    """The profile is not something this compiler can enforce exactly as written."""


class ArgCheck(NamedTuple):
    # the OCI name; it hides tuple.index, which nothing calls on a check
    index: int  # type: ignore[assignment]
    op: str
    value: int
    value_two: int = 0  # MASKED_EQ: (arg & value) == value_two

    def matches(self, args: tuple[int, ...]) -> bool:
        """Reference semantics (the compiler must agree; tests check it)."""
        arg = args[self.index]
        if self.op == "SCMP_CMP_EQ":
            return arg == self.value
        if self.op == "SCMP_CMP_NE":
            return arg != self.value
        return arg & self.value == self.value_two


class Rule(NamedTuple):
    names: tuple[str, ...]
    action: str
    errno: int  # used when action is SCMP_ACT_ERRNO
    args: tuple[ArgCheck, ...] = ()


@dataclass(frozen=True)
class Profile:
    default_action: str
    default_errno: int
    architectures: tuple[str, ...]  # our table names, e.g. ("x86_64", "aarch64")
    rules: tuple[Rule, ...]

    def rules_for(self, name: str) -> list[Rule]:
        """The rules naming `name`, in profile order (first match wins)."""
        return list(self._by_name.get(name, ()))

    @functools.cached_property
    def _by_name(self) -> dict[str, list[Rule]]:
        # built once: the compiler asks for every syscall of a table (~600 names)
        index: dict[str, list[Rule]] = {}
        for rule in self.rules:
            for name in dict.fromkeys(rule.names):
                index.setdefault(name, []).append(rule)
        return index


def refusing(profile: Profile, names: tuple[str, ...], err: int = errno.EPERM) -> Profile:
    """`profile` with `names` failing `err` whatever their arguments: every rule that
    named them drops them, and one rule refusing them all comes first."""
    dropped = set(names)
    kept = [rule._replace(names=tuple(n for n in rule.names if n not in dropped))
            for rule in profile.rules]
    refuse = Rule(names, "SCMP_ACT_ERRNO", err)
    return dataclasses.replace(profile, rules=(refuse, *(rule for rule in kept if rule.names)))


def load_profile(path: str | os.PathLike[str] | None = None) -> Profile:
    """Read and validate a profile; the shipped worker profile when path is None."""
    with open(path or os.path.join(HERE, WORKER_PROFILE), encoding="utf-8") as source:
        text = source.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"seccomp profile is not valid JSON: {exc}") from None
    return parse_profile(data)


def parse_profile(data: Any) -> Profile:
    if not isinstance(data, dict):
        raise ProfileError("seccomp profile must be a JSON object")
    default_action = _action(data.get("defaultAction"), "defaultAction")
    default_errno = _errno(data.get("defaultErrnoRet", errno.EPERM), "defaultErrnoRet")
    by_scmp = {load_arch(name).scmp_name: name for name in ARCHES}
    arches = data.get("architectures")
    if not isinstance(arches, list) or not arches:
        raise ProfileError("architectures must be a non-empty list")
    unknown = [a for a in arches if a not in by_scmp]
    if unknown:
        raise ProfileError(f"unsupported architectures {unknown}; known: {sorted(by_scmp)}")
    entries = data.get("syscalls")
    if not isinstance(entries, list):
        raise ProfileError("syscalls must be a list")
    rules = tuple(_rule(entry, default_errno, i) for i, entry in enumerate(entries))
    profile = Profile(default_action, default_errno, tuple(by_scmp[a] for a in arches), rules)
    _check_names(profile)
    _check_order(profile)
    return profile


def _rule(entry: Any, default_errno: int, i: int) -> Rule:
    where = f"syscalls[{i}]"
    if not isinstance(entry, dict):
        raise ProfileError(f"{where} must be an object")
    names = entry.get("names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ProfileError(f"{where}.names must be a non-empty list of syscall names")
    action = _action(entry.get("action"), f"{where}.action")
    err = _errno(entry.get("errnoRet", default_errno), f"{where}.errnoRet")
    raw_args = entry.get("args") or []
    if not isinstance(raw_args, list):
        raise ProfileError(f"{where}.args must be a list")
    args = tuple(_arg(arg, f"{where}.args[{j}]") for j, arg in enumerate(raw_args))
    indexes = [a.index for a in args]
    if len(set(indexes)) != len(indexes):
        # runc would OR such checks, libseccomp AND them: refuse the ambiguity
        raise ProfileError(f"{where} checks one argument twice; use separate entries")
    return Rule(tuple(names), action, err, args)


def _arg(arg: Any, where: str) -> ArgCheck:
    if not isinstance(arg, dict):
        raise ProfileError(f"{where} must be an object")
    index, op = arg.get("index"), arg.get("op")
    value, value_two = arg.get("value"), arg.get("valueTwo", 0)
    if not isinstance(index, int) or not 0 <= index <= MAX_ARG_INDEX:
        raise ProfileError(f"{where}.index must be 0..{MAX_ARG_INDEX}")
    if op not in OPS:
        raise ProfileError(f"{where}.op {op!r} is not supported; use one of {sorted(OPS)}")
    for field, number in (("value", value), ("valueTwo", value_two)):
        if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number <= _U64:
            raise ProfileError(f"{where}.{field} must be an unsigned 64-bit integer")
    assert isinstance(value, int) and isinstance(value_two, int)  # checked just above
    if op == "SCMP_CMP_MASKED_EQ" and value_two & ~value:
        # as documented such a check never holds; libseccomp drops the extra bits
        # and lets it hold: refuse the ambiguity rather than pick one reading
        raise ProfileError(f"{where}.valueTwo has bits outside the mask `value`")
    return ArgCheck(index, op, value, value_two)


def _action(action: Any, where: str) -> str:
    if action not in ACTIONS:
        raise ProfileError(f"{where} {action!r} is not supported; use one of {sorted(ACTIONS)}")
    return action


def _errno(value: Any, where: str) -> int:
    # SECCOMP_RET_DATA is 16 bits; errno 0 would make a denied call look successful
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 4095:
        raise ProfileError(f"{where} must be an errno between 1 and 4095")
    return value


def _check_names(profile: Profile) -> None:
    """Every name must exist on at least one architecture: a typo must not pass silently."""
    known: set[str] = set()
    for name in ARCHES:
        known.update(load_arch(name).syscalls)
    unknown = sorted({n for rule in profile.rules for n in rule.names} - known)
    if unknown:
        raise ProfileError(f"unknown syscall names: {unknown}")


def _check_order(profile: Profile) -> None:
    """Per syscall, an unconditional rule ends the list: anything after it is dead."""
    for name in {n for rule in profile.rules for n in rule.names}:
        rules = profile.rules_for(name)
        for rule in rules[:-1]:
            if not rule.args:
                raise ProfileError(f"{name}: an unconditional rule is followed by another rule")
