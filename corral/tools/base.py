"""INTERFACE STUB — the tools helper implements. Tool = JSON schema + a function
over a Context (Roots + Limits + Policy). Runs inside the worker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.config import Limits
from corral.fs import Roots
from corral.policy import Policy


@dataclass
class Touched:
    """One path a call touched, for the audit record (never contents)."""

    path: str  # as the caller gave it
    root: str  # the root's absolute path
    resolved: str  # root-relative, after resolution
    decision: str
    rule: str | None


@dataclass
class Context:
    roots: Roots
    limits: Limits
    policy: Policy
    approved: frozenset[str] = frozenset()  # "root\0resolved" keys the host approved
    touched: list[Touched] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    result: dict[str, Any]
    text: str
    bytes: int = 0  # bytes read or written, for the audit record


@dataclass(frozen=True)
class Tool:
    name: str
    description: str  # one paragraph written for a model
    input_schema: dict[str, Any]
    annotations: dict[str, bool]  # readOnlyHint, destructiveHint, idempotentHint
    writes: bool
    run: Callable[[Context, dict[str, Any]], Outcome]
