"""read_file and read_multiple_files: paged, numbered, binary-aware reads."""

from __future__ import annotations

import base64
from typing import Any

from corral.errors import CorralError
from corral.fs import content_version
from corral.tools import render
from corral.tools.access import as_given, open_target, opened
from corral.tools.base import (
    BOOLEAN,
    ERROR,
    INTEGER,
    STRING,
    Context,
    Outcome,
    Tool,
    list_of,
    mcp_hints,
    nullable,
    obj,
    path_prop,
    shape,
)
from corral.tools.encodings import decode, utf8_text
from corral.tools.paging import Page, page, split_lines, whole_file_lines
from corral.tools.read_window import read_window
from corral.tools.windows import char_start

HARD_READ_CEILING = 4 * 1024 * 1024  # content per call, whatever the config says: frames stay small
MAX_FILES = 50  # read_multiple_files: paths per call
DEFAULT_LIMIT = 2000  # lines per read: a screenful of context for a model
DEFAULT_MAX_BYTES = 262144

_BMP_HEADER_SIZES = {12, 40, 52, 56, 64, 108, 124}  # DIB header sizes; "BM" alone is too weak


def image_type(data: bytes) -> str | None:
    """The media type of a png/jpeg/gif/webp/bmp image, from its magic bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    if (
        data.startswith(b"BM")
        and len(data) >= 26
        and int.from_bytes(data[14:18], "little") in _BMP_HEADER_SIZES
    ):
        return "image/bmp"
    return None


def is_binary(data: bytes) -> bool:
    """NUL bytes near the start, or not valid UTF-8 (reading it as text would lose bytes)."""
    return utf8_text(data) is None


def _byte_offset(args: dict[str, Any], lines: list[bytes]) -> int:
    """The checked byte_offset: inside line `offset`, text: on a character start."""
    skip = args.get("byte_offset", 0)  # read_multiple_files has no byte_offset
    if not skip:
        return 0
    offset = args["offset"]
    number = max(1, len(lines) + offset + 1) if offset < 0 else offset
    line = lines[number - 1] if number <= len(lines) else b""
    if skip >= len(line):
        raise CorralError(
            "invalid_arguments",
            f"argument 'byte_offset' ({skip}) must be less than the {len(line)} bytes "
            f"of line {number}.",
        )
    if args["encoding"] == "utf-8" and char_start(line, skip) != skip:
        raise CorralError(
            "invalid_arguments",
            f"argument 'byte_offset' ({skip}) falls inside a character of line {number}; "
            "pass the next_byte_offset a read returned.",
        )
    return skip


def read_one(ctx: Context, args: dict[str, Any], budget: int) -> Outcome:
    """One read_file call with `budget` bytes of content at most."""
    path = args["path"]
    if args["offset"] == 0:
        raise CorralError(
            "invalid_arguments", "argument 'offset' must not be 0 (lines start at 1)."
        )
    root, rel, check = open_target(ctx, path, write=False)
    with opened(ctx, root, rel, check) as (fd, st):
        if st.st_size > ctx.limits.max_file_bytes:  # read in a window, never whole
            return read_window(path, fd, st, args, budget)
        data = file = root.read_whole(fd, rel, ctx.limits.max_file_bytes)
    version = content_version(data)
    whole_text = None
    shown_encoding = args["encoding"]
    if args["encoding"] == "utf-8":
        media_type = image_type(data)
        if media_type is not None:
            return _image(path, data, media_type, version, budget)
        whole_text = utf8_text(data)
        if whole_text is None:
            decoded = decode(data, ctx.policy.fallback_encodings)
            if decoded is None:
                raise CorralError(
                    "binary_file", f"{path} is a binary file; read it with encoding='base64'."
                )
            # paged as its UTF-8 text: line numbers and byte offsets count that text
            whole_text, shown_encoding = decoded.text, decoded.encoding
            data = whole_text.encode("utf-8", "surrogatepass")
    total = whole_file_lines(data, args, budget) if whole_text is not None else None
    if total is not None:  # the common read of a whole file: never split into lines
        chosen, skip, raw = Page(1, total, None), 0, data
    else:
        lines = split_lines(data)
        total = len(lines)
        if args["encoding"] == "base64":
            budget = budget // 4 * 3  # the base64 text is what must fit the budget
        skip = _byte_offset(args, lines)
        chosen, raw = page(
            lines, args["offset"], args["limit"], budget, text=args["encoding"] == "utf-8",
            skip=skip,
        )
    # A line cut by the budget: its rest is read with offset=start_line and this
    # byte_offset; next_offset still names the next whole line, so a pager that
    # knows only next_offset moves on instead of looping on the cut line.
    next_byte = skip + len(raw) if chosen.cut_from is not None else None
    result = {
        "path": path,
        "content": (
            base64.b64encode(raw).decode("ascii")
            if args["encoding"] == "base64"
            else whole_text if raw is data and whole_text is not None
            else raw.decode("utf-8", "ignore")  # "ignore" only drops a char split by a cut
        ),
        "encoding": shown_encoding,
        "total_lines": total,
        "start_line": chosen.start,
        "lines_read": chosen.lines,
        "truncated": chosen.next_offset is not None or next_byte is not None,
        "next_offset": chosen.next_offset,
        "size": len(file),
        "version": version,
    }
    if next_byte is not None:
        result["next_byte_offset"] = next_byte
    if args["encoding"] == "base64":
        text = (
            f"{path}: {render.size_text(len(raw))} of {render.size_text(len(data))} "
            "as base64 in result.content"
        )
        if chosen.next_offset is not None:
            text += f"; continue with offset={chosen.next_offset}"
    else:
        shown = result["content"].split("\n")  # the lines, decoded once
        if len(shown) > chosen.lines:  # the content ended with a newline
            shown.pop()
        text = render.read_text(path, shown, chosen.start, total, chosen.next_offset,
                                bare="\r" not in result["content"])
    if skip:
        text += f"\n[line {chosen.start} shown from byte {skip}]"
    if next_byte is not None and chosen.cut_from is not None:
        text += (
            f"\n[line {chosen.start} was cut at {next_byte} of {skip + chosen.cut_from} bytes; "
            f"read the rest with offset={chosen.start}, byte_offset={next_byte}]"
        )
    return Outcome(result, text, len(raw))


def _image(path: str, data: bytes, media_type: str, version: str, budget: int) -> Outcome:
    if len(data) > budget:
        raise CorralError(
            "too_large",
            f"{path} is an image of {len(data)} bytes, over the read limit of {budget} bytes.",
        )
    result = {
        "path": path,
        "size": len(data),
        "version": version,
        "image": {"media_type": media_type, "data": base64.b64encode(data).decode("ascii")},
    }
    text = f"[image {path}: {media_type}, {render.size_text(len(data))}]"
    return Outcome(result, text, len(data))


def read_budget(ctx: Context, max_bytes: int) -> int:
    return min(max_bytes, ctx.limits.max_read_bytes, HARD_READ_CEILING)


def read_file(ctx: Context, args: dict[str, Any]) -> Outcome:
    return read_one(ctx, args, read_budget(ctx, args["max_bytes"]))


def read_multiple_files(ctx: Context, args: dict[str, Any]) -> Outcome:
    """One budget for the whole call (max_bytes, as for one read): each file gets
    what the files before it left; once a file is cut by it, later files fail
    too_large."""
    files: list[dict[str, Any]] = []
    texts: list[str] = []
    budget = read_budget(ctx, args["max_bytes"])
    spent = raw = 0
    for path in args["paths"]:
        one = {**args, "path": path, "encoding": "utf-8"}
        del one["paths"]
        try:
            if spent >= budget:
                raise CorralError(
                    "too_large",
                    f"{path} was not read: the files before it used this call's budget of "
                    f"{budget} bytes; read it on its own or with a larger max_bytes.",
                )
            outcome = read_one(ctx, one, budget - spent)
        except CorralError as failure:
            error = as_given(ctx, failure)
            files.append({"ok": False, "path": path, "error": error.to_dict()})
            texts.append(f"==> {path} <==\n{render.error_line(error.code, error.message)}")
            continue
        spent += _returned(outcome.result)
        if outcome.result.get("truncated") and outcome.result["lines_read"] < one["limit"]:
            spent = budget  # the budget stopped it: what is left does not hold its next line
        raw += outcome.bytes
        files.append({"ok": True, **outcome.result})
        texts.append(f"==> {path} <==\n{outcome.text}")
    return Outcome({"files": files}, "\n\n".join(texts), raw)


def _returned(result: dict[str, Any]) -> int:
    """What one read took of the budget, measured as page() measures it."""
    if "image" in result:
        return len(result["image"]["data"]) // 4 * 3  # the raw bytes _image checked
    return render.encoded_size(result["content"].encode("utf-8"))


_PAGING = {
    "offset": {
        "type": "integer",
        "default": 1,
        "description": "First line to read, 1-based; negative counts from the end (-20: last 20).",
    },
    "limit": {"type": "integer", "minimum": 1, "default": DEFAULT_LIMIT,
              "description": "Most lines to return."},
    "max_bytes": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_BYTES,
                  "description": "Most bytes of content to return (also capped by the sandbox)."},
}

_READ_RESULT = {
    "path": STRING,
    "content": STRING,
    # "base64", "utf-8", or the file's own encoding when it is not UTF-8 (the content
    # is text all the same): "utf-16-le", "cp1252", ...
    "encoding": STRING,
    # null in a window of a file over max_file_bytes where they are not counted;
    # start_line is negative in a window counted from the end
    "total_lines": nullable(INTEGER),
    "start_line": nullable(INTEGER),
    "lines_read": INTEGER,
    "truncated": BOOLEAN,
    "next_offset": nullable(INTEGER),
    "next_byte_offset": INTEGER,
    "size": INTEGER,
    "version": STRING,
    "start_byte": INTEGER,  # only in a window of a file over max_file_bytes (no version then)
    "image": shape({"media_type": STRING, "data": STRING}),
}
# An image comes back as path, size, version and image; text as every other key.
_READ_ALWAYS = ("path", "size")
_READ_SOMETIMES = tuple(key for key in _READ_RESULT if key not in _READ_ALWAYS)
READ_RESULT = shape(_READ_RESULT, optional=_READ_SOMETIMES)
ONE_OF_MANY = shape({"ok": BOOLEAN, **_READ_RESULT, "error": ERROR},
                    optional=(*_READ_SOMETIMES, "size", "error"))

READ_TOOLS = [
    Tool(
        name="read_file",
        title="Read file",
        description=(
            "Read a file from the workspace. Text comes back with cat -n style line numbers "
            "in the text (the raw content is in result.content); use offset and limit to page "
            "through large files, a negative offset reads the end like tail. When truncated is "
            "true, call again with offset=next_offset; a line longer than max_bytes comes back "
            "cut, with next_byte_offset: read its rest with offset=start_line and "
            "byte_offset=next_byte_offset. Images (png, jpeg, gif, webp, bmp) come "
            "back as an image; UTF-16/UTF-32 files and the workspace's legacy encodings come "
            "back as text, result.encoding naming the file's encoding; other binary files "
            "fail unless encoding is 'base64'. The result "
            "carries a version you can pass to write_file or edit_file as expected_version. "
            "A file too large to read whole (a big log or dump) is read one window at a "
            "time: offset=N counts lines from its start (slower the further in), a negative "
            "offset reads its end at once, byte_offset alone jumps to that byte; its result "
            "has start_byte and no version."
        ),
        input_schema=obj(
            {
                "path": path_prop("File to read"),
                **_PAGING,
                "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8",
                             "description": "'base64' returns raw bytes, for binary files."},
                "byte_offset": {"type": "integer", "minimum": 0, "default": 0,
                                "description": "Bytes to skip in line `offset`: pass the "
                                "next_byte_offset of a read that cut that line. In a file "
                                "too large to read whole, with offset 1: the byte to start "
                                "at."},
            },
            ("path",),
        ),
        output_schema=READ_RESULT,
        annotations=mcp_hints(read_only=True, destructive=False, idempotent=True),
        writes=False,
        run=read_file,
    ),
    Tool(
        name="read_multiple_files",
        title="Read several files",
        description=(
            f"Read up to {MAX_FILES} files in one call, each like read_file with the same "
            "offset, limit and max_bytes. Each file succeeds or fails on its own: one missing "
            "file does not fail the others. Prefer this over many read_file calls when you "
            "already know which files you need."
        ),
        input_schema=obj(
            {
                "paths": {"type": "array", "minItems": 1, "maxItems": MAX_FILES,
                          "items": path_prop("File to read"),
                          "description": "Files to read."},
                **_PAGING,
            },
            ("paths",),
        ),
        output_schema=shape({"files": list_of(ONE_OF_MANY)}),
        annotations=mcp_hints(read_only=True, destructive=False, idempotent=True),
        writes=False,
        run=read_multiple_files,
    ),
]
