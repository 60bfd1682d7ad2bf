"""What the person asked to approve a call sees of it: each stopped path's file
size and, for a change, a bounded unified diff.

It is made in the worker, at the approval stop: the host never reads the
workspace, and the worker has the call's arguments and the file at hand. The
change runs again as a dry run in a scratch copy of the call's context with the
stopped paths approved (so a path that resolves elsewhere meanwhile gets no
diff), keeping nothing and writing nothing. A diff is only shown where the
policy lets the file be read: approving a write must not show a person what a
read rule hides. A change of several files (a patch) shows the diffs of the
paths that stopped, each given its share of the bound, and names the files it
changes unasked: a long harmless change must not push the one asked about out
of sight. Anything that fails on the way leaves the preview out; the question is
still asked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from msgspec.structs import replace

from corral.calls.messages import NeedsApproval
from corral.errors import CorralError
from corral.fs import NO_KEEP
from corral.policy import RootSpec
from corral.tools.access import content, open_target
from corral.tools.base import Context, Tool
from corral.tools.diff import header, unified_diff
from corral.tools.encodings import decode
from corral.tools.write import content_bytes

# An approval prompt shows the gist of a change, not a review of it: at most this
# many lines and bytes (UTF-8), each line cut to PREVIEW_LINE_CHARS, then a line
# saying how many more there were.
PREVIEW_LINES = 60
PREVIEW_BYTES = 4096
PREVIEW_LINE_CHARS = 200
# A stopped file's share is at least this many lines and bytes (its headers and a
# first change); the stopped files left once those run out are counted instead.
PREVIEW_SHARE_LINES = 6
PREVIEW_SHARE_BYTES = 256
_NO_EOL = "\\ No newline at end of file"

# A change of several files gives each file's names (a move's two) and its diff.
FileDiffs = list[tuple[tuple[str, ...], "str | None"]]
Change = Callable[[Context, Tool, dict[str, Any]], "str | FileDiffs | None"]


def previewed(
    ctx: Context, tool: Tool, args: dict[str, Any], needs: list[NeedsApproval]
) -> tuple[list[NeedsApproval], str | None]:
    """The stopped paths with their sizes, and the change's bounded diff (None: not a
    change, or none could be made)."""
    roots = {root.path: root for root in ctx.roots.all()}
    sized = [replace(need, size=_size(roots, need)) for need in needs]
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
    if isinstance(diff, list):
        return sized, per_file(diff, {need.path for need in needs})
    return sized, bounded(diff) if diff else None


def per_file(files: FileDiffs, stopped: set[str]) -> str | None:
    """The diffs of the files a stopped path names, each bounded to its share of
    PREVIEW_LINES and PREVIEW_BYTES, then a line naming the other files."""
    asked = [diff for names, diff in files if stopped & set(names) and diff]
    rest = [names[0] for names, _ in files if not stopped & set(names)]
    parts: list[str] = []
    lines, size = PREVIEW_LINES, PREVIEW_BYTES
    for index, diff in enumerate(asked):
        if lines < PREVIEW_SHARE_LINES or size < PREVIEW_SHARE_BYTES:
            parts.append(f"… {len(asked) - index} more files asked about, their diffs left out")
            break
        left = len(asked) - index
        share_lines = max(lines // left, PREVIEW_SHARE_LINES)
        share_size = max(size // left, PREVIEW_SHARE_BYTES)
        # the "… N more lines" line counts within the share
        part = bounded(diff, share_lines - 1, share_size - len(_more(999_999).encode()))
        parts.append(part)
        lines -= part.count("\n") + 1
        size -= len(part.encode("utf-8", "surrogatepass")) + 1
    if rest:
        parts.append(_named("Also in the change, not asked about", rest))
    return "\n".join(parts) or None


def _named(what: str, names: list[str]) -> str:
    """One line: `what`, and as many of `names` as fit PREVIEW_LINE_CHARS."""
    line = f"{what} ({len(names)}): "
    for index, name in enumerate(names):
        more = f" and {len(names) - index} more"
        if len(line) + len(name) + len(more) + 2 > PREVIEW_LINE_CHARS:
            return line + more.lstrip()
        line += name + (", " if index < len(names) - 1 else "")
    return line


def _more(count: int) -> str:
    return f"… {count} more lines"


def bounded(diff: str, most_lines: int = PREVIEW_LINES, most_bytes: int = PREVIEW_BYTES) -> str:
    """At most `most_lines` lines and `most_bytes` bytes (UTF-8), each line at most
    PREVIEW_LINE_CHARS, and "… N more lines" when lines were left out."""
    # difflib's "\ No newline at end of file" says nothing a person needs here
    # split on newlines alone: a CR or U+2028 within a line is content (escaped where
    # shown), a line's CRLF ending is not
    lines = [line.removesuffix("\r") for line in diff.split("\n") if line != _NO_EOL]
    if lines and lines[-1] == "":
        lines.pop()
    kept: list[str] = []
    size = 0
    for line in lines[:most_lines]:
        if len(line) > PREVIEW_LINE_CHARS:
            line = line[:PREVIEW_LINE_CHARS] + "…"
        size += len(line.encode("utf-8", "surrogatepass")) + 1
        if size > most_bytes:
            break
        kept.append(line)
    if len(kept) < len(lines):
        kept.append(_more(len(lines) - len(kept)))
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


def _dry_run(ctx: Context, tool: Tool, args: dict[str, Any]) -> str | FileDiffs | None:
    """A tool with a dry run (edit_file, apply_patch): its own `diff`, split by file
    when its result lists `files` (`path`, a move's `to`)."""
    result = tool.run(ctx, {**args, "dry_run": True}).result
    diff, files = result.get("diff"), result.get("files")
    if not isinstance(diff, str) or not diff:
        return None
    if not isinstance(files, list):
        return diff
    parts = by_file(diff)
    if parts is None:
        return None  # not a diff this module can split: no preview rather than a misleading one
    found: FileDiffs = []
    for file in files:
        if isinstance(file, dict) and isinstance(file.get("path"), str):
            names = tuple(file[key] for key in ("path", "to") if isinstance(file.get(key), str))
            found.append((names, parts.get(header(f"b/{names[-1]}"))))
    return found


_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def by_file(diff: str) -> dict[str, str] | None:
    """A unified diff of several files split into each file's part, by the name its
    "+++ " header gives (tools/diff.header); None unless every line is placed. A
    hunk's lines are counted by its header, so a removed line "-- x" (written
    "--- x") is never taken for the next file's header."""
    lines = diff.removesuffix("\n").split("\n")
    parts: dict[str, str] = {}
    at = 0
    while at + 1 < len(lines) and lines[at].startswith("--- ") and lines[
            at + 1].startswith("+++ "):
        start, name = at, lines[at + 1][4:]
        at += 2
        while at < len(lines) and (hunk := _HUNK.match(lines[at])):
            old, new = (int(count) if count is not None else 1 for count in hunk.groups())
            at += 1
            while at < len(lines) and (old > 0 or new > 0 or lines[at][:1] == "\\"):
                tag = lines[at][:1]
                if tag not in " -+\\":
                    return None
                old -= tag in " -"
                new -= tag in " +"
                at += 1
        parts[name] = "\n".join(lines[start:at])
    return parts if at == len(lines) else None


_CHANGES: dict[str, Change] = {
    "write_file": _text_change(_written), "append_file": _text_change(_appended),
}
