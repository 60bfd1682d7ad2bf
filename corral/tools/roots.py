"""list_allowed_directories: the directories a model may use, named where it can read them."""

from __future__ import annotations

import posixpath
from typing import Any

from corral.tools.base import STRING, Context, Outcome, Tool, list_of, mcp_hints, obj, shape

_MODES = {"rw": "read-write", "ro": "read-only"}


def allowed_directories(ctx: Context) -> list[dict[str, str]]:
    """Every root, absolute, with its mode; narrowed to the client's roots for this call."""
    allowed = []
    for root in ctx.roots.all():
        prefixes = ["."] if ctx.within is None else ctx.within.get(root.path, [])
        for prefix in prefixes:
            path = root.path if prefix == "." else posixpath.join(root.path, prefix)
            allowed.append({"path": path, "mode": root.mode})
    return allowed


def list_allowed_directories(ctx: Context, args: dict[str, Any]) -> Outcome:
    roots = allowed_directories(ctx)
    lines = [f"{root['path']} ({_MODES[root['mode']]})" for root in roots]
    text = "\n".join(lines) or "No directory is allowed: the client's roots lie outside them."
    return Outcome({"roots": roots}, text)


ROOT_TOOLS = [
    Tool(
        name="list_allowed_directories",
        title="List allowed directories",
        description=(
            "List the directories you may use, as absolute paths, each read-write or "
            "read-only. The first is the workspace: relative paths are taken from it; a path "
            "anywhere else must be absolute and lie inside one of these."
        ),
        input_schema=obj({}),
        output_schema=shape({"roots": list_of(shape({
            "path": STRING, "mode": {"type": "string", "enum": ["rw", "ro"]},
        }))}),
        annotations=mcp_hints(read_only=True, destructive=False, idempotent=True),
        writes=False,
        run=list_allowed_directories,
    ),
]
