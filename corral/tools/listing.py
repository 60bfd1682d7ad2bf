"""list_directory: one directory, or a whole tree, never following symlinks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from corral.fs import TEMP_PREFIX, Entry, Root
from corral.tools import render
from corral.tools.access import joined, open_target, visibility
from corral.tools.base import (
    BOOLEAN,
    INTEGER,
    NUMBER,
    STRING,
    Context,
    Outcome,
    Tool,
    list_of,
    mcp_hints,
    obj,
    path_prop,
    shape,
)

DEFAULT_MAX_ENTRIES = 500


class Resolved:
    """Captures the resolved path a guard saw, so entries can be decided by policy."""

    def __init__(self, check: Callable[[str], None]) -> None:
        self.check = check
        self.path = "."

    def __call__(self, resolved: str) -> None:
        self.check(resolved)
        self.path = resolved

    def through(self, resolved: str, target: str | None = None) -> None:
        """A directory on the way (Root calls it; see PathCheck.through)."""
        through = getattr(self.check, "through", None)
        if through is not None:
            through(resolved, target)


def hidden(path: str) -> bool:
    """A name, or a directory on its way, starting with a dot."""
    return path.startswith(".") or "/." in path


def in_flight(path: str) -> bool:
    """A write's temp file, there for the milliseconds before its rename: listing
    it would hand a model a half-written file to read or edit."""
    return TEMP_PREFIX in path and path.rpartition("/")[2].startswith(TEMP_PREFIX)


def shown(
    ctx: Context, root: Root, seen: Resolved, entries: Iterable[Entry], include_hidden: bool
) -> Iterator[Entry]:
    """Entries a caller may see: policy-denied paths are not listed at all. `seen.path`
    is read per entry: a lazy walk runs its guard only when iteration starts."""
    visible = visibility(ctx, root)
    for entry in entries:
        path = entry.path
        if in_flight(path) or (not include_hidden and hidden(path)):
            continue
        if visible(joined(seen.path, path)):
            yield entry


# What one listed entry adds to a result beside its name: the JSON of its type,
# size and time ({"name":"","type":"file","size":123,"modified":1.0}, about 70 bytes).
ENTRY_OVERHEAD = 80
# A listing's budget is max_read_bytes, but never below this: names are not file
# content, and a config that keeps reads tiny still wants its listings whole.
LISTING_BUDGET_FLOOR = 256 * 1024


def listing_budget(ctx: Context) -> int:
    return max(ctx.limits.max_read_bytes, LISTING_BUDGET_FLOOR)


def take(entries: Iterable[Entry], limit: int, budget: int) -> tuple[list[Entry], bool]:
    """At most `limit` entries, and whether there were more; the names, as JSON
    encodes them, and their fields stay within `budget` bytes (listing_budget: a
    listing of 100,000 long names must not return megabytes)."""
    if isinstance(entries, list):  # all at hand: most often they fit, measured at once
        head = entries[:limit]
        names = "".join([entry.path for entry in head])
        if ENTRY_OVERHEAD * len(head) + render.text_size(names) <= budget:
            return head, len(entries) > limit
    taken: list[Entry] = []
    for entry in entries:
        budget -= ENTRY_OVERHEAD + render.text_size(entry.path)
        if len(taken) == limit or budget < 0:
            return taken, True
        taken.append(entry)
    return taken, False


def list_directory(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    limit = min(args["max_entries"], ctx.limits.max_list_entries)
    root, rel, check = open_target(ctx, path, write=False)
    seen = Resolved(check)
    if args["recursive"]:  # a hidden tree (.git, .venv) left out is not walked either
        prune = None if args["include_hidden"] else hidden
        walked = root.walk(rel, guard=seen, prune=prune)  # lazy: taken only up to the limit
        listed: Iterable[Entry] = shown(ctx, root, seen, walked, args["include_hidden"])
    else:
        scanned = root.scandir(rel, guard=seen)
        listed = list(shown(ctx, root, seen, scanned, args["include_hidden"]))
    entries, truncated = take(listed, limit, listing_budget(ctx))
    result = {
        "path": path,
        "entries": [
            {"name": e.path, "type": e.type, "size": e.size, "modified": e.modified}
            for e in entries
        ],
        "count": len(entries),
        "truncated": truncated,
    }
    return Outcome(result, _text(path, entries, truncated))


def _text(path: str, entries: list[Entry], truncated: bool) -> str:
    if not entries:
        return f"{path} is empty."
    lines = []
    for entry in entries:
        if entry.type == "dir":
            lines.append(f"{entry.path}/")
        elif entry.type == "file":
            lines.append(f"{entry.path}  ({render.size_text(entry.size)})")
        else:
            lines.append(f"{entry.path}  [{entry.type}]")
    if truncated:
        lines.append(f"[listing cut at {len(entries)} entries; list a subdirectory for more]")
    return "\n".join(lines)


LISTING_TOOLS = [
    Tool(
        name="list_directory",
        title="List directory",
        description=(
            "List a directory's entries with their type (file, dir, symlink, other), size "
            "and modification time. recursive=true lists the whole tree beneath it with "
            "paths relative to the directory; symlinks are shown, never followed. The "
            "listing stops at max_entries with truncated=true; then list a subdirectory or "
            "use search_files with a glob."
        ),
        input_schema=obj(
            {
                "path": {**path_prop("Directory to list"), "default": "."},
                "recursive": {"type": "boolean", "default": False,
                              "description": "List the whole tree beneath the directory."},
                "max_entries": {"type": "integer", "minimum": 1,
                                "default": DEFAULT_MAX_ENTRIES,
                                "description": "Most entries to return."},
                "include_hidden": {"type": "boolean", "default": True,
                                   "description": "Include names that start with a dot."},
            },
        ),
        output_schema=shape({
            "path": STRING,
            "entries": list_of(shape({
                "name": STRING,
                "type": {"type": "string", "enum": ["file", "dir", "symlink", "other"]},
                "size": INTEGER, "modified": NUMBER,
            })),
            "count": INTEGER,
            "truncated": BOOLEAN,
        }),
        annotations=mcp_hints(read_only=True, destructive=False, idempotent=True),
        writes=False,
        run=list_directory,
    ),
]
