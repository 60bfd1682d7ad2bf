"""The model-facing `text` of results. Pure string building, no I/O."""

from __future__ import annotations

import itertools

LINE_CUT = 2000  # chars of one line shown to a model; minified files would flood its context
NUMBER_WIDTH = 6  # cat -n pads line numbers to six columns
_EOL = "\r\n"
PREFIXED_LINES = 2000  # a default read's lines: their number prefixes are made once, here
# Prefixes are made on demand up to this line, once per process: a 1 MiB read (16k lines)
# numbers its lines in ~1.5 ms instead of ~5 ms. Past it (~2 MiB of prefixes) each is formatted.
MAX_PREFIXED_LINES = 32768
_NUMBERED = f"%{NUMBER_WIDTH}d\t%s"  # %-formatting: the fastest way for lines past those
# Each prefix carries the newline that ends the line before it: the numbered text is one
# join of prefixes and lines taken turn about (no string made per line: ~25% faster).
_PREFIX = f"\n%{NUMBER_WIDTH}d\t"
_PREFIXES = [_PREFIX % number for number in range(PREFIXED_LINES + 1)]


def cut_line(line: str, limit: int = LINE_CUT) -> str:
    """The line, or its first `limit` characters and a note of how long it was."""
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... [line cut: {len(line)} chars]"


def numbered(lines: list[str], start: int, *, bare: bool = False) -> str:
    """cat -n style: right-aligned line number, a tab, the line (newline stripped;
    bare: the caller knows no line holds one, so none is looked at)."""
    if not bare:
        lines = [line.rstrip(_EOL) for line in lines]
    if max(map(len, lines), default=0) > LINE_CUT:  # rare: only then is each line looked at
        lines = [cut_line(line) for line in lines]
    end = start + len(lines)
    if start >= 0 and end <= MAX_PREFIXED_LINES + 1:
        if end > len(_PREFIXES):
            _PREFIXES.extend([_PREFIX % number for number in range(len(_PREFIXES), end)])
        parts = [""] * (2 * len(lines))
        parts[0::2] = _PREFIXES[start:end]
        parts[1::2] = lines
        if parts:
            parts[0] = parts[0][1:]  # the first line has no line before it
        return "".join(parts)
    return "\n".join([_NUMBERED % pair for pair in zip(itertools.count(start), lines)])


def read_text(
    path: str, lines: list[str], start: int, total: int, next_offset: int | None,
    *, bare: bool = False,
) -> str:
    """What a model sees for a text read: numbered lines plus a paging hint."""
    if total == 0:
        return f"{path} is empty."
    if not lines:
        return f"{path} has {total} lines; none at line {start}."
    body = numbered(lines, start, bare=bare)
    if next_offset is None:
        return body
    end = start + len(lines) - 1
    return f"{body}\n[showing lines {start}-{end} of {total}; continue with offset={next_offset}]"


def error_line(code: str, message: str) -> str:
    return f"error ({code}): {message}"


def size_text(size: int) -> str:
    return "1 byte" if size == 1 else f"{size} bytes"


def escaped(text: str) -> str:
    """`text` fit to show a person: control and format characters (newlines, escape
    sequences, bidi overrides) and backslashes as Python escapes, so a file name
    cannot rewrite a prompt or a terminal, and no two names look alike."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escaped_char(char) for char in text)


def _escaped_char(char: str) -> str:
    if char == "\\":
        return "\\\\"
    return char if char.isprintable() else repr(char)[1:-1]  # \n, \x1b, \u202e


# How a byte of UTF-8 text grows when a result is encoded as JSON (json's defaults,
# which every face uses): control characters and DEL become \u00XX (six bytes)
# except \b \t \n \f \r, which become two, as do " and \. Every other byte counts
# as itself: non-ASCII as its UTF-8 bytes (on the wire \uXXXX, at most 3x that).
_SHORT_ESCAPES = b'\b\t\n\f\r"\\'
_PLAIN = bytes(b for b in range(256) if 0x20 <= b != 0x7F and b not in _SHORT_ESCAPES)
_SIX = bytes(b for b in (*range(0x20), 0x7F) if b not in _SHORT_ESCAPES)


def text_size(text: str) -> int:
    """encoded_size of a name or line as the tools hold it (str, file names' undecodable
    bytes as surrogate escapes). A printable ASCII text without quotes or backslashes,
    most names, is its own size: str's checks run at C speed, with no encode."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text)
    return encoded_size(text.encode("utf-8", "surrogateescape"))


def encoded_size(data: bytes) -> int:
    """The bytes `data` (UTF-8 text) takes inside a JSON string: what a budget counts,
    so a file of control characters cannot return six times the budget."""
    special = data.translate(None, _PLAIN)  # C speed: only the bytes that escape remain
    if not special:
        return len(data)
    short = len(special.translate(None, _SIX))
    return len(data) + short + 5 * (len(special) - short)
