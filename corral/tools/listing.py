"""list_directory: one directory, or a whole tree, never following symlinks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from corral.fs import TEMP_PREFIX, Entry, Root
from corral.policy import RootSpec
from corral.tools import render
from corral.tools.access import joined, open_target, visibility, within
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
from corral.tools.ignore import Ignores

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
    ctx: Context, root: Root, seen: Resolved, entries: Iterable[Entry], include_hidden: bool,
    ignores: Ignores | None = None,
) -> Iterator[Entry]:
    """Entries a caller may see: policy-denied paths are not listed at all, ignored
    ones are counted in `ignores.skipped` (after the policy: a denied name is not
    even counted). `seen.path` is read per entry: a lazy walk runs its guard only
    when iteration starts."""
    visible = visibility(ctx, root)
    for entry in entries:
        path = entry.path
        if in_flight(path) or (not include_hidden and hidden(path)):
            continue
        resolved = joined(seen.path, path)
        if not visible(resolved):
            continue
        if ignores is not None and ignores.ignored(resolved, entry.type == "dir"):
            ignores.skipped += 1
            continue
        yield entry


def ignoring(ctx: Context, root: Root, args: dict[str, Any]) -> Ignores | None:
    """The ignore rules a walk honours, None under include_ignored. Only ignore
    files the policy allows are read: what a denied or supervised file says must
    not show, even as what it hides."""
    if args["include_ignored"]:
        return None
    spec, decide, tool = RootSpec(root.path, root.mode), ctx.policy.decide, ctx.tool

    def readable(resolved: str) -> bool:
        return within(ctx, root, resolved) and decide(
            tool, spec, resolved, write=False).action == "allow"

    return Ignores(root, readable, ctx.policy.ignore)


def walked(
    root: Root, rel: str, seen: Resolved, ignores: Ignores | None, include_hidden: bool = True
) -> Iterator[Entry]:
    """A lazy walk that does not enter hidden directories (unless include_hidden) or
    ignored ones: an ignored node_modules/ costs one entry, not twenty thousand."""
    def prune(path: str) -> bool:
        if not include_hidden and hidden(path):
            return True
        return ignores is not None and ignores.ignored(joined(seen.path, path), True)

    def entered(path: str, names: list[str]) -> None:
        directory = joined(seen.path, path) if path else seen.path
        if ignores is not None:
            ignores.entered("" if directory == "." else directory, names)

    needed = ignores is not None or not include_hidden
    return root.walk(rel, guard=seen, prune=prune if needed else None,
                     entered=entered if ignores is not None else None)


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
    ignores = None
    if args["recursive"]:  # a hidden or ignored tree left out is not walked either
        ignores = ignoring(ctx, root, args)
        tree = walked(root, rel, seen, ignores, args["include_hidden"])  # lazy: taken up to
        listed: Iterable[Entry] = shown(  # the limit
            ctx, root, seen, tree, args["include_hidden"], ignores)
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
        "ignored": 0 if ignores is None else ignores.skipped,
    }
    text = _text(path, entries, truncated)
    return Outcome(result, text + ignored_note(result["ignored"], "\n" if entries else " "))


def ignored_note(skipped: int, before: str) -> str:
    """What a listing or search says of what it left out."""
    if not skipped:
        return ""
    return (f"{before}[{skipped} ignored entries left out (.gitignore, .ignore); "
            "include_ignored=true shows them]")


IGNORED: dict[str, Any] = {"type": "integer", "minimum": 0,
           "description": "Entries left out by ignore files (an ignored directory counts "
                          "once: it is not entered)."}
INCLUDE_IGNORED: dict[str, Any] = {"type": "boolean", "default": False,
                   "description": "Include what .gitignore and .ignore files exclude (and "
                                  ".git itself)."}


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
            "paths relative to the directory; symlinks are shown, never followed, and "
            "what .gitignore files exclude is left out. The listing stops at max_entries "
            "with truncated=true; then list a subdirectory or use search_files with a glob."
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
                "include_ignored": {
                    **INCLUDE_IGNORED,
                    "description": "With recursive: " + INCLUDE_IGNORED["description"]},
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
            "ignored": IGNORED,
        }),
        annotations=mcp_hints(read_only=True, destructive=False, idempotent=True),
        writes=False,
        run=list_directory,
    ),
]
