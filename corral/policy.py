"""INTERFACE STUB — the policy helper implements. Pure: no I/O.

Roots are given as RootSpec; decisions are made on the *resolved* path relative
to its root (the fs guard hands it over after opening).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RootSpec:
    path: str  # absolute
    mode: str  # "rw" | "ro"


@dataclass(frozen=True)
class Rule:
    name: str
    action: str  # "allow" | "deny" | "supervised"
    tools: tuple[str, ...]  # tool names or "*"
    paths: tuple[str, ...]  # globs, "**" allowed; relative to the root (or absolute)


@dataclass(frozen=True)
class Decision:
    action: str  # "allow" | "deny" | "supervised"
    rule: str | None  # the rule's name, None for default_action / tool mode


@dataclass(frozen=True)
class Policy:
    tool_modes: dict  # tool name -> "allow" | "deny" | "supervised"
    rules: tuple[Rule, ...] = ()
    default_action: str = "allow"
    path_regex: tuple[str, ...] = ()
    read_only: bool = False

    def tool_mode(self, tool: str, *, writes: bool) -> str:
        """Mode of a tool: read_only denies writers; delete_file denied unless enabled."""
        raise NotImplementedError

    def decide(self, tool: str, root: RootSpec, rel: str, *, write: bool) -> Decision:
        """Decision for one resolved root-relative path: user rules, then built-in
        rules (overridden by a user rule of the same name), then path_regex
        whitelist, then default_action. A write into an "ro" root is decided by
        the caller (read_only error), not here."""
        raise NotImplementedError

    def to_dict(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict) -> Policy:
        raise NotImplementedError
