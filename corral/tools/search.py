"""search_files (glob over names) and grep (regex over contents)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from corral.errors import CorralError
from corral.fs import Root
from corral.globs import glob_to_regex
from corral.policy import PolicyError, RootSpec
from corral.tools import render
from corral.tools.access import approval_key, joined, open_target, opened
from corral.tools.base import (
    BOOLEAN,
    INTEGER,
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
from corral.tools.encodings import BINARY_SNIFF, not_utf8
from corral.tools.line_search import LineMatcher
from corral.tools.listing import (
    IGNORED,
    INCLUDE_IGNORED,
    Resolved,
    ignored_note,
    ignoring,
    listing_budget,
    shown,
    walked,
)
from corral.tools.read import HARD_READ_CEILING, is_binary, read_budget
from corral.tools.windows import blocks

DEFAULT_MAX_FILES = 500
DEFAULT_MAX_MATCHES = 200
# Ceiling on grep's max_results: 5000 cut lines are more than a model reads, while a
# million one-letter lines made the worker run out of memory building the result.
MAX_MATCHES = 5_000
GREP_LINE_CUT = 500  # chars of a matching line: 200 matches must still fit a model's context


# What re.compile raises for a pattern it cannot build: a bad class range ([z-a]),
# a repeat count past its limit (a{4294967296}: OverflowError), nesting too deep
# for its recursive parser (thousands of groups: RecursionError).
_BAD_PATTERN = (re.error, OverflowError, RecursionError)


def compile_glob(glob: str, field: str) -> re.Pattern[str]:
    try:
        return re.compile(glob_to_regex(glob), re.DOTALL)
    except PolicyError as error:
        raise CorralError("invalid_arguments", f"argument '{field}': {error}.") from None
    except _BAD_PATTERN as error:
        raise CorralError(
            "invalid_arguments", f"argument '{field}' is not a valid glob: {_why(error)}."
        ) from None


def compile_regex(source: str, field: str, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(source, flags)
    except _BAD_PATTERN as error:
        raise CorralError(
            "invalid_arguments",
            f"argument '{field}' is not a valid regular expression: {_why(error)}.",
        ) from None


def _why(error: BaseException) -> str:
    if isinstance(error, RecursionError):
        return "it is nested too deeply"
    if isinstance(error, OverflowError):
        return "a repeat count is too large"
    return str(error)


def shown_path(ctx: Context, root: Root, resolved: str) -> str:
    """A found path as the contract names it, relative to the workspace root (however
    the search directory was spelled), and one the caller can pass straight back to
    another tool: so a file in another allowed root is named absolutely."""
    if root is ctx.roots.workspace:
        return resolved
    return root.given_path if resolved == "." else f"{root.given_path}/{resolved}"


def search_files(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    pattern = compile_glob(args["pattern"], "pattern")
    root, rel, check = open_target(ctx, path, write=False)
    seen = Resolved(check)
    limit = min(args["max_results"], ctx.limits.max_list_entries)  # a listing by another name
    matches: list[str] = []
    truncated = False
    budget = listing_budget(ctx)  # the paths as JSON carries them, as a listing counts
    ignores = ignoring(ctx, root, args)
    tree = walked(root, rel, seen, ignores)
    for entry in shown(ctx, root, seen, tree, include_hidden=True, ignores=ignores):
        if pattern.fullmatch(entry.path):
            match = shown_path(ctx, root, joined(seen.path, entry.path))
            budget -= 3 + render.text_size(match)
            if len(matches) == limit or budget < 0:
                truncated = True
                break
            matches.append(match)
    skipped = 0 if ignores is None else ignores.skipped
    result = {"pattern": args["pattern"], "path": path, "matches": matches,
              "truncated": truncated, "ignored": skipped}
    if not matches:
        text = f"No paths under {path} match {args['pattern']}."
        return Outcome(result, text + ignored_note(skipped, " "))
    note = [f"[cut at {len(matches)} matches; narrow the pattern]"] if truncated else []
    return Outcome(result, "\n".join([*matches, *note]) + ignored_note(skipped, "\n"))


def _searchable(ctx: Context, root: Root, resolved: str, approved_dir: bool) -> None:
    """Guard for each file grep opens, decided on what was really opened (a
    swapped-in symlink is decided as its target): files the policy allows, and
    supervised ones when the host approved the directory being searched."""
    decision = ctx.policy.decide(ctx.tool, RootSpec(root.path, root.mode), resolved, write=False)
    if decision.action == "allow" or (decision.action == "supervised" and approved_dir):
        return
    raise CorralError("path_denied", f"{resolved} is not searchable.")


def grep(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    regex = compile_regex(args["pattern"], "pattern", re.IGNORECASE if args["ignore_case"] else 0)
    wanted = _name_filter(args["glob"])
    root, rel, check = open_target(ctx, path, write=False)
    seen = Resolved(check)
    info = root.info(rel, follow=True, guard=seen)
    if info is None:
        raise CorralError("not_found", f"{path} does not exist.")
    found = Found(
        regex, min(args["max_results"], MAX_MATCHES), read_budget(ctx, HARD_READ_CEILING),
        time.monotonic() + GREP_TIME_SHARE * ctx.limits.timeout_s,
    )
    ignores = None
    if info.type != "dir":
        # A file named explicitly: its errors are the caller's to see.
        with opened(ctx, root, rel, check) as (fd, st):
            lines = _text_blocks(ctx, root, rel, fd, st.st_size)
            if lines is None:
                raise CorralError("binary_file", f"{path} is a binary file; grep searches text.")
            found.search(shown_path(ctx, root, seen.path), lines)
    else:
        approved_dir = approval_key(root.path, seen.path) in ctx.approved
        ignores = ignoring(ctx, root, args)
        tree = walked(root, rel, seen, ignores)
        for entry in shown(ctx, root, seen, tree, include_hidden=True, ignores=ignores):
            if entry.type != "file" or not wanted(entry.path):
                continue
            if _search_quietly(ctx, root, joined(seen.path, entry.path), approved_dir, found):
                break
    skipped = 0 if ignores is None else ignores.skipped
    result: dict[str, Any] = {
        "pattern": args["pattern"], "path": path, "matches": found.matches,
        "files_searched": found.files, "truncated": found.truncated, "ignored": skipped,
    }
    if found.timed_out:
        result["timed_out"] = True
    note = ignored_note(skipped, " " if not found.matches else "\n")
    return Outcome(result, _grep_text(result) + note)


def _text_blocks(
    ctx: Context, root: Root, rel: str, fd: int, size: int
) -> Iterable[tuple[bytes, int]] | None:
    """The open file's lines for grep: a file within max_file_bytes read whole, a
    larger one in blocks (windows.blocks, in bounded memory); None when it is not
    text (a file within the limit must be UTF-8 throughout; a larger one is judged
    by its start, and those of its lines that are not UTF-8 are passed by)."""
    if size > ctx.limits.max_file_bytes:
        head = os.pread(fd, BINARY_SNIFF, 0)
        return None if not_utf8(head) is not None else blocks(fd, size)
    data = root.read_whole(fd, rel, ctx.limits.max_file_bytes)
    return None if is_binary(data) else ((data, len(data)),)


# grep stops, with what it found, once it has run this share of the call's
# timeout_s: its answer still comes back, where the host would kill the worker.
GREP_TIME_SHARE = 0.8


class Found:
    """Matching lines collected across files, up to a cap and a deadline."""

    def __init__(self, regex: re.Pattern[str], cap: int, budget: int, deadline: float) -> None:
        self.matcher = LineMatcher(regex)
        self.cap = cap
        # bytes of matches as JSON carries them (path and line, escapes counted):
        # grep returns contents, as a read does
        self.budget = budget
        self.deadline = deadline  # time.monotonic()
        self.matches: list[dict[str, Any]] = []
        self.files = 0
        self.truncated = False
        self.timed_out = False

    def search(self, shown_as: str, blocks: Iterable[tuple[bytes, int]]) -> bool:
        """Search one text file, given as blocks of whole lines (windows.blocks);
        True once the cap or the deadline is passed (stop searching)."""
        self.files += 1
        number = 1  # of the block's first line
        for block, end in blocks:
            for index, text in self.matcher.lines(block, end):
                shown = render.cut_line(text, GREP_LINE_CUT)
                match = f"{shown_as}:{number + index}:{shown}"  # as the text shows it
                size = render.text_size(match)
                if len(self.matches) == self.cap or size > self.budget:
                    self.truncated = True
                    return True
                self.budget -= size
                self.matches.append({"path": shown_as, "line": number + index, "text": shown})
            number += block.count(b"\n", 0, end)
            if time.monotonic() > self.deadline:
                self.truncated = self.timed_out = True
                return True
        return False


def _search_quietly(
    ctx: Context, root: Root, resolved: str, approved_dir: bool, found: Found
) -> bool:
    """Search a walked file, or pass it by: unreadable, binary, denied or supervised
    by policy, or gone meanwhile. True once grep should stop (found.search)."""
    try:
        with opened(
            ctx, root, resolved, lambda found_at: _searchable(ctx, root, found_at, approved_dir)
        ) as (fd, st):
            lines = _text_blocks(ctx, root, resolved, fd, st.st_size)
            return lines is not None and found.search(shown_path(ctx, root, resolved), lines)
    except CorralError:
        return False


def _name_filter(glob: str | None) -> Callable[[str], bool]:
    """A glob without "/" matches the file name at any depth (as ripgrep's --glob);
    one with "/" matches the path relative to the searched directory."""
    if glob is None:
        return lambda rel: True
    regex = compile_glob(glob, "glob")
    if "/" in glob:
        return lambda rel: regex.fullmatch(rel) is not None
    return lambda rel: regex.fullmatch(rel.rsplit("/", 1)[-1]) is not None


def _grep_text(result: dict[str, Any]) -> str:
    matches = result["matches"]
    if not matches:
        text = f"No matches for {result['pattern']} in {result['files_searched']} files."
        if result.get("timed_out"):
            text += " The search ran out of its time before the end; narrow the path or glob."
        return text
    lines = [f"{m['path']}:{m['line']}:{m['text']}" for m in matches]
    if result.get("timed_out"):
        lines.append(f"[stopped at {len(matches)} matches: the search ran out of its time; "
                     "narrow the path or glob]")
    elif result["truncated"]:
        lines.append(f"[cut at {len(matches)} matches; narrow the pattern, path or glob]")
    return "\n".join(lines)


SEARCH_TOOLS = [
    Tool(
        name="search_files",
        title="Find files by name",
        description=(
            "Find files and directories whose path matches a glob, searching the tree "
            "beneath path. The glob is matched against the whole path relative to path: "
            "'*' stays within one directory level, '**' spans any number of them, so use "
            "'**/*.py' for Python files at any depth and '*.py' for the top level only. "
            "Returned paths are relative to the workspace (absolute in other allowed "
            "directories) and can be passed straight to the other tools. What .gitignore "
            "files exclude is left out."
        ),
        input_schema=obj(
            {
                "pattern": {"type": "string", "minLength": 1,
                            "description": "Glob such as '**/*.py' or 'src/*/test_*.py'."},
                "path": {**path_prop("Directory to search"), "default": "."},
                "max_results": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_FILES,
                                "description": "Most paths to return."},
                "include_ignored": INCLUDE_IGNORED,
            },
            ("pattern",),
        ),
        output_schema=shape({"pattern": STRING, "path": STRING, "matches": list_of(STRING),
                             "truncated": BOOLEAN, "ignored": IGNORED}),
        annotations=mcp_hints(read_only=True, destructive=False, idempotent=True),
        writes=False,
        run=search_files,
    ),
    Tool(
        name="grep",
        title="Search file contents",
        description=(
            "Search file contents for a Python regular expression, line by line, in one "
            "file or every file beneath a directory. Returns path, line number and the "
            "matching line. glob narrows the files searched ('*.py' matches by file name "
            "at any depth, 'src/**/*.ts' by path). Binary files and what .gitignore files "
            "exclude are skipped. Escape regex "
            "metacharacters such as ( [ . * when you mean them literally."
        ),
        input_schema=obj(
            {
                "pattern": {"type": "string", "minLength": 1,
                            "description": "Python regular expression (re.search per line)."},
                "path": {**path_prop("File or directory to search"), "default": "."},
                "glob": {"type": "string", "default": None,
                         "description": "Only search files matching this glob."},
                "ignore_case": {"type": "boolean", "default": False,
                                "description": "Match regardless of case."},
                "max_results": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_MATCHES,
                                "description": f"Most matching lines to return "
                                               f"(at most {MAX_MATCHES})."},
                "include_ignored": INCLUDE_IGNORED,
            },
            ("pattern",),
        ),
        output_schema=shape({
            "pattern": STRING, "path": STRING,
            "matches": list_of(shape({"path": STRING, "line": INTEGER, "text": STRING})),
            "files_searched": INTEGER, "truncated": BOOLEAN, "ignored": IGNORED,
            "timed_out": BOOLEAN,
        }, optional=("timed_out",)),
        annotations=mcp_hints(read_only=True, destructive=False, idempotent=True),
        writes=False,
        run=grep,
    ),
]
