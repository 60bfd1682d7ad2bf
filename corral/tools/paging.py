"""Pages of a file's lines: which lines of a read fit its budget, counted as JSON
carries them, and where a line cut to the budget is cut."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, NamedTuple

from corral.tools import render
from corral.tools.windows import char_start


def split_lines(data: bytes) -> list[bytes]:
    """Lines split on \\n only, each keeping its end (so \\r\\n files round-trip)."""
    return io.BytesIO(data).readlines()


class Page(NamedTuple):
    start: int  # 1-based line number of the first line returned
    lines: int  # lines returned (a cut line counts as one); not `count`: tuple.count
    next_offset: int | None  # the next whole line, None when the end was reached
    cut_from: int | None = None  # bytes in the one line cut to the budget


# What numbering adds to each line of a read's text as JSON: the number, a tab (cat -n),
# which JSON escapes to two bytes.
LINE_PREFIX = render.NUMBER_WIDTH + 2


def page(
    lines: list[bytes], offset: int, limit: int, budget: int, *, text: bool = True,
    skip: int = 0,
) -> tuple[Page, bytes]:
    """The page, and its bytes, of lines from `offset` (negative: from the end) until
    `limit` lines or the budget. text=True: the budget counts the lines as JSON encodes them
    (render.encoded_size), and their numbered text, which adds LINE_PREFIX bytes a
    line, may take twice it (a file of empty lines must not return 8x its budget);
    text=False (base64): raw bytes. The first line starts `skip` bytes in; if it is
    longer than the budget it is cut to it."""
    total = len(lines)
    start = max(1, total + offset + 1) if offset < 0 else offset
    chosen = lines[start - 1 : start - 1 + limit]
    if skip:
        chosen[0] = chosen[0][skip:]
    measure = render.encoded_size if text else len
    prefix = LINE_PREFIX if text else 0
    cut_from = None
    joined = b"".join(chosen)
    if not _fits(measure(joined), len(chosen), budget, prefix):
        used = numbered = 0  # rare: walk to the last whole line that fits
        for count, line in enumerate(chosen):
            size = measure(line)
            used, numbered = used + size, numbered + size + prefix
            if used > budget or (count and numbered > 2 * budget):
                if count:
                    chosen = chosen[:count]
                else:
                    part = _cut(line, budget, measure, text)
                    chosen = [part]
                    cut_from = len(line) if len(part) < len(line) else None
                break
        joined = b"".join(chosen)
    end = start - 1 + len(chosen)
    return Page(start, len(chosen), end + 1 if end < total else None, cut_from), joined


def whole_file_lines(data: bytes, args: dict[str, Any], budget: int) -> int | None:
    """The file's line count when a text read returns all of it, as page() would
    (from line 1, within the limit and the budget), found without splitting the
    file into lines; None when page() must choose."""
    if args["offset"] != 1 or args.get("byte_offset", 0):
        return None
    total = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    if total > args["limit"]:
        return None
    return total if _fits(render.encoded_size(data), total, budget, LINE_PREFIX) else None


def _fits(size: int, count: int, budget: int, prefix: int) -> bool:
    """Whether `count` whole lines of `size` bytes fit a read's budget: the content
    within it, and its numbered text (`prefix` bytes more a line) within twice it."""
    return size <= budget and size + prefix * count <= 2 * budget


def _cut(line: bytes, budget: int, measure: Callable[[bytes], int], text: bool) -> bytes:
    """The longest start of `line` that measures within the budget (a binary search:
    the measure only grows with length); text ends on a whole UTF-8 character, so the
    rest starts on one. At least one byte (text: one character) even over a tiny
    budget, so paging through the line always moves on."""
    low, high = 0, min(len(line), budget)
    while low < high:
        middle = (low + high + 1) // 2
        if measure(line[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    low = max(low, 1)
    if text:
        low = char_start(line, low) or _char_end(line, 0)
    return line[:low]


def _char_end(line: bytes, at: int) -> int:
    """The end of the UTF-8 character starting at `at`."""
    at += 1
    while at < len(line) and line[at] & 0xC0 == 0x80:
        at += 1
    return at
