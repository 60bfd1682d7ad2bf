"""The @@ line search: its exact rung (str.find, no split into lines) finds the
same line as comparing the file's lines one by one would, on LF, CRLF and mixed
endings, a BOM, a last line without an ending and stray "\\r" characters. And
the diff's common ends, found a block at a time, are the longest."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.tools import matching
from corral.tools.patch import _common
from corral.tools.patch_format import FilePatch, Hunk, _anchor_line, _Text, apply_hunks

PIECES = ("a", "b", " a", "a ", "\r", "\ufeff", "ab", "")
ENDINGS = ("\n", "\r\n", "\r\r\n", "")


def by_lines(text: str, anchor: str, cursor: int) -> tuple[int, int] | None:
    """The definition: the first line from the cursor's equal to the anchor, else
    equal stripped, else equal with look-alikes made ASCII."""
    lines = matching.Lines.of(text)
    first = next((i for i, start in enumerate(lines.starts) if start >= cursor), len(lines))
    for normal in (lambda line: line, str.strip, matching.normalised):
        for index in range(first, len(lines)):
            if normal(lines.content(index)) == normal(anchor):
                return lines.starts[index], lines.end(index)
    return None


@settings(max_examples=400, deadline=None)
@given(st.booleans(), st.lists(st.tuples(st.lists(st.sampled_from(PIECES), max_size=3),
                                         st.sampled_from(ENDINGS)), max_size=8),
       st.lists(st.sampled_from(PIECES), min_size=1, max_size=3), st.integers(0, 8))
def test_exact_rung_agrees_with_the_lines(
    bom: bool, shape: list[tuple[list[str], str]], anchor_pieces: list[str], skip: int,
) -> None:
    text = ("\ufeff" if bom else "") + "".join("".join(parts) + end for parts, end in shape)
    anchor = "".join(anchor_pieces)
    if not anchor.strip() or len(text) == int(bom):
        return  # the parser drops blank @@ lines; an empty file has no line to find
    starts = matching.Lines.of(text).starts
    cursor = starts[min(skip, len(starts) - 1)]  # searches start at a line's start
    assert _anchor_line(_Text(text), anchor, cursor) == by_lines(text, anchor, cursor)


def test_an_anchor_ending_in_cr_is_not_a_crlf_line() -> None:
    """"x\\r" is not the line "x" of a CRLF file (its "\\r" is the ending); the
    hunk goes after the line that really is "x\\r"."""
    text = "x\r\nkeep\r\nx\r\r\nold\r\n"
    patch = FilePatch("update", "f", None, (Hunk(("x\r",), (("-", "old"), ("+", "new")), False,
                                                  3),), None, 2)
    assert apply_hunks(text, patch) == ("x\r\nkeep\r\nx\r\r\nnew\r\n", "exact")


@settings(max_examples=300, deadline=None)
@given(st.text("ab\n", max_size=9000), st.text("ab\n", max_size=40),
       st.text("ab\n", max_size=40), st.integers(0, 9000))
def test_the_diff_s_common_ends_are_the_longest(base: str, old: str, new: str, at: int) -> None:
    """_common (block by block, then a binary search) against a plain scan."""
    at = min(at, len(base))
    a, b = base[:at] + old + base[at:], base[:at] + new + base[at:]
    for way in (1, -1):
        x, y = (a, b) if way == 1 else (a[::-1], b[::-1])
        pairs = enumerate(zip(x, y, strict=False))  # the shorter one's length at most
        plain = next((i for i, (p, q) in pairs if p != q), min(len(x), len(y)))
        assert _common(a, b, way) == plain
