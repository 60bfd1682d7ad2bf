"""The drift corpus: edits a model would send with the drift models make when they
copy text (trailing spaces dropped, LF for a CRLF file, spaces for tabs, a block
at the wrong indent, straight quotes and dashes for curly ones, and several at
once), generated from real source files (corral's own), each with the result
the edit was meant to have. Every case is applied with edit_file's matching and
sorted into: applied as intended, applied WRONGLY (anything but the intended
result: must be 0), or refused (no_match / ambiguous_match). Each case is also
sent as a one-hunk patch (the model's old and new text diffed into " ", "-" and
"+" lines, as apply_patch takes them) through apply_hunks, where context lines
keep the file's own text.

Controls: "stale" cases change a word of old_string (the file never held that
text), and "twin" cases put the block at a second indentation level in the file;
neither may ever apply wrongly.

    python scripts/drift_corpus.py [--cases 2000] [--seed 1] [--sandbox 200]

--sandbox N also sends the first N cases through a Sandbox (real workers) and
checks the file on disk. tests/test_tools_match.py runs a short version.
"""

from __future__ import annotations

import argparse
import difflib
import random
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral.errors import CorralError
from corral.tools.edit import Edit, apply
from corral.tools.patch_format import FilePatch, Hunk, apply_hunks

REPO = Path(__file__).resolve().parent.parent
KINDS = ("trailing", "crlf", "tabs", "indent", "quotes", "mixed", "stale", "twin")
CURLY = str.maketrans({"'": "\u2019", '"': "\u201d", "-": "\u2013"})


@dataclass(frozen=True)
class Case:
    kind: str
    source: str  # the file it came from
    text: str  # the file as it is on disk
    old: str  # what the model sends
    new: str
    intended: str | None  # the file after the edit; None: the edit must be refused
    # the file after the same change sent as a patch: its context lines keep the file's
    # text (trailing spaces, curly quotes), where edit_file puts new_string in whole
    patch_intended: str | None = None


def sources() -> list[tuple[str, list[str]]]:
    """corral's own modules, as lines (4-space indented, LF): real code."""
    files = sorted((REPO / "corral").rglob("*.py"))
    return [(str(path.relative_to(REPO)), path.read_text().split("\n")) for path in files]


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" "))]


def _tabs(line: str) -> str:
    indent = _indent(line)
    return "\t" * (len(indent) // 4) + " " * (len(indent) % 4) + line[len(indent):]


def _region(rng: random.Random, lines: list[str]) -> tuple[int, int] | None:
    """A block of 2-8 lines, the first not blank, that occurs once in the file."""
    for _ in range(20):
        size = rng.randint(2, 8)
        start = rng.randrange(0, max(1, len(lines) - size))
        block = lines[start : start + size]
        if not block[0].strip() or sum(1 for line in block if line.strip()) < 2:
            continue
        joined = "\n".join(block)
        if "\n".join(lines).count(joined) == 1 and '"""' not in joined:
            return start, start + size
    return None


def _change(rng: random.Random, block: list[str]) -> list[str]:
    """What the model means to do to the block: change, add or drop a line."""
    out = list(block)
    which = rng.randrange(len(out))
    action = rng.choice(("change", "add", "drop"))
    if action == "change" or len(out) < 3:
        out[which] = out[which] + "  # changed" if out[which].strip() else "# changed"
    elif action == "add":
        out.insert(which + 1, _indent(out[which]) + "note = 'added'")
    else:
        del out[which]
    return out


def make(rng: random.Random, name: str, lines: list[str], kind: str) -> Case | None:
    """One case of `kind` from a file; None if the file offers no fitting region."""
    found = _region(rng, lines)
    if found is None:
        return None
    start, end = found
    file_lines, block = list(lines), lines[start:end]
    changed = _change(rng, block)
    ending = "\n"
    model_old, model_new = list(block), list(changed)  # as the model writes them
    drifts = set(rng.sample(("trailing", "crlf", "tabs", "quotes"), 2)) if kind == "mixed" \
        else {kind}
    if "trailing" in drifts:  # the file has trailing spaces the model does not copy
        file_lines[start:end] = [line + "  " if line.strip() else line for line in block]
    if "quotes" in drifts:  # the file's quotes and dashes are curly, the model's straight
        if not any(c in "'\"-" for c in "".join(block)):
            return None
        file_lines[start:end] = [line.translate(CURLY) for line in file_lines[start:end]]
    if "tabs" in drifts:  # the file indents with tabs, the model with spaces
        file_lines = [_tabs(line) for line in file_lines]
    if "crlf" in drifts:
        ending = "\r\n"
    # new_string replaces the whole region and lands as the model wrote it, in the
    # file's indentation and line endings
    file_new = [_tabs(line) for line in changed] if "tabs" in drifts else changed
    if kind == "indent":  # the model's block is at the wrong indentation level
        shift = rng.choice((-4, 4, 8))
        if any(len(_indent(line)) < -shift for line in block + changed if line.strip()):
            shift = 4  # a dedent past column 0 would lose the block's shape
        model_old = [_shifted(line, shift) for line in block]
        model_new = [_shifted(line, shift) for line in changed]
        if "\n".join(model_old) in "\n".join(file_lines):
            return None  # the shifted block is also in the file as is: that match is exact
    intended: str | None = ending.join(file_lines[:start] + file_new + file_lines[end:])
    if kind == "stale":  # the model remembers a word the file never had
        words = [m for m in re.finditer(r"[A-Za-z_]{4,}", "\n".join(block))]
        if not words:
            return None
        word = rng.choice(words)
        joined = "\n".join(block)
        model_old = (joined[: word.start()] + word.group()[::-1] + "x"
                     + joined[word.end():]).split("\n")
        intended = None
    if kind == "twin":  # the same block also sits one level deeper, and the model's
        # block is at neither level: it matches both once indentation is ignored
        if not all(_indent(line) for line in block if line.strip()):
            return None
        file_lines = file_lines[:end] + ["", "def twin():"] + [
            "        " + line if line.strip() else line for line in block] + file_lines[end:]
        model_old = [line.strip() for line in block]
        model_new = [line.strip() for line in changed]
        intended = None
    text = ending.join(file_lines)
    patch_intended = None
    if intended is not None:
        merged = []
        for tag, i1, i2, j1, j2 in _opcodes(model_old, model_new):
            merged += file_lines[start + i1 : start + i2] if tag == "equal" else file_new[j1:j2]
        patch_intended = ending.join(file_lines[:start] + merged + file_lines[end:])
    return Case(kind, name, text, "\n".join(model_old) + "\n", "\n".join(model_new) + "\n",
                intended, patch_intended)


def _opcodes(old: list[str], new: list[str]) -> list[tuple[str, int, int, int, int]]:
    return difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()


def as_patch(case: Case) -> FilePatch:
    """The case's edit as the one hunk a model would write for it."""
    old, new = case.old[:-1].split("\n"), case.new[:-1].split("\n")
    lines: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in _opcodes(old, new):
        if tag == "equal":
            lines += [(" ", line) for line in old[i1:i2]]
        else:
            lines += [("-", line) for line in old[i1:i2]] + [("+", line) for line in new[j1:j2]]
    return FilePatch("update", "f", None, (Hunk((), tuple(lines), False, 3),), None, 2)


def _shifted(line: str, shift: int) -> str:
    if not line.strip():
        return line
    indent = len(_indent(line))
    return " " * max(0, indent + shift) + line.lstrip(" ")


def corpus(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    files = [item for item in sources() if len(item[1]) > 20]
    cases: list[Case] = []
    while len(cases) < count:
        kind = KINDS[len(cases) % len(KINDS)]
        name, lines = rng.choice(files)
        case = make(rng, name, lines, kind)
        if case is not None:
            cases.append(case)
    return cases


def outcome(case: Case, tolerant: bool = True) -> str:
    """applied | WRONG | refused:<code>, for one case through edit_file's matching."""
    try:
        after = apply("f", case.text, [Edit(case.old, case.new, False)], tolerant=tolerant).text
    except CorralError as error:
        return f"refused:{error.code}"
    return "applied" if after == case.intended else "WRONG"


def patch_outcome(case: Case) -> str:
    """applied | WRONG | refused:<code>, for the case sent as a patch to apply_hunks."""
    try:
        after, _ = apply_hunks(case.text, as_patch(case))
    except CorralError as error:
        return f"refused:{error.code}"
    return "applied" if after == case.patch_intended else "WRONG"


def through_sandbox(cases: list[Case]) -> Counter[str]:
    """The same cases through Sandbox.call: the file on disk is what is compared."""
    from corral import Sandbox

    tally: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as ws, Sandbox(ws) as sandbox:
        for index, case in enumerate(cases):
            path = Path(ws) / f"case{index}.py"
            path.write_bytes(case.text.encode())
            answer = sandbox.call("edit_file", {"path": path.name, "old_string": case.old,
                                                "new_string": case.new})
            if not answer["ok"]:
                tally[f"refused:{answer['error']['code']}"] += 1
            else:
                tally["applied" if path.read_bytes().decode() == case.intended else "WRONG"] += 1
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sandbox", type=int, default=0)
    args = parser.parse_args()
    cases = corpus(args.cases, args.seed)
    by_kind: dict[str, Counter[str]] = {}
    for case in cases:
        by_kind.setdefault(case.kind, Counter())[outcome(case)] += 1
    total: Counter[str] = Counter()
    for kind in KINDS:
        total.update(by_kind.get(kind, Counter()))
        print(f"{kind:9} {dict(sorted(by_kind.get(kind, Counter()).items()))}")
    drifted = [case for case in cases if case.intended is not None]
    applied = sum(1 for case in drifted if outcome(case) == "applied")
    print(f"{len(cases)} cases from {len({c.source for c in cases})} files: "
          f"{applied}/{len(drifted)} drifted edits applied as intended, "
          f"{total['WRONG']} wrong, "
          f"{sum(n for k, n in total.items() if k.startswith('refused'))} refused "
          f"({len(cases) - len(drifted)} of them controls that must be refused)")
    exact = sum(1 for case in drifted if outcome(case, tolerant=False) == "applied")
    print(f"with match='exact': {exact}/{len(drifted)} drifted edits applied")
    patches: Counter[str] = Counter(patch_outcome(case) for case in cases)
    applied = sum(1 for case in drifted if patch_outcome(case) == "applied")
    print(f"as patches (apply_hunks): {applied}/{len(drifted)} drifted edits applied as "
          f"intended, {patches['WRONG']} wrong, "
          f"{sum(n for k, n in patches.items() if k.startswith('refused'))} refused")
    if args.sandbox:
        print("through a Sandbox:", dict(through_sandbox(cases[: args.sandbox])))
    if total["WRONG"] or patches["WRONG"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
