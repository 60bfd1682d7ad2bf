"""apply_hunks against a second, plain implementation of the same rules on
random files (LF, CRLF, mixed endings, a BOM, no final newline) and random
hunks copied from them: wherever the hunks' old lines lie in the file exactly,
both must give the same text, or both refuse (not found, or found twice).

The reference works on a list of (content, ending) lines and compares them
one window at a time: slow and obvious, where apply_hunks uses str.find and
matching's ladder. Hunks that only a tolerant level finds are counted, not
compared.

    python scripts/fuzz_patch.py [--cases 20000] [--seed 1]

tests/test_patch_format.py runs a short version.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral.errors import CorralError
from corral.tools.patch_format import FilePatch, Hunk, apply_hunks

WORDS = ("a", "b", "  a", "\tb", "", "c d", "a ")

Lines = list[tuple[str, str]]  # (content, ending)


def split(text: str) -> tuple[str, Lines]:
    """The BOM and the lines of a text, as the reference sees them."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    body, lines = text[len(bom):], []
    while body:
        newline = body.find("\n")
        if newline < 0:
            lines.append((body, ""))
            break
        line = body[:newline]
        lines.append((line[:-1], "\r\n") if line.endswith("\r") else (line, "\n"))
        body = body[newline + 1:]
    return bom, lines


def reference(text: str, hunks: list[list[tuple[str, str]]]) -> str:
    """The text after the hunks (no @@ lines, none at the end of the file), or
    "no_match" / "ambiguous_match"."""
    bom, lines = split(text)
    final = not lines or bool(lines[-1][1])  # the file ends with a line ending
    edits: list[tuple[int, int, Lines]] = []
    cursor = 0
    for hunk in hunks:
        if all(kind == "+" for kind, _ in hunk):  # appended: the cursor stays
            edits.append((len(lines), len(lines), _appended(lines, hunk, final)))
            continue
        found = _seek(lines, hunk, cursor)
        if isinstance(found, str):
            return found
        start, used = found
        end = start + sum(kind != "+" for kind, _ in used)
        edits.append((start, end, _new(lines, start, end, used, final)))
        cursor = end
    out: Lines = []
    at = 0
    for start, end, new in sorted(edits, key=lambda edit: edit[:2]):
        out += lines[at:start] + new
        at = end
    return bom + "".join(content + own for content, own in out + lines[at:])


def _seek(lines: Lines, hunk: list[tuple[str, str]], cursor: int) -> str | tuple[
        int, list[tuple[str, str]]]:
    """Where the hunk's old lines lie from cursor on, once; else retried without
    blank context lines at its end (as apply_hunks does)."""
    variants = [hunk]
    trimmed = list(hunk)
    while trimmed and trimmed[-1] == (" ", ""):
        trimmed.pop()
    if trimmed != hunk and any(kind != "+" for kind, _ in trimmed):
        variants.append(trimmed)
    for used in variants:
        old = [line for kind, line in used if kind != "+"]
        places = [start for start in range(cursor, len(lines) - len(old) + 1)
                  if [content for content, _ in lines[start : start + len(old)]] == old]
        if len(places) > 1:
            return "ambiguous_match"
        if places:
            return places[0], used
    return "no_match"


def _ending(lines: Lines, start: int) -> str:
    """The ending of the line at start if it has one, else of the nearest line
    before it that has one, else "\n"."""
    if start < len(lines) and lines[start][1]:
        return lines[start][1]
    return next((own for _, own in reversed(lines[:start]) if own), "\n")


def _new(lines: Lines, start: int, end: int, hunk: list[tuple[str, str]], final: bool) -> Lines:
    """The window's new lines: context as the file has it, added lines with the
    window's ending; every line but the last has an ending, and the last has
    none if the window ends a file without a final newline."""
    ending = _ending(lines, start)
    out, at = [], start
    for kind, line in hunk:
        if kind == "+":
            out.append((line, ending))
        else:
            if kind == " ":
                out.append(lines[at])
            at += 1
    out = [(content, own or ending) for content, own in out]
    if out and end == len(lines) and not final:
        out[-1] = (out[-1][0], "")
    return out


def _appended(lines: Lines, hunk: list[tuple[str, str]], final: bool) -> Lines:
    """Lines added at the end; a last line without an ending gets one first, and
    the new last line has none."""
    ending = _ending(lines, len(lines))
    out = [(line, ending) for _, line in hunk]
    if lines and not final:
        out[0] = (ending + out[0][0], ending)  # the old last line's ending comes first
        out[-1] = (out[-1][0], "")
    return out


def case(rng: random.Random) -> tuple[str, list[list[tuple[str, str]]]]:
    """A random file and one to three hunks, most copied from it."""
    count = rng.randint(0, 10)
    endings = rng.choice((["\n"], ["\r\n"], ["\n", "\r\n"]))
    lines = [f"{rng.choice(WORDS)}{rng.randrange(4) if rng.random() < 0.7 else ''}"
             for _ in range(count)]
    text = "".join(line + rng.choice(endings) for line in lines)
    if lines and rng.random() < 0.3:
        text = text.rstrip("\r\n")
    if rng.random() < 0.1:
        text = "\ufeff" + text
    hunks = []
    start = 0
    for _ in range(rng.randint(1, 3)):
        size = rng.randint(1, 3)
        if lines and rng.random() < 0.85:  # copied from the file, after the last
            start = rng.randrange(start, len(lines)) if start < len(lines) else 0
            source = lines[start : start + size]
            start += len(source)
        else:
            source = [rng.choice(WORDS) for _ in range(size)]
        hunk: list[tuple[str, str]] = []
        for line in source:
            hunk.append((rng.choice(" -"), line))
            if rng.random() < 0.4:
                hunk.append(("+", f"new{rng.randrange(9)}"))
        if rng.random() < 0.1:
            hunk = [("+", "only")]
        hunks.append(hunk)
    return text, hunks


def outcome(text: str, hunks: list[list[tuple[str, str]]]) -> str:
    """same: applied | same: no_match | same: ambiguous_match | tolerant (only a
    tolerant level found it: not compared) | DIFFERENT."""
    patch = FilePatch("update", "f", None, tuple(
        Hunk((), tuple(hunk), False, 3) for hunk in hunks), None, 2)
    expected = reference(text, hunks)
    try:
        got, level = apply_hunks(text, patch)
    except CorralError as error:  # found twice, but only by a tolerant level: not compared
        got, level = error.code, "whitespace" if " ignoring " in error.message else "exact"
    if level != "exact" and expected == "no_match":
        return "tolerant"
    if got != expected:
        return "DIFFERENT"
    return f"same: {expected if expected in ('no_match', 'ambiguous_match') else 'applied'}"


def run(cases: int, seed: int) -> tuple[Counter[str], list[tuple[str, object]]]:
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    different: list[tuple[str, object]] = []
    for _ in range(cases):
        text, hunks = case(rng)
        result = outcome(text, hunks)
        tally[result] += 1
        if result == "DIFFERENT" and len(different) < 5:
            different.append((text, hunks))
    return tally, different


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    tally, different = run(args.cases, args.seed)
    print(f"{args.cases} random files and hunks: {dict(sorted(tally.items()))}")
    for text, hunks in different:
        print(f"  DIFFERENT: {text!r} {hunks!r}")
    if tally["DIFFERENT"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
