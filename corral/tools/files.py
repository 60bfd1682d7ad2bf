"""create_directory, stat_file, move_file, copy_file, delete_file."""

from __future__ import annotations

import time
from typing import Any

from corral.errors import CorralError
from corral.fs import CrossFilesystem, FileInfo, MoveGuard
from corral.tools import render
from corral.tools.access import content, moved, open_target
from corral.tools.base import (
    BOOLEAN,
    INTEGER,
    NUMBER,
    STRING,
    Context,
    Outcome,
    Tool,
    mcp_hints,
    nullable,
    obj,
    path_prop,
    shape,
)


def create_directory(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    root, rel, check = open_target(ctx, path, write=True)
    created = root.mkdir(rel, parents=True, guard=check, keep=ctx.keep)
    text = f"Created directory {path}." if created else f"Directory {path} already exists."
    return Outcome({"path": path, "created": created}, text)


def _when(timestamp: float) -> str:
    # time, not datetime: the same ISO 8601 text without a module the zygote must import
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(timestamp))


def stat_file(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    root, rel, check = open_target(ctx, path, write=False)
    try:
        # one resolution: the version is hashed from the file the lstat saw (None
        # when it is over max_file_bytes, or was swapped for something else meanwhile)
        info = root.info(
            rel, follow=False, guard=check, version_limit=ctx.limits.max_file_bytes
        )
    except CorralError as error:
        if error.code != "not_found":  # a missing parent is just as missing
            raise
        info = None
    if info is None:
        missing = dict.fromkeys(("type", "size", "modified", "mode", "version"))
        return Outcome({"path": path, "exists": False, **missing}, f"{path} does not exist.")
    version = info.version
    result: dict[str, Any] = {
        "path": path,
        "exists": True,
        "type": info.type,
        "size": info.size,
        "modified": info.modified,
        "mode": info.mode,
        "version": version,
    }
    if info.symlink_target is not None:
        result["symlink_target"] = info.symlink_target
    return Outcome(result, _stat_text(path, info, version))


def _stat_text(path: str, info: FileInfo, version: str | None) -> str:
    parts = [f"{path}: {info.type}", render.size_text(info.size), f"mode {info.mode:04o}",
             f"modified {_when(info.modified)}"]
    if info.symlink_target is not None:
        parts.append(f"-> {info.symlink_target}")
    if version is not None:
        parts.append(f"version {version}")
    return ", ".join(parts)


def move_file(ctx: Context, args: dict[str, Any]) -> Outcome:
    source, destination = args["source"], args["destination"]
    src_root, src_rel, src_check = open_target(ctx, source, write=True)
    dst_root, dst_rel, dst_check = open_target(ctx, destination, write=True)
    try:
        src_root.rename(
            src_rel, dst_root, dst_rel, overwrite=args["overwrite"],
            guard=MoveGuard(src_check, dst_check, moved(ctx, src_root, dst_root)), keep=ctx.keep,
        )
    except CrossFilesystem as cross:
        # rename(2) cannot cross file systems (an allowed root may lie on another
        # one); a regular file is copied there, then removed here, as mv(1) does.
        info = src_root.info(src_rel, follow=False, guard=src_check)
        if info is None or info.type != "file":
            raise cross from None
        data = src_root.read_bytes(
            src_rel, max_file_bytes=ctx.limits.max_file_bytes, guard=src_check
        )
        # one move to undo, as a rename is
        with ctx.keep.together():
            dst_root.write_atomic(
                dst_rel, data, exclusive=not args["overwrite"], make_parents=False,
                mode=info.mode, guard=dst_check, keep=ctx.keep,
            )
            src_root.unlink(src_rel, guard=src_check, keep=ctx.keep)
    result = {"source": source, "destination": destination}
    return Outcome(result, f"Moved {source} to {destination}.")


def copy_file(ctx: Context, args: dict[str, Any]) -> Outcome:
    source, destination = args["source"], args["destination"]
    src_root, src_rel, src_check = open_target(ctx, source, write=False)
    dst_root, dst_rel, dst_check = open_target(ctx, destination, write=True)
    data = content(ctx, src_root, src_rel, src_check)
    # The copy keeps the source's permission bits (a copied script stays executable).
    info = src_root.info(src_rel, follow=True, guard=src_check)
    dst_root.write_atomic(
        dst_rel, data, exclusive=not args["overwrite"], mode=info.mode if info else None,
        guard=dst_check, keep=ctx.keep,
    )
    result = {"source": source, "destination": destination, "bytes_copied": len(data)}
    text = f"Copied {source} to {destination} ({render.size_text(len(data))})."
    return Outcome(result, text, len(data))


def delete_file(ctx: Context, args: dict[str, Any]) -> Outcome:
    path = args["path"]
    root, rel, check = open_target(ctx, path, write=True)
    root.unlink(rel, guard=check, keep=ctx.keep)
    return Outcome({"path": path, "deleted": True}, f"Deleted {path}.")


_OVERWRITE = {"type": "boolean", "default": False,
              "description": "Replace the destination if it exists (otherwise: already_exists)."}

TYPES = {"type": "string", "enum": ["file", "dir", "symlink", "other"]}
# A missing path: exists=false and every other key null.
STAT_RESULT = shape(
    {"path": STRING, "exists": BOOLEAN, "type": nullable(TYPES), "size": nullable(INTEGER),
     "modified": nullable(NUMBER), "mode": nullable(INTEGER), "version": nullable(STRING),
     "symlink_target": STRING},
    optional=("symlink_target",),
)

FILE_TOOLS = [
    Tool(
        name="create_directory",
        title="Create directory",
        description=(
            "Create a directory, including any missing parent directories. Succeeds with "
            "created=false if the directory already exists; fails with already_exists if "
            "a file is in the way. write_file creates parents by itself, so this is only "
            "needed for empty directories."
        ),
        input_schema=obj({"path": path_prop("Directory to create")}, ("path",)),
        output_schema=shape({"path": STRING, "created": BOOLEAN}),
        annotations=mcp_hints(read_only=False, destructive=False, idempotent=True),
        writes=True,
        run=create_directory,
    ),
    Tool(
        name="stat_file",
        title="File info",
        description=(
            "Check whether a path exists and what it is: type (file, dir, symlink, other), "
            "size, modification time, permission mode, the content version of a file and "
            "the target of a symlink (not followed). A missing path is not an error: the "
            "result says exists=false."
        ),
        input_schema=obj({"path": path_prop("Path to inspect")}, ("path",)),
        output_schema=STAT_RESULT,
        annotations=mcp_hints(read_only=True, destructive=False, idempotent=True),
        writes=False,
        run=stat_file,
    ),
    Tool(
        name="move_file",
        title="Move file",
        description=(
            "Move or rename a file or directory. Fails with already_exists if the "
            "destination exists, unless overwrite is true. A directory cannot be moved "
            "into itself, nor moved at all if the policy denies any entry beneath it. "
            "Parent directories of the destination must exist (create_directory makes them). "
            "A file moved to another file system is copied there, then deleted here; a "
            "directory cannot be moved across file systems."
        ),
        input_schema=obj(
            {
                "source": path_prop("Path to move"),
                "destination": path_prop("New path"),
                "overwrite": _OVERWRITE,
            },
            ("source", "destination"),
        ),
        output_schema=shape({"source": STRING, "destination": STRING}),
        annotations=mcp_hints(read_only=False, destructive=True, idempotent=False),
        writes=True,
        run=move_file,
    ),
    Tool(
        name="copy_file",
        title="Copy file",
        description=(
            "Copy one regular file to a new path; the copy is written atomically, keeps "
            "the source's permissions, and missing parent directories are created. Fails "
            "with already_exists if the destination exists, unless overwrite is true. "
            "Directories are not copied."
        ),
        input_schema=obj(
            {
                "source": path_prop("File to copy"),
                "destination": path_prop("Path of the copy"),
                "overwrite": _OVERWRITE,
            },
            ("source", "destination"),
        ),
        output_schema=shape({"source": STRING, "destination": STRING, "bytes_copied": INTEGER}),
        annotations=mcp_hints(read_only=False, destructive=True, idempotent=True),
        writes=True,
        run=copy_file,
    ),
    Tool(
        name="delete_file",
        title="Delete file",
        description=(
            "Delete one file or symlink (a symlink is removed, its target is kept). "
            "Directories are never deleted. The deletion cannot be undone, so read or stat "
            "the file first if you are not sure it is the right one."
        ),
        input_schema=obj({"path": path_prop("File to delete")}, ("path",)),
        output_schema=shape({"path": STRING, "deleted": BOOLEAN}),
        annotations=mcp_hints(read_only=False, destructive=True, idempotent=True),
        writes=True,
        run=delete_file,
    ),
]
