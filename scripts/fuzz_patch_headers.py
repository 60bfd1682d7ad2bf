"""files_of (the host's reading of a patch's headers, for quotas and grants)
against parse_patch (the worker's whole parse) on random patches: for every
patch parse_patch accepts, both must name the same files, actions and moves, or
the host would count and name other files than the worker changes.

Two generators: patches built from a grammar with the lenient spellings the
parser takes (padded markers, a heredoc wrapper, CRLF, marker-like lines inside
hunks and added files), and random sequences of patch-like lines.

    python scripts/fuzz_patch_headers.py [--cases 200000] [--seed 1]

tests/test_patch_format.py runs a short version (hypothesis).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral.errors import CorralError
from corral.tools.patch_format import FilePatch, files_of, parse_patch

MARKERS = ["*** Add File: ", "*** Delete File: ", "*** Update File: "] * 3 + [
    "*** Add File:", "*** Rename File: "]
PADDING = ["", "", "  ", "  ", "\t", "\u00a0"]
PATHS = ["a", "b/c", "a", "b/c", "d/", ""]
MOVES = [None, None, "*** Move to: e/f", "  *** Move to: g", "*** Move to:h"]
BODY = [" x", "-x", "+x", "", "  ", "@@", "@@ x", "  *** Add File: p", " *** Delete File: q",
        "  *** Move to: m", "  *** End of File", "*** End of File", "+*** Add File: p", " x",
        "-x", "+x", " *** Update File: q", "\t*** x", "+y"]
PIECES = ["*** Begin Patch", "*** End Patch", "*** Add File: a", "*** Add File: ",
          "*** Update File: a", "*** Update File: b", "*** Delete File: c", "*** Move to: d",
          "*** End of File", "@@", "@@ x", "@@ -1 +1 @@", "@@@", "+x", "-x", " x", "", "  ",
          "x", "\t+x", "<<'EOF'", "EOF", "*"]


def from_grammar(rng: random.Random) -> str:
    pad = rng.choice(["", "  "])
    lines = [pad + "*** Begin Patch"]
    for number in range(rng.randint(1, 4)):
        marker, path = rng.choice(MARKERS), rng.choice(PATHS)
        lines.append(rng.choice(PADDING) + marker + path + (str(number) if path else ""))
        move = rng.choice(MOVES)
        if move is not None:
            lines.append(move + str(number))
        body = [rng.choice(BODY) for _ in range(rng.randint(0, 5))]
        if "Add" in marker:  # an added file's lines are mostly its own, "+" ones
            body = [line if line.startswith("+") or number % 2 else "+" + line
                    for line in body]
        lines += body
    lines.append(pad + "*** End Patch")
    if rng.random() < 0.3:
        lines = ["<<'EOF'", *lines, "EOF"]
    ending = rng.choice(["\n", "\r\n"])
    return ending.join(lines) + ending


def from_pieces(rng: random.Random) -> str:
    return rng.choice(["\n", "\r\n"]).join(
        rng.choice(PIECES) for _ in range(rng.randint(0, 12)))


def headers(files: tuple[FilePatch, ...]) -> list[tuple[str, str, str | None]]:
    return [(f.action, f.path, f.move_to) for f in files]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    accepted = 0
    for case in range(args.cases):
        text = (from_grammar if case % 2 else from_pieces)(rng)
        try:
            parsed = parse_patch(text)
        except CorralError:
            continue
        accepted += 1
        if headers(files_of(text)) != headers(parsed):
            print(f"case {case}: files_of {headers(files_of(text))} but parse_patch "
                  f"{headers(parsed)} for {text!r}")
            return 1
    print(f"{args.cases} patches, {accepted} accepted by parse_patch: files_of agreed on all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
