"""write_file and append_file."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from corral.errors import CorralError
from corral.fs import Expect, Root
from corral.fs.root import Guard
from corral.tools import render
from corral.tools.access import open_target, require_read, session_key
from corral.tools.base import (
    BOOLEAN,
    INTEGER,
    STRING,
    Context,
    Outcome,
    Tool,
    mcp_hints,
    obj,
    path_prop,
    shape,
)


def utf8(text: str, field: str) -> bytes:
    """JSON strings may hold lone surrogates, which no UTF-8 file can."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise CorralError(
            "invalid_arguments", f"argument '{field}' holds characters UTF-8 cannot encode."
        ) from None


def content_bytes(content: str, encoding: str) -> bytes:
    """The bytes the `content` argument stands for, in its `encoding`."""
    if encoding == "base64":
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise CorralError(
                "invalid_arguments", "argument 'content' is not valid base64."
            ) from None
    return utf8(content, "content")


def payload(ctx: Context, path: str, content: str, encoding: str) -> bytes:
    """The bytes to write, checked against max_write_bytes."""
    data = content_bytes(content, encoding)
    if len(data) > ctx.limits.max_write_bytes:
        raise CorralError(
            "too_large",
            f"content for {path} is {len(data)} bytes, over the write limit of "
            f"{ctx.limits.max_write_bytes} bytes.",
        )
    return data


def write_file(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    data = payload(ctx, path, args["content"], args["encoding"])
    root, rel, check = open_target(ctx, path, write=True)
    expected = args["expected_version"]
    if ctx.policy.read_before_write == "require":
        # the write itself then checks, under its lock, that this version is still there
        checked = require_read(ctx, root, path, _current_version(ctx, root, rel, check))
        expected = checked if expected is None else expected
    outcome = root.write_atomic(
        rel, data, expect=Expect(version=expected),
        max_file_bytes=ctx.limits.max_file_bytes, guard=check, keep=ctx.keep,
    )
    result = {
        "path": path,
        "bytes_written": len(data),
        "created": outcome.created,
        "version": outcome.version,
    }
    verb = "Created" if outcome.created else "Wrote"
    return Outcome(result, f"{verb} {path} ({render.size_text(len(data))}).", len(data))


def append_file(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    data = payload(ctx, path, args["content"], "utf-8")
    root, rel, check = open_target(ctx, path, write=True)
    if ctx.policy.read_before_write == "require":
        require_read(ctx, root, path, _current_version(ctx, root, rel, check))
    size = root.append(
        rel, data, max_file_bytes=ctx.limits.max_file_bytes, guard=check, keep=ctx.keep
    )
    if ctx.policy.read_before_write == "require":  # the session wrote this version itself
        key, version = session_key(ctx, path), _current_version(ctx, root, rel, check)
        if key is not None and version is not None:
            ctx.wrote[key] = version
    result = {"path": path, "bytes_appended": len(data), "size": size}
    text = f"Appended {render.size_text(len(data))} to {path}; it is now {render.size_text(size)}."
    return Outcome(result, text, len(data))


def _current_version(ctx: Context, root: Root, rel: str, check: Guard) -> str | None:
    """The version of the file a write would replace (None: there is none)."""
    try:
        info = root.info(rel, follow=True, guard=check, version_limit=ctx.limits.max_file_bytes)
    except CorralError as error:
        if error.code != "not_found":
            raise
        return None
    if info is None or info.type != "file":
        return None
    if info.version is None:  # over max_file_bytes: it can be neither read nor replaced
        raise CorralError("too_large", f"{rel} is over the {ctx.limits.max_file_bytes} byte limit.")
    return info.version


WRITE_TOOLS = [
    Tool(
        name="write_file",
        title="Write file",
        description=(
            "Create a file or replace its whole content. The write is atomic: readers see "
            "the old or the new file, never a mix. Missing parent directories are created. "
            "To change part of an existing file prefer edit_file. Pass the version from your "
            "last read as expected_version to fail with 'conflict' instead of overwriting a "
            "change someone else made meanwhile; use encoding='base64' for binary content."
        ),
        input_schema=obj(
            {
                "path": path_prop("File to write"),
                "content": {"type": "string", "description": "The complete new content."},
                "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8",
                             "description": "How content is encoded."},
                "expected_version": {
                    "type": "string", "default": None,
                    "description": "Version the file must still have (from a read or stat).",
                },
            },
            ("path", "content"),
        ),
        output_schema=shape({"path": STRING, "bytes_written": INTEGER, "created": BOOLEAN,
                             "version": STRING}),
        annotations=mcp_hints(read_only=False, destructive=True, idempotent=True),
        writes=True,
        run=write_file,
    ),
    Tool(
        name="append_file",
        title="Append to file",
        description=(
            "Append text to the end of a file, creating it (and its parent directories) if "
            "it does not exist. The text is added in one write, so concurrent appends never "
            "interleave; add a trailing newline yourself if you want one. Good for logs and "
            "notes; to change existing text use edit_file."
        ),
        input_schema=obj(
            {
                "path": path_prop("File to append to"),
                "content": {"type": "string", "description": "Text to add at the end."},
            },
            ("path", "content"),
        ),
        output_schema=shape({"path": STRING, "bytes_appended": INTEGER, "size": INTEGER}),
        annotations=mcp_hints(read_only=False, destructive=False, idempotent=False),
        writes=True,
        run=append_file,
    ),
]
