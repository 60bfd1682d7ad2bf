"""The Codex CLI's patch format (the one OpenAI's models are trained to write):
parse_patch reads a patch strictly into typed file changes, apply_hunks finds an
update's hunks in a file on matching's ladder and returns the new text. Pure: no
I/O, no sandbox.

    *** Begin Patch
    *** Add File: path         every following line starts with "+"
    *** Delete File: path
    *** Update File: path
    *** Move to: new/path      optional, right after Update
    @@ class Foo               @@ lines (several narrow further) name lines the hunk
    @@     def bar(self):      lies after; the first hunk of an Update may omit @@
     context                   " " kept, "-" removed, "+" added
    -old
    +new
    *** End of File            optional: the hunk ends the file
    *** End Patch

What Codex accepts beyond that grammar is accepted too (codex-rs/apply-patch,
parser.rs): spaces around the marker lines, a bare heredoc wrapper (<<'EOF' ...
EOF) around the patch, blank lines before a hunk, an empty line inside a hunk as
an empty context line. Everything else is refused with invalid_arguments naming
the patch line and what was expected there. One thing Codex refuses is taken: an
Update File with a Move to and no hunk renames the file unchanged.
"""

from __future__ import annotations

import bisect
import posixpath
import re
from typing import Literal, NamedTuple

from corral.errors import CorralError
from corral.history.records import MAX_PATCH_ENTRIES
from corral.tools import matching

BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, DELETE, UPDATE = "*** Add File:", "*** Delete File:", "*** Update File:"
MOVE = "*** Move to:"
END_OF_FILE = "*** End of File"
HEREDOC_OPENERS = ("<<EOF", "<<'EOF'", '<<"EOF"')  # as Codex's lenient mode takes them
# Files one patch may change (apply_patch refuses more): a move is two entries of
# its history record.
MAX_PATCH_FILES = MAX_PATCH_ENTRIES // 2
SHOWN_CHARS = 80  # a patch line quoted in an error message is cut to this
SHOWN_PLACES = 5  # line numbers an ambiguous hunk's message lists
# "@@ -12,7 +12,8 @@": a unified diff's range, which this format has no use for
_RANGE = re.compile(r"@@ -\d+(,\d+)? \+\d+(,\d+)? @@")


class Hunk(NamedTuple):
    anchors: tuple[str, ...]  # the @@ context lines, in order ('' entries dropped)
    lines: tuple[tuple[str, str], ...]  # (' ' | '-' | '+', text without prefix or newline)
    end_of_file: bool  # *** End of File followed the hunk
    line: int  # 1-based patch line of the hunk's first line


class FilePatch(NamedTuple):
    action: Literal["add", "update", "delete"]
    path: str
    move_to: str | None  # update only
    hunks: tuple[Hunk, ...]  # update only (none: a move alone)
    content: str | None  # add only: the new file's text (lines joined with "\n", final "\n")
    line: int  # 1-based patch line of the *** header


# A line that, stripped, starts with "***": the only lines that can be a header.
_MARKED = re.compile(r"^([^\S\n]*)\*\*\*.*", re.M)


def files_of(patch: object) -> tuple[FilePatch, ...]:
    """The files a patch changes (action, path, move_to; no hunks or content), as
    parse_patch reads its headers; none when it is not a string. The host counts a
    patch's files (quotas) and names its paths (grants) with this, read once a
    call (host/flow.py), so what it
    counts is what the worker will apply, however leniently spelled (padded
    markers, a heredoc wrapper).

    It reads only the lines that can be headers, not the hunks: a patch is up to
    a request's size, and parse_patch builds objects for every line (about 100
    bytes of memory per byte of a patch of short lines, and 0.3 s per MiB),
    which the host would pay on every call, outside any worker's limits. Exact
    for a patch parse_patch accepts; for one it refuses the worker refuses the
    call before it changes anything, so what is counted then does not matter.
    Which marked lines are headers, as _Reader decides: after an Update header a
    marked line is a header only if it starts with "*" (a padded one is a context
    line, `*** End of File` ends a hunk), and the line right after the Update
    header may be its Move to; after an Add or a Delete header, or first, any
    marked line is. It stops after MAX_PATCH_FILES + 1 files: apply_patch
    refuses such a patch before it changes anything."""
    return _headers_of(patch) if isinstance(patch, str) else ()


def _headers_of(patch: str) -> tuple[FilePatch, ...]:
    files: list[FilePatch] = []
    update = -2  # where the Update header being read ends (its Move to starts one after)
    line, at = 1, 0
    for marked in _MARKED.finditer(patch):
        start = marked.start()
        padded = marked.end(1) > start
        if padded and update >= 0 and start != update + 1:
            continue  # a context line of the update's hunk (the common case: first)
        text = marked.group().strip()
        if text in (BEGIN, END, END_OF_FILE):
            continue
        if start == update + 1 and text.startswith(MOVE):
            move_to = text[len(MOVE):].strip()
            if not move_to or move_to.endswith("/"):
                return ()  # parse_patch refuses it
            files[-1] = files[-1]._replace(move_to=move_to)
            continue
        if padded and update >= 0:
            continue
        line += patch.count("\n", at, start)
        at = start
        found = _header(text, line)
        if found is None:  # parse_patch refuses the patch: what is counted does not matter
            return ()
        files.append(found)
        if len(files) > MAX_PATCH_FILES:
            break
        update = marked.end() if found.action == "update" else -2
    return tuple(files)


_ACTIONS: tuple[tuple[str, Literal["add", "delete", "update"]], ...] = (
    (ADD, "add"), (DELETE, "delete"), (UPDATE, "update"))


def _header(text: str, line: int) -> FilePatch | None:
    """files_of's reading of a marked line where _Reader expects a file's header
    (stripped): that header, or None where parse_patch refuses the line."""
    for marker, action in _ACTIONS:
        if text.startswith(marker):
            path = _spelled_path(text, marker)
            if path is None or path.endswith("/"):  # as _file_path refuses it
                return None
            return FilePatch(action, path, None, (), None, line)
    return None


def _spelled_path(line: str, marker: str) -> str | None:
    """The path of a stripped header line '<marker> <path>' (the marker, space, a
    path); None when it is spelled otherwise. _Reader and files_of both read so."""
    path = line[len(marker):].strip()
    return path if path and line[len(marker)].isspace() else None


def parse_patch(text: str) -> tuple[FilePatch, ...]:
    """The file changes a patch makes, in order. Raises invalid_arguments naming
    the patch line for anything the format does not allow: no Begin or End line,
    no file at all, a header or hunk line it cannot read, an Update File with
    neither hunks nor a Move to, a path named twice."""
    body, end_line = _body(text)
    reader = _Reader(body)
    files: list[FilePatch] = []
    while reader.more():
        files.append(reader.file())
    if not files:
        raise _invalid(end_line, "the patch changes no file: expected '*** Add File: <path>', "
                       "'*** Update File: <path>' or '*** Delete File: <path>' before "
                       "'*** End Patch'")
    _once_each(files)
    return tuple(files)


def _invalid(line: int, message: str) -> CorralError:
    return CorralError("invalid_arguments", f"patch line {line}: {message}.")


def _shown(line: str) -> str:
    return repr(line if len(line) <= SHOWN_CHARS else line[:SHOWN_CHARS] + "...")


Numbered = list[tuple[int, str]]  # (1-based patch line, the line without its ending)


def _body(text: str) -> tuple[Numbered, int]:
    """The lines between *** Begin Patch and *** End Patch, and the End line's
    number. Blank lines around the patch and a heredoc wrapper are dropped."""
    lines = [(number, line[:-1] if line.endswith("\r") else line)
             for number, line in enumerate(text.split("\n"), 1)]
    while lines and not lines[-1][1].strip():
        lines.pop()
    start = next((index for index, (_, line) in enumerate(lines) if line.strip()), len(lines))
    lines = lines[start:]
    if not lines:
        raise _invalid(1, "the patch is empty: expected '*** Begin Patch'")
    if (lines[0][1].strip() in HEREDOC_OPENERS and lines[-1][1].strip().endswith("EOF")
            and len(lines) >= 4):
        lines = lines[1:-1]
    first_number, first = lines[0]
    if first.strip() != BEGIN:
        raise _invalid(first_number, f"expected '{BEGIN}', found {_shown(first)}{_hint(first)}")
    last_number, last = lines[-1]
    if len(lines) == 1 or last.strip() != END:
        raise _invalid(last_number, f"expected '{END}' as the last line, found "
                       f"{_shown(last)}{_hint(last)}")
    return lines[1:-1], last_number


def _hint(line: str) -> str:
    """What a wrong first or last line most likely is, for the message."""
    if line.startswith("```"):
        return " (send the patch without a Markdown code fence)"
    if line.startswith(("--- ", "diff ", "Index: ")):
        return " (this is the Codex patch format, not a unified diff)"
    if "\\n" in line and BEGIN in line:  # a JSON string escaped once too often
        return (" (the patch's lines are joined by the characters '\\n': send it with "
                "real line breaks)")
    return ""


class _Reader:
    """The patch's body, read line by line: one method per part of the grammar."""

    def __init__(self, lines: Numbered) -> None:
        self.lines = lines
        self.at = 0

    def more(self) -> bool:
        return self.at < len(self.lines)

    def peek(self) -> tuple[int, str]:
        return self.lines[self.at]

    def file(self) -> FilePatch:
        number, raw = self.peek()
        line = raw.strip()
        self.at += 1
        for marker, read in ((ADD, self._add), (DELETE, self._delete), (UPDATE, self._update)):
            if line.startswith(marker):
                path = _spelled_path(line, marker)
                if path is None:
                    raise _invalid(number, f"expected '{marker} <path>', found {_shown(raw)}")
                return read(number, _file_path(number, marker, path))
        raise _invalid(number, self._unexpected(line, raw))

    @staticmethod
    def _unexpected(line: str, raw: str) -> str:
        if line == END:
            return f"'{END}' comes before the end of the patch"
        if line == END_OF_FILE:
            return f"'{END_OF_FILE}' must follow the lines of a hunk"
        if line.startswith(MOVE):
            return f"'{MOVE} <path>' must directly follow an '{UPDATE} <path>' line"
        if line.startswith(("*** Rename File:", "*** Move File:")):
            return (f"found {_shown(raw)}: a patch moves a file with '{UPDATE} <path>' and, "
                    f"on the next line, '{MOVE} <path>'")
        return (f"expected '{ADD} <path>', '{UPDATE} <path>', '{DELETE} <path>' or "
                f"'{END}', found {_shown(raw)}")

    def _add(self, number: int, path: str) -> FilePatch:
        content = []
        while self.more() and self.peek()[1].startswith("+"):
            content.append(self.peek()[1][1:])
            self.at += 1
        if self.more() and not self.peek()[1].lstrip().startswith("***"):
            line_number, raw = self.peek()
            raise _invalid(line_number, f"expected a line of the new file {path} starting "
                           f"with '+', or the next '*** ' line, found {_shown(raw)}")
        # no lines: an empty file (__init__.py, .gitkeep), as Codex makes it
        text = "\n".join(content) + "\n" if content else ""
        return FilePatch("add", path, None, (), text, number)

    def _delete(self, number: int, path: str) -> FilePatch:
        return FilePatch("delete", path, None, (), None, number)

    def _update(self, number: int, path: str) -> FilePatch:
        move_to = None
        if self.more() and self.peek()[1].strip().startswith(MOVE):
            move_number, raw = self.peek()
            move_to = raw.strip()[len(MOVE):].strip()
            if not move_to:
                raise _invalid(move_number, f"expected '{MOVE} <path>', found {_shown(raw)}")
            move_to = _file_path(move_number, MOVE, move_to)
            self.at += 1
        hunks: list[Hunk] = []
        while self.more():
            if not self.peek()[1].strip():  # blank lines before a hunk (Codex skips them)
                self.at += 1
                continue
            if self.peek()[1].startswith("*"):
                break
            hunks.append(self._hunk(first=not hunks))
        if not hunks and move_to is None:  # a move alone renames (Codex wants a hunk too)
            raise _invalid(number, f"'{UPDATE} {path}' has no hunk: expected '@@' and lines "
                           "starting with ' ', '-' or '+'")
        return FilePatch("update", path, move_to, tuple(hunks), None, number)

    def _hunk(self, first: bool) -> Hunk:
        start = self.peek()[0]
        anchors = self._anchors()
        if not anchors and self.peek()[0] == start and not first:
            number, raw = self.peek()
            raise _invalid(number, "expected a hunk line starting with ' ', '-' or '+', an "
                           f"'@@' line or a '*** ' line, found {_shown(raw)}")
        lines: list[tuple[str, str]] = []
        end_of_file = False
        while self.more():
            number, raw = self.peek()
            if raw.strip() == END_OF_FILE:
                if not lines:
                    raise _invalid(number, f"'{END_OF_FILE}' must follow the lines of a hunk")
                end_of_file = True
                self.at += 1
                break
            if not raw or raw[0] in " -+":  # an empty line: an empty context line (Codex)
                lines.append((raw[:1] or " ", raw[1:]))
                self.at += 1
                continue
            if not lines:
                raise _invalid(number, "expected a hunk line starting with ' ', '-' or '+', "
                               f"found {_shown(raw)}")
            break
        if not lines:
            raise _invalid(self.lines[self.at - 1][0], "the hunk has no lines: expected lines "
                           "starting with ' ', '-' or '+' after it")
        return Hunk(tuple(anchors), tuple(lines), end_of_file, start)

    def _anchors(self) -> list[str]:
        """The hunk's @@ lines: several in a row narrow the search in turn."""
        anchors = []
        while self.more() and self.peek()[1].startswith("@@"):
            number, raw = self.peek()
            if raw != "@@" and not raw.startswith("@@ "):
                raise _invalid(number, f"expected '@@' or '@@ <a line of the file>', found "
                               f"{_shown(raw)}")
            if _RANGE.match(raw):
                raise _invalid(number, "expected '@@' or '@@ <a line of the file>', found "
                               f"{_shown(raw)}: this format has no line numbers")
            if raw[3:].strip():
                anchors.append(raw[3:])
            self.at += 1
        if self.at and not self.more() and self.lines[self.at - 1][1].startswith("@@"):
            raise _invalid(self.lines[self.at - 1][0], "the hunk has no lines: expected lines "
                           "starting with ' ', '-' or '+' after it")
        return anchors


def _file_path(number: int, marker: str, path: str) -> str:
    """A header's path names a file: one ending in "/" names a directory (an Add
    File made a file of that name; a Move to one is a guess at the new name)."""
    if path.endswith("/"):
        raise _invalid(number, f"{path} ends with '/': '{marker}' takes a file's path, "
                       f"the directory and the file's name ({path}<name>)")
    return path


def _once_each(files: list[FilePatch]) -> None:
    """Each path is named once (as a file's path or a move's target): two changes
    to one file in one patch have no order a reader can be sure of."""
    seen: dict[str, int] = {}
    for patch in files:
        for path in (patch.path, patch.move_to):
            if path is None:
                continue
            key = posixpath.normpath(path)
            if key in seen:
                where = ("as the file it moves" if seen[key] == patch.line
                         else f"also at patch line {seen[key]}")
                raise _invalid(patch.line, f"{path} is named twice ({where}); give each file "
                               "one section")
            seen[key] = patch.line


def apply_hunks(original: str, patch: FilePatch, *, exact: bool = False) -> tuple[str, str]:
    """An update's new text and the loosest level any hunk's old lines needed
    ("exact" | "whitespace" | "indentation" | "unicode").

    Hunks are found in order, each after the previous one; a hunk's @@ lines are
    found in turn (each the first line after the last that equals it, ignoring
    indentation if need be) and the hunk after them. The old lines (" " and "-")
    must lie in the file once after that point, at the first level of the ladder
    that finds them, or, under @@ lines, the first place after them. Context
    lines keep the file's own text, added lines take the file's line ending and,
    at the indentation levels, the shift the old lines had. Bytes outside the
    hunks are unchanged. A miss is no_match naming the closest region; two places
    are ambiguous_match. `exact` turns the ladder off."""
    text = _Text(original)
    edits: list[tuple[int, int, str]] = []
    cursor = text.base
    level = 0
    for hunk in patch.hunks:
        where = f"{patch.path}: patch line {hunk.line}"
        cursors = _after_anchors(text, hunk, cursor, where)
        cursor = cursors[0]
        if any(kind != "+" for kind, _ in hunk.lines):
            span, found = _place(text, hunk, cursors, exact, where)
            level = max(level, matching.LEVELS.index(found))
            cursor = span[1]
        else:  # appended at the end, it leaves later hunks their place (as in Codex)
            span = _insertion(text, hunk, cursor)
        edits.append(span)
    parts, at = [], 0
    for start, end, new in sorted(edits, key=lambda edit: edit[:2]):
        parts += [original[at:start], new]
        at = end
    parts.append(original[at:])
    return "".join(parts), matching.LEVELS[level]


class _Text:
    """The original text, split into lines only when a search needs them (an exact
    hunk in an LF file is found by str.find alone)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.base = 1 if text.startswith("\ufeff") else 0  # a BOM is no part of line 1
        self.empty = len(text) == self.base
        self._lines: matching.Lines | None = None

    @property
    def lines(self) -> matching.Lines:
        if self._lines is None:
            self._lines = matching.Lines.of(self.text)
        return self._lines

    def index(self, at: int) -> int:
        """The index of the line that starts at `at` (len(lines) at the end)."""
        return bisect.bisect_left(self.lines.starts, at)

    def number(self, at: int) -> int:
        return self.text.count("\n", 0, at) + 1


def _after_anchors(text: _Text, hunk: Hunk, cursor: int, where: str) -> list[int]:
    """Where the hunk's search starts: after the line each @@ line names, in turn;
    then, if the hunk is not found there, at the last @@ line's own line (a model
    may copy the line it named as the hunk's first context line)."""
    cursors = [cursor]
    for anchor in hunk.anchors:
        found = None if text.empty else _anchor_line(text, anchor, cursor)
        if found is None:
            after = f" after line {text.number(cursor) - 1}" if cursor > text.base else ""
            raise CorralError("no_match", f"{where}: the @@ line {_shown(anchor)} is not in "
                              f"the file{after}.{_lesson(text, anchor, 'it')}")
        start, cursor = found
        cursors = [cursor, start]
    return cursors


def _anchor_line(text: _Text, anchor: str, cursor: int) -> tuple[int, int] | None:
    """The span (start, after its ending) of the first line from `cursor` on equal
    to the anchor, as it is, else ignoring the spaces around it, else also
    look-alike characters (Codex's order)."""
    exact = _anchor_exact(text, anchor, cursor)
    if exact is not None:
        return exact
    lines = text.lines
    first = text.index(cursor)
    for normal in (str.strip, matching.normalised):  # as it is: nowhere, seen above
        want = normal(anchor)
        for index in range(first, len(lines)):
            if normal(lines.content(index)) == want:
                return lines.starts[index], lines.end(index)
    return None


def _anchor_exact(text: _Text, anchor: str, cursor: int) -> tuple[int, int] | None:
    """_anchor_line's first rung by str.find: the anchor's text where it is a whole
    line, without splitting the file into lines (a Python loop over 100 KiB of
    lines cost more than the rest of a one-hunk patch)."""
    source = text.text
    # the cursor is at a line's start; later lines are found with the "\n" before
    # them, so a short anchor is not tried in the middle of every line
    at = cursor if source.startswith(anchor, cursor) else _after_newline(source, anchor, cursor)
    while at >= 0:
        end = at + len(anchor)
        if end == len(source):  # the last line, without an ending
            return at, end
        if source.startswith("\r\n", end):
            return at, end + 2
        # a "\r" before "\n" is the line's ending, not part of its text
        if source[end] == "\n" and not anchor.endswith("\r"):
            return at, end + 1
        at = _after_newline(source, anchor, at)
    return None


def _place(
    text: _Text, hunk: Hunk, cursors: list[int], exact: bool, where: str,
) -> tuple[tuple[int, int, str], str]:
    """The span of the original the hunk replaces, its replacement, and the level
    its old lines matched at: searched from each cursor in turn, and again without
    blank context lines at the hunk's end (Codex's retry: they often stand for the
    file's last newline, or for nothing at all). A miss names the first search."""
    variants = [hunk.lines]
    trimmed = _without_trailing_blanks(hunk.lines)
    if trimmed != hunk.lines and any(kind != "+" for kind, _ in trimmed):
        variants.append(trimmed)
    first_miss = None
    for cursor in cursors:
        for lines in variants:
            try:
                return _located(text, lines, hunk, cursor, exact, where)
            except CorralError as error:
                if error.code != "no_match":
                    raise
                first_miss = first_miss or error
    assert first_miss is not None  # there was at least one search
    raise first_miss


def _without_trailing_blanks(lines: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    end = len(lines)
    while end and lines[end - 1] == (" ", ""):
        end -= 1
    return lines[:end]


def _insertion(text: _Text, hunk: Hunk, cursor: int) -> tuple[int, int, str]:
    """A hunk of added lines only: after its @@ lines, else at the end of the file."""
    source = text.text
    at = cursor if hunk.anchors and not hunk.end_of_file else len(source)
    ending = matching.line_ending(source, at)
    block = "".join(line + ending for kind, line in hunk.lines)
    if at == len(source) and not text.empty and not source.endswith("\n"):
        block = ending + block[: -len(ending)]  # the last line still has no ending
    return at, at, block


def _located(
    text: _Text, lines: tuple[tuple[str, str], ...], hunk: Hunk, cursor: int, exact: bool,
    where: str,
) -> tuple[tuple[int, int, str], str]:
    old = [line for kind, line in lines if kind != "+"]
    added = [line for kind, line in lines if kind == "+"]
    first_only = bool(hunk.anchors)  # under @@ lines the nearest place is the one meant
    spans = [] if text.empty else _exact(text, old, cursor, hunk.end_of_file)
    level = "exact"
    if spans:
        window = [(start, end, added) for start, end in spans]
    elif text.empty:
        raise CorralError("no_match", f"{where}: the hunk's lines are not in the file: it "
                          "is empty.")
    else:
        found = matching.tolerant_lines(text.lines, old, "\n".join(added),
                                        first=_first(text, old, cursor, hunk.end_of_file))
        if found is None or exact:
            raise _miss(text, old, cursor, hunk, found, where)
        level, tolerant = found
        window = [(span.start, span.end, _split(span.new, len(added))) for span in tolerant]
    if len(window) > 1 and not first_only:
        raise _ambiguous(text, [start for start, _, _ in window], level, where)
    start, end, new_lines = window[0]
    return (start, end, _rebuild(text.text, start, end, lines, new_lines)), level


def _first(text: _Text, old: list[str], cursor: int, end_of_file: bool) -> int:
    """The first line index a window of `old` may start at."""
    first = text.index(cursor)
    if end_of_file:
        return max(first, len(text.lines) - len(old))  # beyond the end: no window fits
    return first


def _split(new: str, count: int) -> list[str]:
    """matching's reindented replacement back into lines (it joined them)."""
    if not count:
        return []
    return [line.rstrip("\r") for line in new.split("\n")]


def _exact(text: _Text, old: list[str], cursor: int, end_of_file: bool) -> list[tuple[int, int]]:
    """The spans (start, after the last line's ending) where the old lines lie as
    they are, from `cursor` on, at most MAX_WINDOWS + 1 of them: by str.find in a
    file whose lines all end alike (the common case, and the fast one), else line
    by line."""
    source = text.text
    sep = "\n"
    if "\r" in source:
        sep = "\r\n"
        if source.count("\r") != source.count("\r\n") or (
                source.count("\n") != source.count("\r\n")):
            return _exact_lines(text, old, cursor, end_of_file)
    needle = sep.join(old)
    if end_of_file:
        body_end = len(source) - len(sep) if source.endswith(sep) else len(source)
        start = body_end - len(needle)
        if (start >= cursor and source.startswith(needle, start)
                and (start == text.base or source[start - 1] == "\n")):
            return [(start, len(source))]
        return []
    spans: list[tuple[int, int]] = []
    # the cursor is at a line's start; every later candidate is found with the "\n"
    # before it, so a short needle is not tried in the middle of every line
    at = cursor if source.startswith(needle, cursor) else _after_newline(source, needle, cursor)
    # an empty last line without an ending is no line: "b\n" holds "b" alone
    open_end = bool(old[-1])
    while 0 <= at < len(source) and len(spans) <= matching.MAX_WINDOWS:
        end = at + len(needle)
        if source.startswith(sep, end) or (end == len(source) and open_end):
            spans.append((at, min(end + len(sep), len(source))))
        at = _after_newline(source, needle, at)
    return spans


def _after_newline(source: str, needle: str, after: int) -> int:
    """The start of the next line after `after` that begins with needle, or -1."""
    at = source.find("\n" + needle, after)
    return at + 1 if at >= 0 else -1


def _exact_lines(
    text: _Text, old: list[str], cursor: int, end_of_file: bool,
) -> list[tuple[int, int]]:
    """_exact for a file of mixed line endings, on its lines."""
    lines = text.lines
    spans = []
    for index in matching.exact_lines(lines, old, _first(text, old, cursor, end_of_file)):
        if end_of_file and index + len(old) != len(lines):
            continue
        spans.append((lines.starts[index], lines.end(index + len(old) - 1)))
        if len(spans) > matching.MAX_WINDOWS:
            break
    return spans


def _rebuild(
    source: str, start: int, end: int, lines: tuple[tuple[str, str], ...], added: list[str],
) -> str:
    """The hunk's new lines for the window source[start:end]: context lines as the
    file has them, removed ones gone, added ones with the window's line ending."""
    window = _window_lines(source[start:end])
    ending = matching.line_ending(source, start)
    out: list[tuple[str, str]] = []
    found = iter(window)
    new = iter(added)
    for kind, _ in lines:
        if kind == "+":
            out.append((next(new), ending))
        else:
            line = next(found)
            if kind == " ":
                out.append(line)
    # every line but the last needs an ending; the last keeps the window's (none
    # when the window ends a file that has no final newline)
    pieces = [content + (own or ending) for content, own in out[:-1]]
    if out:
        content, own = out[-1]
        pieces.append(content + (own or ending if window[-1][1] else ""))
    return "".join(pieces)


def _window_lines(segment: str) -> list[tuple[str, str]]:
    """(content, ending) of each line of a window of whole lines."""
    pieces = segment.split("\n")
    last = pieces.pop()  # "" after a final "\n", else a last line without an ending
    lines = [(piece[:-1], "\r\n") if piece.endswith("\r") else (piece, "\n") for piece in pieces]
    if last:
        lines.append((last, ""))
    return lines


def _miss(
    text: _Text, old: list[str], cursor: int, hunk: Hunk,
    found: tuple[str, list[matching.Span]] | None, where: str,
) -> CorralError:
    after = " at the end of the file" if hunk.end_of_file else (
        f" after line {text.number(cursor) - 1}" if cursor > text.base else "")
    message = f"{where}: the hunk's ' ' and '-' lines were not found{after}."
    if found is not None:  # exact was asked for
        level, spans = found
        message += (f" They match at line {text.number(spans[0].start)} ignoring "
                    f"{matching.LOOSENED[level]}, which match='exact' does not allow.")
    else:
        message += _above(text, old, cursor, hunk) or _lesson(text, "\n".join(old), "them")
    return CorralError("no_match", message)


def _lesson(text: _Text, old: str, them: str) -> str:
    """Where the file comes closest to `old`, or that nothing in it does: a miss
    always tells the model where to look, or that its idea of the file is wrong."""
    if text.empty:
        return " The file is empty."
    return matching.lesson(text.text, old) or (
        f" No line of the file is like {them}: read the file again and take the lines "
        "from it.")


def _above(text: _Text, old: list[str], cursor: int, hunk: Hunk) -> str:
    """The lesson for hunks out of order: the old lines lie, exactly, above where the
    search began (hunks are found in the file's order, each after the previous)."""
    if cursor <= text.base or hunk.end_of_file:
        return ""
    spans = _exact(text, old, text.base, False)
    if not spans or spans[0][0] >= cursor:
        return ""
    return (f" They are at line {text.number(spans[0][0])}, above the previous hunk or @@ "
            "line: hunks are found in the file's order, so put this one before it.")


def _ambiguous(text: _Text, starts: list[int], level: str, where: str) -> CorralError:
    count = (f"more than {matching.MAX_WINDOWS}" if len(starts) > matching.MAX_WINDOWS
             else str(len(starts)))
    places = ", ".join(str(text.number(start)) for start in starts[:SHOWN_PLACES])
    ignoring = "" if level == "exact" else f" ignoring {matching.LOOSENED[level]}"
    return CorralError(
        "ambiguous_match",
        f"{where}: the hunk's ' ' and '-' lines match {count} places{ignoring} (from lines "
        f"{places}); add context lines, or an '@@ <line>' naming the function or class "
        "it is in.",
    )
