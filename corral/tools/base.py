"""Tool = JSON schema + a function over a Context (Roots + Limits + Policy).
Runs inside the worker; nothing here touches the file system by itself."""

from __future__ import annotations

import copy
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
    """Long-lived parts (roots, limits, policy) plus the state of one call;
    registry.execute copies it per call so calls never share that state."""

    roots: Roots
    limits: Limits
    policy: Policy
    approved: frozenset[str] = frozenset()  # "root\0resolved" keys the host approved
    touched: list[Touched] = field(default_factory=list)
    tool: str = ""  # the tool being run: policy decisions are per tool
    needs_approval: list[dict[str, str]] = field(default_factory=list)
    given: dict[str, str] = field(default_factory=dict)  # root-relative path -> as given
    # The tool's mode is "supervised": every path it touches needs the host's yes,
    # asked once the path is resolved (the host cannot know what a path names).
    supervised: bool = False


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

    def spec(self) -> dict[str, Any]:
        """What a host shows a model: name, description, input_schema, annotations
        (a copy: a host that edits it must not change what the tool enforces)."""
        return copy.deepcopy({
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        })


def annotations(*, read_only: bool, destructive: bool, idempotent: bool) -> dict[str, bool]:
    """MCP tool annotations, spelled as the MCP spec spells them."""
    return {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
    }


def obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object schema that refuses unknown arguments."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


def path_prop(what: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "description": f"{what}: relative to the workspace, or absolute inside an allowed root.",
    }
