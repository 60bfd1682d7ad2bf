"""read_file of a file over max_file_bytes: one window of it, found and read in
bounded memory, never the whole file. A window starts at line `offset` (found by a
streaming count of the newlines before it), at the `-offset`-th line from the end
(a scan back from the end), or with `offset=1` at byte `byte_offset`; it holds
what fits the read's budget, as UTF-8 text or base64. Line numbers are known only
from the start (negative: from the end) and a byte window has none; no version is
computed (it would hash the whole file, and such a file is not edited whole)."""

from __future__ import annotations

import base64
import os
from typing import Any

from corral.errors import CorralError
from corral.tools import render
from corral.tools.base import Outcome
from corral.tools.encodings import BINARY_SNIFF, not_utf8
from corral.tools.paging import page, split_lines
from corral.tools.windows import char_start, line_start, marks_of, newline_within, tail_start


def read_window(
    path: str, fd: int, st: os.stat_result, args: dict[str, Any], budget: int
) -> Outcome:
    """The window of the open file `fd` (its fstat `st`) that `args` ask for."""
    size = st.st_size
    text = args["encoding"] == "utf-8"
    if text:
        _check_text(path, fd, size)
    else:
        budget = budget // 4 * 3  # the base64 text is what must fit the budget
    offset, skip = args["offset"], args.get("byte_offset", 0)
    total: int | None = None
    if offset == 1 and skip:  # a byte window: no line is counted
        if skip >= size:
            raise CorralError(
                "invalid_arguments",
                f"argument 'byte_offset' ({skip}) must be less than the file's {size} bytes.",
            )
        pos, start_line = _char_at(fd, skip) if text else skip, None
    else:
        if offset > 0:
            found, counted = line_start(fd, size, offset, marks_of(st))
            if found is None:
                return _past_end(path, size, offset, counted, args["encoding"])
            line, start_line = found, offset
        else:
            line, total = tail_start(fd, size, -offset)
            start_line = offset if total is None else 1
        pos = line + _checked_skip(fd, size, line, skip, start_line, text)
    data = os.pread(fd, min(budget + 1, size - pos), pos)
    at_end = pos + len(data) >= size
    lines = split_lines(data)
    if not at_end and len(lines) > 1 and not lines[-1].endswith(b"\n"):
        lines.pop()  # a line the window ends inside: the next window starts with it
    chosen, raw = page(lines, 1, args["limit"], budget, text=text)
    content = _text(path, raw, pos) if text else base64.b64encode(raw).decode("ascii")
    after = pos + len(raw)
    more = chosen.next_offset is not None or not at_end
    cut = chosen.cut_from is not None
    next_offset = next_byte = None
    if start_line is None:
        next_byte = after if after < size else None
    else:
        following = start_line + (1 if cut else chosen.lines)
        next_offset = following if (more or cut) and following != 0 and after < size else None
        next_byte = skip + len(raw) if cut else None
        if start_line > 0 and not more and not cut:
            total = start_line + chosen.lines - 1
    result: dict[str, Any] = {
        "path": path, "content": content, "encoding": args["encoding"],
        "total_lines": total, "start_line": start_line, "lines_read": chosen.lines,
        "truncated": next_offset is not None or next_byte is not None,
        "next_offset": next_offset, "size": size, "start_byte": pos,
    }
    if next_byte is not None:
        result["next_byte_offset"] = next_byte
    shown = _shown(path, content, text, start_line, chosen.lines, pos, after, size)
    return Outcome(result, shown + _hint(result, start_line, skip, cut, after), len(raw))


def _check_text(path: str, fd: int, size: int) -> None:
    """binary_file unless the file's start reads as UTF-8 text would. A UTF-16 or
    UTF-32 file is served only as base64 once over max_file_bytes: its line and byte
    offsets count its UTF-8 form, which would take a decode of all before the window."""
    why = not_utf8(os.pread(fd, min(BINARY_SNIFF, size), 0))
    if why == "binary":
        raise CorralError(
            "binary_file", f"{path} is a binary file; read it with encoding='base64'."
        )
    if why is not None:
        raise CorralError(
            "binary_file", f"{path} is {why} text over max_file_bytes: windows of it come "
            "back only as bytes; read it with encoding='base64'.",
        )


def _char_at(fd: int, at: int) -> int:
    """Byte `at`, moved back to the start of the UTF-8 character it falls in."""
    low = max(0, at - 3)
    return low + char_start(os.pread(fd, at - low + 1, low), at - low)


def _checked_skip(fd: int, size: int, line: int, skip: int, number: int, text: bool) -> int:
    """byte_offset as read_file checks it for any file: inside line `number` (which
    starts at byte `line`) and, in text, on a character start."""
    if not skip:
        return 0
    if line + skip >= size or newline_within(fd, line, line + skip):
        raise CorralError(
            "invalid_arguments",
            f"argument 'byte_offset' ({skip}) must be less than the bytes of line {number}.",
        )
    if text and _char_at(fd, line + skip) != line + skip:
        raise CorralError(
            "invalid_arguments",
            f"argument 'byte_offset' ({skip}) falls inside a character of line {number}; "
            "pass the next_byte_offset a read returned.",
        )
    return skip


def _text(path: str, raw: bytes, pos: int) -> str:
    """The window's text, every byte of it: a window that is not UTF-8 is refused,
    never shown with replacement characters."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorralError(
            "binary_file", f"{path} is not UTF-8 text at byte {pos + error.start}; read it "
            "with encoding='base64'.",
        ) from None


def _past_end(path: str, size: int, offset: int, total: int, encoding: str) -> Outcome:
    result = {
        "path": path, "content": "", "encoding": encoding, "total_lines": total,
        "start_line": offset, "lines_read": 0, "truncated": False, "next_offset": None,
        "size": size, "start_byte": size,
    }
    return Outcome(result, render.read_text(path, [], offset, total, None), 0)


def _shown(path: str, content: str, text: bool, start_line: int | None, count: int,
           pos: int, after: int, size: int) -> str:
    if not text:
        return (f"{path}: bytes {pos}-{after} of {size} as base64 in result.content")
    if start_line is None:  # a byte window: its lines have no numbers
        return content.removesuffix("\n")
    shown = content.split("\n")
    if len(shown) > count:  # the content ended with a newline
        shown.pop()
    return render.numbered(shown, start_line, bare="\r" not in content)


def _hint(result: dict[str, Any], start_line: int | None, skip: int, cut: bool,
          after: int) -> str:
    """The paging note under a window: where it lies, and how to go on."""
    size, start = result["size"], result["start_byte"]
    where = f"bytes {start}-{after} of {size}, a file over max_file_bytes"
    if start_line is None:
        go_on = f"; continue with byte_offset={after}" if "next_byte_offset" in result else ""
        return f"\n[{where}: a byte window, its lines not numbered{go_on}]"
    counted = "" if start_line > 0 else ", lines numbered from its end (-1: the last)"
    notes = [f"\n[{where}{counted}"]
    if skip:
        notes.append(f"; line {start_line} shown from byte {skip}")
    if cut:
        notes.append(f"; line {start_line} was cut at byte {result['next_byte_offset']}, "
                     f"read its rest with offset={start_line}, "
                     f"byte_offset={result['next_byte_offset']}")
    if result["next_offset"] is not None:
        notes.append(f"; continue with offset={result['next_offset']}")
    return "".join(notes) + "]"
