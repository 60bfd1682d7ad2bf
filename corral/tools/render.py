"""The model-facing `text` of results. Pure string building, no I/O."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

LINE_CUT = 2000  # chars of one line shown to a model; minified files would flood its context
NUMBER_WIDTH = 6  # cat -n pads line numbers to six columns
_EOL = "\r\n"
_NUMBERED = f"%{NUMBER_WIDTH}d\t%s"  # %-formatting: the fastest of the ways measured


def cut_line(line: str, limit: int = LINE_CUT) -> str:
    """The line, or its first `limit` characters and a note of how long it was."""
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... [line cut: {len(line)} chars]"


def numbered(lines: Iterable[str], start: int) -> str:
    """cat -n style: right-aligned line number, a tab, the line (newline stripped)."""
    shown = [line.rstrip(_EOL) for line in lines]
    if max(map(len, shown), default=0) > LINE_CUT:  # rare: only then is each line looked at
        shown = [cut_line(line) for line in shown]
    return "\n".join([_NUMBERED % pair for pair in zip(itertools.count(start), shown)])


def read_text(
    path: str, lines: list[str], start: int, total: int, next_offset: int | None
) -> str:
    """What a model sees for a text read: numbered lines plus a paging hint."""
    if total == 0:
        return f"{path} is empty."
    if not lines:
        return f"{path} has {total} lines; none at line {start}."
    body = numbered(lines, start)
    if next_offset is None:
        return body
    end = start + len(lines) - 1
    return f"{body}\n[showing lines {start}-{end} of {total}; continue with offset={next_offset}]"


def error_line(code: str, message: str) -> str:
    return f"error ({code}): {message}"


def size_text(size: int) -> str:
    return "1 byte" if size == 1 else f"{size} bytes"
