"""Where an edit's old text lies in a file: exactly, or on a ladder of tolerances
for the drift models make when they copy text (trailing whitespace and line
endings, indentation, Unicode look-alikes), and, when it lies nowhere, the
closest region as a lesson the model can act on.

Pure functions over str; edit_file (and any later tool that locates hunks) uses
them. The exact search is str.find/count, done by the caller: nothing here runs
unless that found nothing, so an exact edit pays nothing for the ladder.

Each tolerant level compares whole lines: a window of file lines whose
normalised form equals the old text's lines. A level that finds more than one
window is ambiguous, and the ladder stops there: a looser level is never asked
to guess between them. At the indentation levels every non-blank line of the
window must be shifted by the same number of columns (so a block cannot match a
differently nested one), and the replacement is re-indented by that shift.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

LEVELS = ("exact", "whitespace", "indentation", "unicode")  # loosest last
LOOSENED = {  # what each tolerant level ignored, as messages say it
    "whitespace": "trailing whitespace and line endings",
    "indentation": "indentation",
    "unicode": "indentation and look-alike characters (quotes, dashes, spaces)",
}
TAB_WIDTHS = (4, 8, 2)  # tried in turn to relate tab and space indentation
# Windows one level collects at most (more is "ambiguous", even for replace_all:
# each costs a pass over old_string), so a file of equal lines cannot stall a call.
MAX_WINDOWS = 100
ANCHOR_LINES = 8  # old_string's lines counted in the file to pick the rarest as anchor
LESSON_LINE_CHARS = 120  # each of expected/found in a no_match message is cut to this
# A line shared by more old lines than this (blank lines, lone braces) casts no vote
# for the closest region: it says nothing about where the text was meant to be.
COMMON_LINE_VOTES = 8
LESSON_SCAN_LINES = 5_000  # file lines compared by similarity when no line matches at all
# ...each by its start only: SequenceMatcher is quadratic in a line's length
LESSON_COMPARE_CHARS = 200

# Characters models and editors swap for ASCII ones, mapped one to one so offsets
# stay put: quotes, dashes and minus signs, spaces that are not U+0020.
_LOOKALIKES = str.maketrans({
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    **dict.fromkeys("\u00a0\u2002\u2003\u2007\u2008\u2009\u200a\u202f\u3000", " "),
})
_BARE_LF = re.compile(r"(?<!\r)\n")
_INDENT = re.compile(r"[ \t]*")


# Lines stays a dataclass, not a NamedTuple: its len() is its line count, which a
# tuple's must not contradict (_make and _replace check it).
class Span(NamedTuple):
    """One place the old text was found: text[start:end] becomes `new`."""

    start: int
    end: int
    new: str


@dataclass(frozen=True)
class Lines:
    """A text split on "\n": each line's content (without "\r\n" or "\n"), its
    start, the end of its content and its end (after the line ending)."""

    text: str
    contents: list[str]
    starts: list[int]

    @classmethod
    def of(cls, text: str) -> Lines:
        bom = 1 if text.startswith("\ufeff") else 0  # a UTF-8 BOM is no part of line 1
        pieces = text[bom:].split("\n")  # in C: 100 KiB in well under a millisecond
        rest = pieces.pop()  # after the last "\n": a last line without an ending, or ""
        contents = [piece[:-1] if piece.endswith("\r") else piece for piece in pieces] if (
            "\r" in text) else pieces[:]
        if rest or not contents:
            contents.append(rest)  # it has no ending, so a "\r" at its end is content
        starts = list(itertools.accumulate((len(piece) + 1 for piece in pieces), initial=bom))
        return cls(text, contents, starts[: len(contents)])

    def content(self, index: int) -> str:
        return self.contents[index]

    def content_end(self, index: int) -> int:
        return self.starts[index] + len(self.contents[index])

    def end(self, index: int) -> int:
        """After the line's ending (the end of the text for the last line)."""
        return self.starts[index + 1] if index + 1 < len(self.starts) else len(self.text)

    def __len__(self) -> int:
        return len(self.starts)


def line_ending(text: str, at: int) -> str:
    """The line ending used where `at` lies: that of the line at `at`, else of the
    nearest line before it, else "\\n"."""
    newline = text.find("\n", at)
    if newline < 0:
        newline = text.rfind("\n", 0, at)
    return "\r\n" if newline > 0 and text[newline - 1] == "\r" else "\n"


def fit_endings(new: str, ending: str) -> str:
    """`new` with its line endings those of the file where it goes, so a CRLF file
    stays CRLF when the model writes "\\n" (and an LF file gains no "\\r")."""
    if "\n" not in new:
        return new
    if ending == "\r\n":
        return _BARE_LF.sub("\r\n", new)
    return new.replace("\r\n", "\n")


def tolerant(text: str, old: str, new: str) -> tuple[str, list[Span]] | None:
    """The first level below exact at which `old` is found, and every window found
    there (overlapping ones too: more than one is ambiguous); None if none is.

    The levels are cumulative (a window found at one is found at every looser one),
    and a window is only taken if the loosest level finds no other: a block matched
    ignoring indentation must not win over the one the model meant, which differs
    from it only in its curly quotes. So the windows returned are the loosest
    level's, named by the strictest level that finds as many."""
    old_lines = [line.rstrip("\r") for line in old.split("\n")]
    whole = old.endswith("\n")
    if whole:
        old_lines.pop()
    return tolerant_lines(Lines.of(text), old_lines, new, whole=whole)


def tolerant_lines(
    lines: Lines, old: list[str], new: str, *, whole: bool = True, first: int = 0,
) -> tuple[str, list[Span]] | None:
    """tolerant() over a text already split, for old text given as lines: windows
    start at line index `first` or later (a patch's hunks are found in order), and
    each span ends after its last line's ending unless `whole` is false."""
    if not any(line.strip() for line in old):
        return None  # only whitespace: nothing to anchor a tolerant match on
    loosest, normal = _LADDER[-1]
    anywhere = _windows(lines, old, new, whole, normal, shifted=True, from_line=first)
    if not anywhere:
        return None
    for level, normal in _LADDER[:-1]:  # the strictest level that finds them all
        spans = _windows(lines, old, new, whole, normal, shifted=level != "whitespace",
                         from_line=first)
        if len(spans) == len(anywhere):
            return level, spans
    return loosest, anywhere


def _rstrip(line: str) -> str:
    return line.rstrip()


def _strip(line: str) -> str:
    return line.strip()


def _plain(line: str) -> str:
    return (line if line.isascii() else line.translate(_LOOKALIKES)).strip()


def normalised(line: str) -> str:
    """A line as the loosest level compares it: stripped, look-alikes made ASCII."""
    return _plain(line)


_LADDER: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("whitespace", _rstrip), ("indentation", _strip), ("unicode", _plain),
)


def _windows(
    lines: Lines, old: list[str], new: str, whole: bool, normal: Callable[[str], str],
    *, shifted: bool, from_line: int = 0,
) -> list[Span]:
    want = [normal(line) for line in old]
    # only the lines a window may start at or run into are normalised: a patch's
    # later hunks search less of the file
    have = list(map(normal, lines.contents[from_line:] if from_line else lines.contents))
    spans = []
    for offset in _starts(have, want):
        first = from_line + offset
        found = lines.contents[first : first + len(want)]
        last = first + len(want) - 1
        end = lines.end(last) if whole else lines.content_end(last)
        replacement = new
        if shifted:
            lookalike = normal is _plain
            shift = _shift(old, found, lookalike)
            if shift is None:
                continue
            reindented = _reindent(new, shift, found, lookalike)
            if reindented is None:
                continue
            replacement = reindented
        replacement = fit_endings(replacement, line_ending(lines.text, lines.starts[first]))
        spans.append(Span(lines.starts[first], end, replacement))
        if len(spans) > MAX_WINDOWS:
            break
    return spans


def exact_lines(lines: Lines, old: list[str], first: int = 0) -> Iterator[int]:
    """Every line index from `first` on where the lines `old` lie as they are."""
    return (first + offset for offset in _starts(lines.contents[first:], old))


def _starts(have: list[str], want: list[str]) -> Iterator[int]:
    """Every index where `want` lies in `have`. Candidates come from the rarest in
    `have` of ANCHOR_LINES distinct lines of `want` (a file of a million "}" lines
    must not make every one a candidate), counted and found by list methods, in C."""
    distinct = list({line: index for index, line in reversed(list(enumerate(want)))}.items())
    anchor = min(distinct[:ANCHOR_LINES], key=lambda item: have.count(item[0]))[1]
    at = anchor
    while True:
        try:
            at = have.index(want[anchor], at, len(have) - len(want) + anchor + 1)
        except ValueError:
            return
        first = at - anchor
        if have[first : first + len(want)] == want:
            yield first
        at += 1


class Shift(NamedTuple):
    columns: int  # added to every line's indentation (negative: removed)
    tab_width: int


def _indent(line: str, lookalike: bool) -> str:
    if lookalike:
        line = line.translate(_LOOKALIKES)
    match = _INDENT.match(line)
    return match.group() if match else ""


def _columns(indent: str, tab_width: int) -> int:
    return len(indent.expandtabs(tab_width))


def _shift(old: list[str], found: list[str], lookalike: bool) -> Shift | None:
    """The one shift, in columns, from each non-blank old line's indentation to its
    file line's, under the first tab width that gives one; None: no single shift
    (the blocks are nested differently)."""
    pairs = [(_indent(a, lookalike), _indent(b, lookalike))
             for a, b in zip(old, found, strict=True) if a.strip()]
    for width in TAB_WIDTHS:
        shifts = {_columns(b, width) - _columns(a, width) for a, b in pairs}
        if len(shifts) == 1:
            return Shift(shifts.pop(), width)
    return None


def _reindent(new: str, shift: Shift, found: list[str], lookalike: bool) -> str | None:
    """`new` with every non-blank line's indentation moved by the shift and written
    the way the file writes it (tabs if the found lines indent with tabs); None if a
    line would need fewer than no columns."""
    tabs = any("\t" in _indent(line, lookalike) for line in found)
    out = []
    for line in new.split("\n"):
        if not line.strip():
            out.append(line)
            continue
        indent = _indent(line, False)
        columns = _columns(indent, shift.tab_width) + shift.columns
        if columns < 0:
            return None
        if tabs:
            spelled = "\t" * (columns // shift.tab_width) + " " * (columns % shift.tab_width)
        else:
            spelled = " " * columns
        out.append(spelled + line[len(indent):])
    return "\n".join(out)


def lesson(text: str, old: str) -> str:
    """Where `old` came closest to matching in `text`, for a no_match message: the
    region's line numbers and its first line that differs, expected vs found (each
    cut to LESSON_LINE_CHARS); "" when nothing in the file resembles it."""
    old_lines = [line.rstrip("\r") for line in old.split("\n")]
    if old.endswith("\n"):
        old_lines.pop()
    lines = Lines.of(text)
    first = _closest(lines, old_lines)
    if first is None:
        return ""
    count = min(len(old_lines), len(lines) - first)
    where = (f"line {first + 1}" if count == 1
             else f"lines {first + 1}-{first + count}")
    for offset in range(len(old_lines)):
        number = first + offset
        found = lines.content(number) if number < len(lines) else None
        if found != old_lines[offset]:
            shown = "the end of the file" if found is None else _cut(found)
            return (f" The closest region is {where}; line {number + 1} differs: "
                    f"expected {_cut(old_lines[offset])}, found {shown}.")
    return f" The closest region is {where}."


def _closest(lines: Lines, old: list[str]) -> int | None:
    """The file line where the window most like `old` starts: the most old lines
    found (stripped) at their place relative to it; if no old line is found at all,
    the file line most like the old text's first non-blank line."""
    where: dict[str, list[int]] = {}
    for offset, line in enumerate(old):
        if line.strip():
            where.setdefault(_plain(line), []).append(offset)
    votes: Counter[int] = Counter()
    for number in range(len(lines)):
        offsets = where.get(_plain(lines.content(number)))
        if offsets and len(offsets) <= COMMON_LINE_VOTES:
            votes.update(max(0, number - offset) for offset in offsets)
    if votes:
        return min(votes, key=lambda start: (-votes[start], start))
    anchor = next((offset for offset, line in enumerate(old) if line.strip()), None)
    if anchor is None:
        return None
    import difflib  # only on this rare path: a miss where no line matches at all

    target = _plain(old[anchor])[:LESSON_COMPARE_CHARS]
    best, best_ratio = None, 0.6  # below this, a line is not "like" another
    matcher = difflib.SequenceMatcher(b=target, autojunk=False)
    for number in range(min(len(lines), LESSON_SCAN_LINES)):
        matcher.set_seq1(_plain(lines.content(number)[:LESSON_COMPARE_CHARS]))
        if matcher.real_quick_ratio() > best_ratio and matcher.quick_ratio() > best_ratio:
            ratio = matcher.ratio()
            if ratio > best_ratio:
                best, best_ratio = number, ratio
    return None if best is None else max(0, best - anchor)


def _cut(line: str) -> str:
    shown = line if len(line) <= LESSON_LINE_CHARS else line[:LESSON_LINE_CHARS] + "..."
    return repr(shown)
