"""The unified diff edit_file returns: a patience diff (common ends, then lines
unique on both sides as anchors), with difflib only for short stretches without
anchors, so its cost stays bounded on any input; difflib's unified format."""

from __future__ import annotations

import bisect
import difflib
import io
from collections import Counter
from typing import Literal

from corral.tools import render

# result.diff at most; a whole-file change of a 64 MiB file would not fit the answer's
# frame, and the call would report an error after the file was already changed.
DIFF_MAX_BYTES = 4 * 1024 * 1024
DIFF_CONTEXT = 3  # unchanged lines around each hunk, as diff -u
# difflib's matcher is quadratic or worse on some inputs (a blank line added after each
# of 3000 lines took 7 s): it only sees stretches without unique lines up to this long.
DIFF_MATCH_LINES = 2_000
# Lines the patience diff may look at in all; past it a stretch is one hunk, so a
# diff of a 64 MiB file stays well inside the per-call timeout.
DIFF_WORK_LINES = 4_000_000
_NO_EOL = "\\ No newline at end of file\n"

Tag = Literal["replace", "delete", "insert", "equal"]
Opcode = tuple[Tag, int, int, int, int]


def unified_diff(
    path: str, before: str, after: str, unchanged: tuple[int, int] = (0, 0), *,
    old_path: str | None = None,
) -> str:
    """difflib's unified format with 3 lines of context, computed only over the
    stretch between the common first and last lines, anchored as _matching_blocks says.
    unchanged: characters at the start and at the end known to be the same in both
    texts; only the lines between them (and the context around) are split and compared.
    old_path: the file's name before (a move's source), as git names it."""
    start, end_before, end_after, offset = _window(before, after, *unchanged)
    a = io.StringIO(before[start:end_before]).readlines()
    b = io.StringIO(after[start:end_after]).readlines()
    lines = [f"--- {header(f'a/{old_path or path}')}\n", f"+++ {header(f'b/{path}')}\n"]
    for group in _Opcodes(_opcodes(a, b)).get_grouped_opcodes(DIFF_CONTEXT):
        old = _range(offset + group[0][1], offset + group[-1][2])
        new = _range(offset + group[0][3], offset + group[-1][4])
        lines.append(f"@@ -{old} +{new} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [f" {line}" for line in a[i1:i2]]
                continue
            lines += [f"-{line}" for line in a[i1:i2]]
            lines += [f"+{line}" for line in b[j1:j2]]
    if len(lines) == 2:
        return ""
    return "".join(line if line.endswith("\n") else f"{line}\n{_NO_EOL}" for line in lines)


def header(name: str) -> str:
    """A file's name in a diff header, quoted with escapes as git does when it holds
    a control character: a newline in a name must not forge lines of the diff."""
    return name if name.isprintable() else f'"{render.escaped(name)}"'


def _window(before: str, after: str, head: int, tail: int) -> tuple[int, int, int, int]:
    """Whole lines around the changed middle, with at least DIFF_CONTEXT more on each
    side: (start, end in before, end in after, lines before start). The text before
    start and after the ends is the same in both, so are its line boundaries."""
    start = head
    for _ in range(DIFF_CONTEXT + 1):
        if start == 0:
            break
        start = before.rfind("\n", 0, start - 1) + 1
    end_before, end_after = len(before) - tail, len(after) - tail
    for _ in range(DIFF_CONTEXT + 1):
        if end_before == len(before):
            break
        newline = before.find("\n", end_before)
        step = (newline + 1 if newline >= 0 else len(before)) - end_before
        end_before, end_after = end_before + step, end_after + step
    return start, end_before, end_after, before.count("\n", 0, start)


def capped(diff: str) -> tuple[str, bool]:
    """The diff cut after its last whole line within DIFF_MAX_BYTES as JSON carries
    it (render.encoded_size: a control character is six bytes), and whether it was
    (the edit is made either way: its answer must still fit one frame)."""
    data = diff.encode("utf-8", "surrogateescape")
    if render.encoded_size(data) <= DIFF_MAX_BYTES:
        return diff, False
    kept, used = [], 0
    for line in io.BytesIO(data).readlines():  # split on "\n" only, as the diff's lines are
        used += render.encoded_size(line)
        if used > DIFF_MAX_BYTES:
            break
        kept.append(line)
    return b"".join(kept).decode("utf-8", "surrogateescape"), True


def _opcodes(a: list[str], b: list[str]) -> list[Opcode]:
    """difflib-style opcodes from _matching_blocks (difflib's own rule)."""
    codes: list[Opcode] = []
    i = j = 0
    for ai, bj, size in [*_matching_blocks(a, b), (len(a), len(b), 0)]:
        tag: Tag = "replace" if i < ai and j < bj else "delete" if i < ai else "insert"
        if i < ai or j < bj:
            codes.append((tag, i, ai, j, bj))
        i, j = ai + size, bj + size
        if size:
            codes.append(("equal", ai, i, bj, j))
    return codes


def _matching_blocks(a: list[str], b: list[str]) -> list[tuple[int, int, int]]:
    """Equal runs (i, j, size), sorted, as a patience diff finds them: common first
    and last lines, then lines found once on each side as anchors, then the same
    between anchors; difflib only for a short stretch without anchors. The lines
    looked at are bounded by DIFF_WORK_LINES: past that, a stretch is one hunk."""
    blocks: list[tuple[int, int, int]] = []
    stack = [(0, len(a), 0, len(b))]
    work = 0
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        size = 0
        while alo + size < ahi and blo + size < bhi and a[alo + size] == b[blo + size]:
            size += 1
        blocks.append((alo, blo, size))
        alo, blo = alo + size, blo + size
        size = 0
        while alo < ahi - size and blo < bhi - size and a[ahi - 1 - size] == b[bhi - 1 - size]:
            size += 1
        ahi, bhi = ahi - size, bhi - size
        blocks.append((ahi, bhi, size))
        work += (ahi - alo) + (bhi - blo)
        if alo == ahi or blo == bhi or work > DIFF_WORK_LINES:
            continue
        anchors = _unique_pairs(a, b, alo, ahi, blo, bhi)
        if anchors:
            starts, stops = [(alo, blo), *anchors], [*anchors, (ahi, bhi)]
            for (i, j), (i2, j2) in zip(starts, stops, strict=True):
                stack.append((i, i2, j, j2))  # each stretch after an anchor starts with it
        elif (ahi - alo) + (bhi - blo) <= DIFF_MATCH_LINES:
            matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi])
            blocks += [(alo + i, blo + j, n) for i, j, n in matcher.get_matching_blocks()]
    merged: list[tuple[int, int, int]] = []
    for i, j, size in sorted(block for block in blocks if block[2]):
        if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
            merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + size)
        else:
            merged.append((i, j, size))
    return merged


def _unique_pairs(
    a: list[str], b: list[str], alo: int, ahi: int, blo: int, bhi: int
) -> list[tuple[int, int]]:
    """(i, j) of lines found exactly once in a[alo:ahi] and once in b[blo:bhi], the
    longest run of them in the same order on both sides."""
    count_a, count_b = Counter(a[alo:ahi]), Counter(b[blo:bhi])
    where = {line: j for j, line in enumerate(b[blo:bhi], blo) if count_b[line] == 1}
    pairs = [
        (i, where[line]) for i, line in enumerate(a[alo:ahi], alo)
        if count_a[line] == 1 and line in where
    ]
    ends: list[int] = []  # ends[k]: smallest j ending an increasing run of k + 1 pairs
    tips: list[int] = []  # the pair index at ends[k]
    back = [-1] * len(pairs)
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(ends, j)
        back[index] = tips[k - 1] if k else -1
        if k == len(ends):
            ends.append(j)
            tips.append(index)
        else:
            ends[k], tips[k] = j, index
    run, index = [], tips[-1] if tips else -1
    while index >= 0:
        run.append(pairs[index])
        index = back[index]
    return run[::-1]


class _Opcodes(difflib.SequenceMatcher[str]):
    """difflib's grouping into hunks, over opcodes computed elsewhere."""

    def __init__(self, codes: list[Opcode]) -> None:
        super().__init__(None, [], [])
        self.codes = codes

    def get_opcodes(self) -> list[Opcode]:
        return list(self.codes)


def _range(start: int, stop: int) -> str:
    """A hunk's line range as the unified format spells it (difflib's rules)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"
