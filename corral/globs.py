"""Globs as regexes: the one glob language of policy rules and search_files.

`*` and `?` stay within one path component, `[...]` is a class (`[!...]` negated),
`**` spans components. Compiled to regexes that cannot backtrack exponentially,
whatever the path (see glob_to_regex).
"""

from __future__ import annotations

import re

from corral.errors import PolicyError


def _translate_class(body: str) -> str:
    negate = body.startswith("!")
    body = body[1:] if negate else body
    inner = "".join("-" if char == "-" else re.escape(char) for char in body)
    return f"[^/{inner}]" if negate else f"[{inner}]"


_STAR = object()  # a "*" among a component's translated pieces


def _component_pieces(component: str) -> list[object]:
    """Regex pieces of one component, one per glob character or class; runs of
    "*" become one _STAR."""
    out: list[object] = []
    i, n = 0, len(component)
    while i < n:
        char = component[i]
        i += 1
        if char == "*":
            if not out or out[-1] is not _STAR:
                out.append(_STAR)
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            start = i + (1 if component[i:i + 1] == "!" else 0)
            start += 1 if component[start:start + 1] == "]" else 0
            end = component.find("]", start)
            if end < 0:  # an unclosed "[" is a literal, as in fnmatch
                out.append(re.escape(char))
                continue
            out.append(_translate_class(component[i:end]))
            i = end + 1
        else:
            out.append(re.escape(char))
    return out


def _translate_component(component: str) -> str:
    """As fnmatch does since 3.9: each "*fixed" followed by another "*" takes the
    first place `fixed` fits, in an atomic group, so "*a*a*a*b" cannot backtrack
    exponentially (the next "*" absorbs whatever a later place would have left)."""
    pieces = _component_pieces(component)
    out: list[str] = []
    i, n = 0, len(pieces)
    while i < n and pieces[i] is not _STAR:
        out.append(str(pieces[i]))
        i += 1
    while i < n:
        i += 1  # the star
        fixed: list[str] = []
        while i < n and pieces[i] is not _STAR:
            fixed.append(str(pieces[i]))
            i += 1
        text = "".join(fixed)
        out.append(f"(?>[^/]*?{text})" if i < n else f"[^/]*{text}")
    return "".join(out)


def glob_to_regex(glob: str) -> str:
    """Regex source (for fullmatch) of one glob; a leading "/" stays a literal "/".

    Linear-ish on any path: "**/**" is "**", and the components between one "**"
    and the next are matched atomically at the first place they fit, a whole
    number of components (the next "**" absorbs what a later place would leave),
    so "**/a/**/a/**/x" cannot backtrack exponentially on a deep path."""
    if not glob or "\0" in glob:
        raise PolicyError(f"invalid glob {glob!r}: it must be a non-empty string without NUL")
    components: list[str] = []
    for component in glob.split("/"):
        if component not in ("", ".") and not (component == "**" and components[-1:] == ["**"]):
            components.append(component)
    if ".." in components:
        raise PolicyError(f"invalid glob {glob!r}: '..' never matches a resolved path")
    out = "/" if glob.startswith("/") else ""
    if components == ["**"]:
        return out + ".*"  # a lone "**" matches everything
    stars = [index for index, component in enumerate(components) if component == "**"]
    first = stars[0] if stars else len(components)
    out += "/".join(_translate_component(c) for c in components[:first])
    for number, star in enumerate(stars):
        if star == len(components) - 1:  # "a/**" also matches "a" itself
            out += "(?:/.*)?"
            break
        after = stars[number + 1] if number + 1 < len(stars) else len(components)
        segment = "/".join(_translate_component(c) for c in components[star + 1:after])
        out += "/" if star == first and star else ""  # after the prefix; a stretch ends in "/"
        if after == len(components):  # the last stretch: nothing after it to absorb
            out += f"(?:.*/)?{segment}"
        elif after == len(components) - 1:  # followed by a final "**": end on a boundary
            out += f"(?>(?:.*?/)??{segment}(?![^/]))"
        else:
            out += f"(?>(?:.*?/)??{segment}/)"
    return out


def compile_globs(globs: list[str], *, flags: int = 0) -> re.Pattern[str] | None:
    """One matcher for several globs; None when there are none."""
    if not globs:
        return None
    source = "|".join(f"(?:{glob_to_regex(glob)})" for glob in globs)
    try:
        return re.compile(source, re.DOTALL | flags)
    except (re.error, RecursionError) as exc:  # a bad class ([z-a]); thousands of classes
        raise PolicyError(f"invalid glob in {', '.join(map(repr, globs))}: {exc}") from None
