"""Tool = JSON schema + a function over a Context (Roots + Limits + Policy).
Runs inside the worker; nothing here touches the file system by itself."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from corral.calls.messages import GrantRef, GrantUse, NeedsApproval, Touched
from corral.config import Limits
from corral.fs import NO_KEEP, Keep, Roots
from corral.history.store import Store
from corral.policy import Policy


@dataclass
class Context:
    """Long-lived parts (roots, limits, policy) plus the state of one call;
    registry.execute copies it per call so calls never share that state."""

    roots: Roots
    limits: Limits
    policy: Policy
    approved: frozenset[str] = frozenset()  # "root\0resolved" keys the host approved
    grants: tuple[GrantRef, ...] = ()  # remembered approvals of this tool (checked per path)
    grants_used: list[GrantUse] = field(default_factory=list)  # which ones let a path through
    touched: list[Touched] = field(default_factory=list)
    tool: str = ""  # the tool being run: policy decisions are per tool
    needs_approval: list[NeedsApproval] = field(default_factory=list)
    given: dict[str, str] = field(default_factory=dict)  # root-relative path -> as given
    # The tool's mode is "supervised": every path it touches needs the host's yes,
    # asked once the path is resolved (the host cannot know what a path names).
    supervised: bool = False
    # The client's roots for this call: root path -> root-relative directories the
    # call may use ("." the whole root; none: nothing in that root). None: no narrowing.
    within: dict[str, list[str]] | None = None
    history: Store | None = None  # this workspace's history store (None: history off)
    keep: Keep = NO_KEEP  # records this call's changes: a history Keeper when history is on
    seen: dict[str, str] = field(default_factory=dict)  # read_before_write: key -> version
    wrote: dict[str, str] = field(default_factory=dict)  # versions this call left (append)

    def for_call(
        self, *, approved: frozenset[str], grants: tuple[GrantRef, ...],
        within: dict[str, list[str]] | None, tool: str,
    ) -> Context:
        """A copy for one call: the long-lived parts shared, the call's own state
        fresh. Written out, not dataclasses.replace: a quarter of its cost, and
        half of it in a call after an idle pause (~30 us less: every step runs cold)."""
        return Context(
            self.roots, self.limits, self.policy, approved=approved, grants=grants,
            tool=tool, supervised=self.supervised, within=within, history=self.history,
            keep=self.keep, seen=self.seen,
        )


class Outcome(NamedTuple):
    result: dict[str, Any]
    text: str
    bytes: int = 0  # bytes read or written, for the audit record


class Tool(NamedTuple):
    name: str
    title: str  # for people (an MCP client's UI)
    description: str  # one paragraph written for a model
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]  # the shape of a success's `result`
    annotations: dict[str, Any]  # readOnlyHint, destructiveHint, idempotentHint, openWorldHint
    writes: bool
    run: Callable[[Context, dict[str, Any]], Outcome]

    def spec(self) -> dict[str, Any]:
        """What a host shows a model: name, title, description, input_schema,
        output_schema, annotations (a copy: a host that edits it must not change
        what the tool enforces)."""
        return copy.deepcopy({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "annotations": self.annotations,
        })


def mcp_hints(*, read_only: bool, destructive: bool, idempotent: bool) -> dict[str, bool]:
    """MCP tool annotations, spelled as the MCP spec spells them. openWorldHint is
    false: a file tool's world is the workspace (the spec's default is true)."""
    return {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": False,
    }


def obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object schema that refuses unknown arguments; every property not in
    `required` also takes null, meaning its default."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            key: prop if key in required else optional(prop) for key, prop in properties.items()
        },
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


def optional(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional argument: its type or null, spelled with anyOf (anthropic's
    transform_schema and OpenAI's strict mode refuse type arrays). The description
    and default stay outside, where converters and models look for them."""
    outside = ("description", "default")
    shown = {key: prop[key] for key in outside if key in prop}
    inner = {key: value for key, value in prop.items() if key not in outside}
    return {"anyOf": [inner, {"type": "null"}], **shown}


# The shapes of results (output schemas): precise about types and the keys always
# present; a client must not break on a key added later, so objects stay open.
STRING = {"type": "string"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}
BOOLEAN = {"type": "boolean"}
ERROR = {"type": "object", "properties": {"code": STRING, "message": STRING, "rule": STRING,
                                          "retry_after_s": NUMBER},
         "required": ["code", "message"]}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def shape(properties: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object every one of whose properties is present, but `optional` ones."""
    return {"type": "object", "properties": properties,
            "required": [key for key in properties if key not in optional]}


def list_of(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


def path_prop(what: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "description": f"{what}: relative to the workspace, or absolute inside an allowed root.",
    }


def match_prop(exact: str) -> dict[str, Any]:
    """The `match` argument of a tool that locates text (matching): `exact` says what
    must then match byte for byte."""
    return {
        "type": "string", "enum": ["tolerant", "exact"], "default": "tolerant",
        "description": f"'exact': {exact} byte for byte; 'tolerant' also accepts one "
        "unique match that differs only in trailing whitespace, line endings, indentation "
        "or look-alike quotes and dashes.",
    }
