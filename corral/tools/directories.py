"""delete_directory: a directory, and with `recursive` everything beneath it."""

from __future__ import annotations

from typing import Any

from corral.tools.access import TreeCheck, target
from corral.tools.base import (
    BOOLEAN,
    INTEGER,
    STRING,
    Context,
    Outcome,
    Tool,
    mcp_hints,
    obj,
    path_prop,
    shape,
)


def delete_directory(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    root, rel = target(ctx, path, write=True)
    check = TreeCheck(ctx, root, path)
    removed = root.remove_tree(
        rel, recursive=bool(args["recursive"]), guard=check, beneath=check.entry, keep=ctx.keep
    )
    entries = "entry" if removed == 1 else "entries"
    text = f"Deleted {path} and the {removed} {entries} beneath it." if removed else (
        f"Deleted {path}.")
    return Outcome({"path": path, "deleted": True, "entries_removed": removed}, text)


DIRECTORY_TOOLS = [
    Tool(
        name="delete_directory",
        title="Delete directory",
        description=(
            "Delete a directory. An empty one is deleted as is; a non-empty one only with "
            "recursive=true, which deletes everything beneath it (a symlink inside is "
            "removed as a link; what it points to is kept). Nothing is deleted if the policy "
            "denies any entry beneath it. Files are deleted with delete_file, not here. "
            "List the directory first if you are not sure what it holds."
        ),
        input_schema=obj(
            {
                "path": path_prop("Directory to delete"),
                "recursive": {
                    "type": "boolean", "default": False,
                    "description": "Also delete everything beneath it (needed if it is "
                                   "not empty).",
                },
            },
            ("path",),
        ),
        output_schema=shape({"path": STRING, "deleted": BOOLEAN, "entries_removed": INTEGER}),
        annotations=mcp_hints(read_only=False, destructive=True, idempotent=False),
        writes=True,
        run=delete_directory,
    ),
]
