"""edit_file: exact string replacement, all edits or none, with a unified diff."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from corral.errors import CorralError
from corral.fs import Expect, Root, content_version
from corral.tools import matching
from corral.tools.access import PathCheck, content, open_target, require_read
from corral.tools.base import (
    BOOLEAN,
    INTEGER,
    STRING,
    Context,
    Outcome,
    Tool,
    match_prop,
    mcp_hints,
    obj,
    path_prop,
    shape,
)
from corral.tools.diff import capped, unified_diff
from corral.tools.encodings import decode

DIFF_TEXT_LINES = 400  # diff lines shown to a model; the full diff stays in result.diff


class Edit(NamedTuple):
    old: str
    new: str
    replace_all: bool


def edits_of(args: dict[str, Any]) -> list[Edit]:
    """The edits asked for: either one (old_string/new_string) or a list, never both."""
    single = "old_string" in args or "new_string" in args
    if args.get("edits") is not None:
        if single or args.get("replace_all"):
            raise CorralError(
                "invalid_arguments",
                "give either old_string/new_string/replace_all or edits, not both.",
            )
        edits = [
            Edit(e["old_string"], e["new_string"], e.get("replace_all", False))
            for e in args["edits"]
        ]
    elif "old_string" not in args or "new_string" not in args:
        raise CorralError(
            "invalid_arguments",
            "missing required argument 'old_string' and 'new_string' (or 'edits').",
        )
    else:
        edits = [Edit(args["old_string"], args["new_string"], bool(args.get("replace_all")))]
    for index, edit in enumerate(edits):
        if edit.old == edit.new:
            where = f"edits[{index}]" if len(edits) > 1 or not single else "old_string"
            raise CorralError(
                "invalid_arguments", f"argument '{where}': old_string and new_string are identical."
            )
    return edits


_LOOSENED = matching.LOOSENED
SHOWN_PLACES = 5  # line numbers an ambiguous_match message lists


@dataclass
class Applied:
    """What apply() did: the new text, the replacements made, the loosest match level
    any edit needed, and how many characters at the start and at the end no edit
    touched (the diff need not look at them)."""

    text: str
    replacements: int
    match: str
    unchanged: tuple[int, int]


def apply(
    path: str, text: str, edits: list[Edit], max_new_bytes: int | None = None,
    *, tolerant: bool = True,
) -> Applied:
    """The text after every edit in order. Each old_string is found exactly, else
    (tolerant) on matching's ladder. max_new_bytes bounds the bytes the replacements
    put in (count x new_string), checked before each one is made: replace_all
    multiplies a small new_string."""
    total = 0
    new_bytes = 0
    level = 0
    head = tail = len(text)
    for index, edit in enumerate(edits):
        which = f"edit {index + 1} of {len(edits)}: " if len(edits) > 1 else ""
        spans, found, count = _locate(path, text, edit, which, tolerant)
        level = max(level, matching.LEVELS.index(found))
        if spans is None:  # exact: str.find and str.replace, the fast path
            first = text.find(edit.old)
            new = edit.new
            if "\n" in new:  # a CRLF file stays CRLF
                new = matching.fit_endings(new, matching.line_ending(text, first))
            new_bytes += count * len(new.encode("utf-8", "surrogatepass"))
        else:
            new_bytes += sum(len(span.new.encode("utf-8", "surrogatepass")) for span in spans)
        if max_new_bytes is not None and new_bytes > max_new_bytes:
            raise CorralError(
                "too_large",
                f"the edit of {path} would write {new_bytes} new bytes, over the write limit "
                f"of {max_new_bytes} bytes.",
            )
        if spans is None:
            last = first if count == 1 else text.rfind(edit.old)  # at or past the last replaced
            head, tail = min(head, first), min(tail, len(text) - last - len(edit.old))
            text = text.replace(edit.old, new)
        else:
            head, tail = min(head, spans[0].start), min(tail, len(text) - spans[-1].end)
            text = _replace(text, spans)
        total += count
    return Applied(text, total, matching.LEVELS[level], (head, tail))


def _locate(
    path: str, text: str, edit: Edit, which: str, tolerant: bool
) -> tuple[list[matching.Span] | None, str, int]:
    """(None, "exact", count) when old_string is in the text as given; else the
    places the ladder found it at its first level that did, that level and their
    count. Raises no_match (naming the closest region) or ambiguous_match (never
    settled by a looser level)."""
    count = text.count(edit.old)
    if count > 1 and not edit.replace_all:
        raise CorralError(
            "ambiguous_match",
            f"{which}old_string occurs {count} times in {path}; add surrounding context "
            "to make it unique, or set replace_all.",
        )
    if count:
        return None, "exact", count
    found = matching.tolerant(text, edit.old, edit.new)
    if found is not None and tolerant:
        level, spans = found
        if len(spans) > matching.MAX_WINDOWS:
            raise CorralError(
                "ambiguous_match",
                f"{which}old_string is not in {path} as written; ignoring {_LOOSENED[level]} "
                f"it matches more than {matching.MAX_WINDOWS} places; give the exact text.",
            )
        if len(spans) > 1 and not edit.replace_all:
            places = ", ".join(str(text.count("\n", 0, span.start) + 1)
                               for span in spans[:SHOWN_PLACES])
            raise CorralError(
                "ambiguous_match",
                f"{which}old_string is not in {path} as written; ignoring "
                f"{_LOOSENED[level]} it matches {len(spans)} places (from lines {places}); "
                "add surrounding context to make it unique, or set replace_all.",
            )
        kept = _apart(spans)
        return kept, level, len(kept)
    message = f"{which}old_string was not found in {path}."
    if found is not None:  # match: "exact" was asked for
        line = text.count("\n", 0, found[1][0].start) + 1
        message += (f" It matches at line {line} ignoring {_LOOSENED[found[0]]}, which "
                    "match='exact' does not allow.")
    else:
        message += matching.lesson(text, edit.old)
    raise CorralError("no_match", message)


def _apart(spans: list[matching.Span]) -> list[matching.Span]:
    """The spans that do not overlap an earlier one (replace_all of overlapping
    windows replaces the first of them, as str.replace does)."""
    kept: list[matching.Span] = []
    for span in spans:
        if not kept or span.start >= kept[-1].end:
            kept.append(span)
    return kept


def _replace(text: str, spans: list[matching.Span]) -> str:
    parts, at = [], 0
    for span in spans:
        parts += [text[at : span.start], span.new]
        at = span.end
    parts.append(text[at:])
    return "".join(parts)


# Reads an edit makes at most when another writer changes the file between its read
# and its write: each try applies the edits to the file as it is then, as a call sent
# again would (an expected_version or read_before_write still has to hold).
EDIT_TRIES = 16


def edit_file(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    edits = edits_of(args)
    root, rel, check = open_target(ctx, path, write=True)
    for tries in range(1, EDIT_TRIES + 1):
        edited = _edited(ctx, args, edits, root, rel, check, raced=tries > 1)
        if args["dry_run"]:
            version = content_version(edited.data)
            break
        # The bytes read guard the write: a change made in between is a conflict.
        try:
            version = root.write_atomic(
                rel, edited.new_data, expect=Expect(content=edited.data), make_parents=False,
                max_file_bytes=ctx.limits.max_file_bytes, guard=check, keep=ctx.keep,
            ).version
            break
        except CorralError as exc:
            if exc.code != "conflict":
                raise
    else:
        # the fs layer's message names expected_version, which this call may not have had
        raise CorralError(
            "conflict", f"{path} changed while it was being edited, {EDIT_TRIES} times in a "
            "row; read it again and retry the edit.")
    applied, new_data = edited.applied, edited.new_data
    replacements = applied.replacements
    diff, cut = capped(unified_diff(path, edited.before, applied.text, applied.unchanged))
    result = {
        "path": path,
        "replacements": replacements,
        "match": applied.match,
        "version": version,
        "diff": diff,
        "diff_truncated": cut,
        "dry_run": args["dry_run"],
    }
    text = _text(path, replacements, applied.match, diff, args["dry_run"])
    return Outcome(result, text, len(new_data))


class _Edited(NamedTuple):
    data: bytes  # the file as read
    before: str  # its text
    applied: Applied
    new_data: bytes


def _edited(ctx: Context, args: dict[str, Any], edits: list[Edit], root: Root, rel: str,
            check: PathCheck, *, raced: bool) -> _Edited:
    """The file read and the edits applied to it, not yet written. `raced`: another
    writer changed it since the last read; an edit that no longer applies says so."""
    path = args["path"]
    data = content(ctx, root, rel, check)
    # hashed only when a version is asked for (~140 us for 100 KiB): the write compares bytes
    if args["expected_version"] is not None and args["expected_version"] != content_version(data):
        raise CorralError("conflict", f"{path} changed since version {args['expected_version']}.")
    require_read(ctx, root, path, data)
    decoded = decode(data, ctx.policy.fallback_encodings)
    if decoded is None:
        raise CorralError("binary_file", f"{path} is a binary file; edit_file edits text only.")
    tolerant = args["match"] != "exact" and ctx.policy.edit_match != "exact"
    try:
        applied = apply(path, decoded.text, edits, ctx.limits.max_write_bytes, tolerant=tolerant)
    except CorralError as error:
        if not raced:
            raise
        raise CorralError(error.code, f"{path} changed while it was being edited, and the "
                          f"edit no longer applies to it: {error.message}") from None
    new_data = decoded.encode(applied.text, "new_string")
    if len(new_data) > ctx.limits.max_file_bytes:
        raise CorralError(
            "too_large",
            f"{path} would be {len(new_data)} bytes after the edit, over the file limit of "
            f"{ctx.limits.max_file_bytes} bytes.",
        )
    return _Edited(data, decoded.text, applied, new_data)


def _text(path: str, replacements: int, match: str, diff: str, dry_run: bool) -> str:
    plural = "replacement" if replacements == 1 else "replacements"
    head = f"{'Would edit' if dry_run else 'Edited'} {path}: {replacements} {plural}."
    if match != "exact":
        head += f" (old_string matched ignoring {_LOOSENED[match]}.)"
    lines = diff.splitlines()
    if len(lines) > DIFF_TEXT_LINES:
        lines = [*lines[:DIFF_TEXT_LINES], f"[diff cut: {len(lines)} lines in result.diff]"]
    return "\n".join([head, *lines])


_REPLACE_ALL = {"type": "boolean", "default": False,
                "description": "Replace every occurrence instead of requiring exactly one."}

EDIT_TOOLS = [
    Tool(
        name="edit_file",
        title="Edit file",
        description=(
            "Change part of a text file by exact string replacement. old_string must occur "
            "exactly once (include a few surrounding lines to make it unique) unless "
            "replace_all is true; copy it from the file as it is. If it is not found as "
            "written, one unique match that differs only in trailing whitespace, line "
            "endings, indentation or look-alike quotes and dashes is used (result.match says "
            "which) and new_string is re-indented to fit; a miss names the closest lines. "
            "old_string must not include the line-number prefix that read_file shows. "
            "For several changes pass edits=[{old_string, new_string}, ...]: they apply in "
            "order and either all succeed or the file is left untouched. dry_run=true "
            "returns the diff without writing."
        ),
        input_schema=obj(
            {
                "path": path_prop("File to edit"),
                "old_string": {"type": "string", "minLength": 1,
                               "description": "Exact text to replace."},
                "new_string": {"type": "string", "description": "Text to put in its place."},
                "replace_all": _REPLACE_ALL,
                "edits": {
                    "type": "array", "minItems": 1,
                    "items": obj(
                        {
                            "old_string": {"type": "string", "minLength": 1},
                            "new_string": {"type": "string"},
                            "replace_all": _REPLACE_ALL,
                        },
                        ("old_string", "new_string"),
                    ),
                    "description": "Several edits applied in order, all or none.",
                },
                "expected_version": {
                    "type": "string", "default": None,
                    "description": "Version the file must still have (from a read or stat).",
                },
                "dry_run": {"type": "boolean", "default": False,
                            "description": "Return the diff without writing."},
                "match": match_prop("old_string must match"),
            },
            ("path",),
        ),
        output_schema=shape({"path": STRING, "replacements": INTEGER,
                             "match": {"type": "string", "enum": list(matching.LEVELS)},
                             "version": STRING,
                             "diff": STRING, "diff_truncated": BOOLEAN, "dry_run": BOOLEAN}),
        annotations=mcp_hints(read_only=False, destructive=True, idempotent=False),
        writes=True,
        run=edit_file,
    ),
]
