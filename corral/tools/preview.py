"""What the person asked to approve a call sees of it: each stopped path's file
size and, for a change, a bounded unified diff.

It is made in the worker, at the approval stop: the host never reads the
workspace, and the worker has the call's arguments and the file at hand. The
change runs again as a dry run in a scratch copy of the call's context with the
stopped paths approved (so a path that resolves elsewhere meanwhile gets no
diff), keeping nothing and writing nothing. A diff is only shown where the
policy lets the file be read: approving a write must not show a person what a
read rule hides. Anything that fails on the way leaves the preview out; the
question is still asked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from corral.errors import CorralError
from corral.fs import NO_KEEP
from corral.policy import RootSpec
from corral.tools.access import content, open_target
from corral.tools.base import Context, NeedsApproval, Tool
from corral.tools.diff import unified_diff
from corral.tools.encodings import decode
from corral.tools.write import content_bytes

# An approval prompt shows the gist of a change, not a review of it: at most this
# many lines and bytes (UTF-8), each line cut to PREVIEW_LINE_CHARS, then a line
# saying how many more there were.
PREVIEW_LINES = 60
PREVIEW_BYTES = 4096
PREVIEW_LINE_CHARS = 200
_NO_EOL = "\\ No newline at end of file"

Change = Callable[[Context, Tool, dict[str, Any]], "str | None"]


def previewed(
    ctx: Context, tool: Tool, args: dict[str, Any], needs: list[NeedsApproval]
) -> tuple[list[NeedsApproval], str | None]:
    """The stopped paths with their sizes, and the change's bounded diff (None: not a
    change, or none could be made)."""
    roots = {root.path: root for root in ctx.roots.all()}
    sized = [need._replace(size=_size(roots, need)) for need in needs]
    readable = all(
        ctx.policy.decide(
            "read_file", RootSpec(need.root, roots[need.root].mode), need.resolved, write=False
        ).action != "deny"
        for need in needs if need.root in roots
    )
    change = _CHANGES.get(tool.name, _dry_run if "dry_run" in args else None)
    if change is None or not readable:
        return sized, None
    scratch = dataclasses.replace(
        ctx, approved=ctx.approved | {need.key for need in needs}, touched=[],
        needs_approval=[], grants_used=[], given={}, keep=NO_KEEP, wrote={},
        seen=dict(ctx.seen),
    )
    try:
        diff = change(scratch, tool, args)
    except CorralError:
        return sized, None
    return sized, bounded(diff) if diff else None


def bounded(diff: str) -> str:
    """At most PREVIEW_LINES lines and PREVIEW_BYTES bytes, each line at most
    PREVIEW_LINE_CHARS, and "… N more lines" when lines were left out."""
    # difflib's "\ No newline at end of file" says nothing a person needs here
    # split on newlines alone: a CR or U+2028 within a line is content (escaped where
    # shown), a line's CRLF ending is not
    lines = [line.removesuffix("\r") for line in diff.split("\n") if line != _NO_EOL]
    if lines and lines[-1] == "":
        lines.pop()
    kept: list[str] = []
    size = 0
    for line in lines[:PREVIEW_LINES]:
        if len(line) > PREVIEW_LINE_CHARS:
            line = line[:PREVIEW_LINE_CHARS] + "…"
        size += len(line.encode("utf-8", "surrogatepass")) + 1
        if size > PREVIEW_BYTES:
            break
        kept.append(line)
    if len(kept) < len(lines):
        kept.append(f"… {len(lines) - len(kept)} more lines")
    return "\n".join(kept)


def _size(roots: dict[str, Any], need: NeedsApproval) -> int | None:
    root = roots.get(need.root)
    if root is None:
        return None
    try:
        info = root.info(need.resolved, follow=False)
    except CorralError:
        return None
    return info.size if info is not None and info.type == "file" else None


def _text_change(after: Callable[[dict[str, Any], bytes], bytes]) -> Change:
    """A whole-file change (write, append): the diff of the file's text before and
    after, as `after(args, current bytes)` makes it; None for a binary file."""

    def change(ctx: Context, tool: Tool, args: dict[str, Any]) -> str | None:
        path = args["path"]
        root, rel, check = open_target(ctx, path, write=True)
        try:
            before = content(ctx, root, rel, check)
        except CorralError as error:
            if error.code != "not_found":
                raise
            before = b""
        fallbacks = ctx.policy.fallback_encodings  # as a read of the file decodes it
        old_text, new_text = decode(before, fallbacks), decode(after(args, before), fallbacks)
        if old_text is None or new_text is None:
            return None
        return unified_diff(path, old_text.text, new_text.text)

    return change


def _written(args: dict[str, Any], before: bytes) -> bytes:
    return content_bytes(args["content"], args["encoding"])


def _appended(args: dict[str, Any], before: bytes) -> bytes:
    return before + content_bytes(args["content"], "utf-8")


def _dry_run(ctx: Context, tool: Tool, args: dict[str, Any]) -> str | None:
    """A tool with a dry run (edit_file, apply_patch): its own diff, as `diff` or as
    each of its `files`' diff."""
    result = tool.run(ctx, {**args, "dry_run": True}).result
    diff = result.get("diff")
    if isinstance(diff, str):
        return diff
    files = result.get("files")
    diffs = [f["diff"] for f in files if isinstance(f, dict) and isinstance(f.get("diff"), str)] \
        if isinstance(files, list) else []
    return "".join(diffs) or None


_CHANGES: dict[str, Change] = {
    "write_file": _text_change(_written), "append_file": _text_change(_appended),
}
