"""What git would ignore beneath a Root: `.gitignore` and `.ignore` files (nested:
a deeper file overrides its parents, `.ignore` overrides `.gitignore` beside it),
`.git/info/exclude`, `[workspace] ignore`, and `.git` itself. The files are read
through the Root inside the worker, and only those the policy allows.

Patterns are translated here, as git's dir.c and wildmatch.c read them, not by
pathspec: on the generated cases of scripts/ignore_agreement.py (300 cases, seed
1), pathspec 1.1.1's GitIgnoreSpec disagreed with `git check-ignore` in 19 (e.g.
`**/x.*/**` ignores a file named x.log there, not in git), and its regexes, built
to answer whether a path lies in an ignored tree, cannot say whether git matches
the path itself, which a walk that never enters an ignored directory needs. This
translation agrees with git on every case.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from corral.errors import CorralError
from corral.fs import Root

IGNORE_FILES = (".gitignore", ".ignore")  # in this order: the later one overrides
EXCLUDE_FILE = ".git/info/exclude"
# A larger ignore file is passed by (git itself passes by those over 100 MiB): its
# patterns would cost the walk more than the listing it narrows.
MAX_IGNORE_BYTES = 1024 * 1024


class Rule(NamedTuple):
    regex: re.Pattern[str]
    ignores: bool  # False: a negation ("!x") that re-includes
    dir_only: bool  # a trailing "/": matches directories only
    anchored: bool  # a "/" before the end: matched against the path from the file's
    # directory; without one, against the name alone, at any depth


Rules = tuple[Rule, ...]  # last line first: the last matching line decides

_CLASSES = {  # wildmatch's [:name:] classes, as regex class contents
    "alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"), "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z", "xdigit": "0-9a-fA-F",
}
_NEVER = "(?!)"  # what a malformed pattern matches: nothing, as wildmatch aborts


def trim_trailing_spaces(line: str) -> str:
    """git's trim_trailing_spaces: trailing spaces go unless escaped with "\\"."""
    last_space = None
    index = 0
    while index < len(line):
        char = line[index]
        if char == " ":
            if last_space is None:
                last_space = index
        else:
            if char == "\\":
                index += 1
                if index == len(line):
                    return line
            last_space = None
        index += 1
    return line if last_space is None else line[:last_space]


def parse(line: str) -> Rule | None:
    """One line of an ignore file as git reads it; None: blank or a comment."""
    line = trim_trailing_spaces(line)
    if not line or line.startswith("#"):
        return None
    ignores = not line.startswith("!")
    if not ignores:
        line = line[1:]
    dir_only = line.endswith("/")
    if dir_only:
        line = line[:-1]
    if not line:
        return None
    anchored = "/" in line
    return Rule(re.compile(glob(line.removeprefix("/")), re.DOTALL), ignores, dir_only,
                anchored)


def glob(pattern: str) -> str:
    """wildmatch with WM_PATHNAME as a regex: `*`, `?` and classes never match "/";
    `**` as a whole component spans directories."""
    out: list[str] = []
    index, size = 0, len(pattern)
    while index < size:
        char = pattern[index]
        if char == "*":
            start = index
            while index < size and pattern[index] == "*":
                index += 1
            whole = (start == 0 or pattern[start - 1] == "/") and (
                index == size or pattern[index] == "/")
            if index - start >= 2 and whole:
                if index == size:
                    out.append(".*")  # "a/**": everything inside a
                else:
                    out.append("(?:.*/)?")  # "**/": any number of directories, even none
                    index += 1
            else:
                out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
            index += 1
        elif char == "[":
            found = _bracket(pattern, index)
            if found is None:
                return _NEVER
            text, index = found
            out.append(text)
        elif char == "\\":
            if index + 1 == size:
                return _NEVER  # a pattern ending in a lone backslash matches nothing
            out.append(re.escape(pattern[index + 1]))
            index += 2
        else:
            out.append(re.escape(char))
            index += 1
    return "".join(out)


def _bracket(pattern: str, index: int) -> tuple[str, int] | None:
    """The class starting at pattern[index] == "[" and the index after it; None:
    unterminated or malformed (wildmatch then matches nothing)."""
    index += 1
    negated = index < len(pattern) and pattern[index] in "!^"
    if negated:
        index += 1
    items: list[str] = []
    first = True
    while True:
        if index >= len(pattern):
            return None
        char = pattern[index]
        if char == "]" and not first:
            break
        first = False
        if char == "[" and pattern.startswith("[:", index):
            end = pattern.find(":]", index + 2)
            if end < 0:
                return None
            name = pattern[index + 2:end]
            if name not in _CLASSES:
                return None
            items.append(_CLASSES[name])
            index = end + 2
            continue
        low, index = _class_char(pattern, index)
        if low is None:
            return None
        if index + 1 < len(pattern) and pattern[index] == "-" and pattern[index + 1] != "]":
            high, index = _class_char(pattern, index + 1)
            if high is None:
                return None
            if low <= high:  # a reversed range matches nothing
                items.append(f"{re.escape(low)}-{re.escape(high)}")
        else:
            items.append(re.escape(low))
    index += 1
    body = "".join(items)
    if negated:
        return f"[^/{body}]", index
    return (f"(?!/)[{body}]" if body else _NEVER), index


def _class_char(pattern: str, index: int) -> tuple[str | None, int]:
    if pattern[index] == "\\":
        if index + 1 >= len(pattern):
            return None, index
        return pattern[index + 1], index + 2
    return pattern[index], index + 1


def compile_lines(lines: list[str]) -> Rules:
    return tuple(reversed([rule for rule in map(parse, lines) if rule is not None]))


def decide(rules: Rules, rel: str, is_dir: bool) -> bool | None:
    """For a path relative to the rules' directory: True ignored, False re-included
    by a negation, None no line matches."""
    name = rel.rpartition("/")[2]
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.regex.fullmatch(rel if rule.anchored else name):
            return rule.ignores
    return None


def split_lines(data: bytes) -> list[str]:
    """An ignore file's lines as git splits them: on "\\n" only, a "\\r" before it
    dropped, a UTF-8 byte order mark at the start skipped."""
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape")
    return [line.removesuffix("\r") for line in text.split("\n")]


class Ignores:
    """Answers `ignored(path, is_dir)` for root-relative paths whose parents are not
    ignored (a walk does not enter an ignored directory), loading each directory's
    ignore files the first time a path beneath it is asked about; `skipped` counts
    the entries a listing left out because of it."""

    def __init__(self, root: Root, readable: Callable[[str], bool], extra: tuple[str, ...]
                 ) -> None:
        self._root = root
        self._readable = readable
        # directory -> whether it holds an ignore file, as a walk read its names: the
        # others are not looked for (two failed opens per directory cost a listing of a
        # tree without ignore files as much again as the walk itself)
        self._holds: dict[str, bool] = {}
        self._chains: dict[str, tuple[tuple[int, Rules], ...]] = {}
        # lowest precedence, as git's core.excludesFile: a repository's "!x" wins
        self._base = compile_lines([*extra, *self._lines(EXCLUDE_FILE)])
        self.skipped = 0

    def entered(self, directory: str, names: list[str]) -> None:
        """A walk read `directory`'s names (root-relative, "" the root)."""
        self._holds[directory] = any(name in names for name in IGNORE_FILES)

    def ignored(self, path: str, is_dir: bool) -> bool:
        parent, _, name = path.rpartition("/")
        if name == ".git":
            return True
        chain = self._chains.get(parent)  # asked per entry: the cached chain at once
        for start, rules in self._chain(parent) if chain is None else chain:
            verdict = decide(rules, path[start:], is_dir)  # the deepest directory first
            if verdict is not None:
                return verdict
        return bool(self._base) and decide(self._base, path, is_dir) is True

    def _chain(self, directory: str) -> tuple[tuple[int, Rules], ...]:
        """(where paths beneath it start, its rules) for `directory` and each parent
        with ignore files, deepest first."""
        chain = self._chains.get(directory)
        if chain is None:
            above = self._chain(directory.rpartition("/")[0]) if directory else ()
            own = self._own(directory)
            start = len(directory) + 1 if directory else 0
            chain = ((start, own), *above) if own else above
            self._chains[directory] = chain
        return chain

    def _own(self, directory: str) -> Rules:
        if not self._holds.get(directory, True):
            return ()
        prefix = f"{directory}/" if directory else ""
        return compile_lines([line for name in IGNORE_FILES for line in self._lines(prefix + name)])

    def _lines(self, rel: str) -> list[str]:
        """The lines of an ignore file, or none: missing, unreadable, too large, or a
        path the policy hides from this call."""
        def visible(resolved: str) -> None:
            if not self._readable(resolved):
                raise CorralError("path_denied", "hidden by policy")

        try:
            data = self._root.read_bytes(rel, max_file_bytes=MAX_IGNORE_BYTES, guard=visible)
        except (CorralError, OSError):
            return []
        return split_lines(data)
