"""corral as a LangChain Deep Agents backend: `create_deep_agent(model,
backend=CorralBackend(sb))`. Every method of the BackendProtocol is one confined
corral call; a corral failure is the method's error result, carrying corral's
one-line message (and, for uploads and downloads, the protocol's error code).

Paths are virtual, as FilesystemBackend's `virtual_mode` makes them: "/" is the
sandbox's workspace, "/src/app.py" its src/app.py; `..` and symlinks are
corral's to confine. That is what CompositeBackend routes to (it strips its
route's prefix), so `CompositeBackend(default, routes={"/workspace/": backend})`
works.

Differences from FilesystemBackend, by the protocol's contract:
- `read` returns raw content, as the protocol wants; Deep Agents' middleware
  writes what the model reads. Images come back base64 (`encoding: "base64"`),
  as the protocol's FileData allows.
- `grep` searches literally (the protocol's contract), through corral's grep.
- `delete` is corral's delete_file, off unless the policy enables it.
- `glob` returns regular files: not a symlink, which corral does not follow.

Undo and checkpoints are the sandbox's history, offered on the backend as
langchain-nono offers its snapshots: `checkpoint(label)`, `rewind(id)`,
`undo(path)` and `history(path)`, taking the backend's own paths. The protocol
has no place for them in the model's tools: the host calls them (between runs,
or from a tool of its own)."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from typing import Any

from deepagents.backends.protocol import (
    FILE_NOT_FOUND,
    INVALID_PATH,
    IS_DIRECTORY,
    PERMISSION_DENIED,
    BackendProtocol,
    DeleteResult,
    EditResult,
    FileData,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)

from corral.integrations._common import AnySandbox, blocking, model_text

# corral's error codes as the protocol's FileOperationError (uploads, downloads);
# any other code is passed on as corral's message.
_FILE_ERRORS = {
    "not_found": FILE_NOT_FOUND, "path_denied": PERMISSION_DENIED,
    "outside_workspace": PERMISSION_DENIED, "read_only": PERMISSION_DENIED,
    "tool_disabled": PERMISSION_DENIED, "approval_denied": PERMISSION_DENIED,
    "approval_required": PERMISSION_DENIED, "is_a_directory": IS_DIRECTORY,
    "invalid_arguments": INVALID_PATH, "not_a_directory": INVALID_PATH,
    "not_a_regular_file": INVALID_PATH, "symlink_loop": INVALID_PATH,
}
# Most matches a glob or grep asks corral for when the caller sets no bound: corral's
# own ceiling for grep, and the listing's largest page for search_files.
GREP_MAX = 5000
GLOB_MAX = 10000


class CorralBackend(BackendProtocol):
    """A Deep Agents backend whose every file operation is a confined corral call."""

    def __init__(self, sandbox: AnySandbox) -> None:
        self.sandbox = blocking(sandbox)

    def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.sandbox.call(tool, arguments)

    def ls(self, path: str) -> LsResult:
        result = self._call("list_directory", {"path": _rel(path)})
        if not result["ok"]:
            return LsResult(error=model_text(result))
        base = _rel(path)
        return LsResult(entries=[
            _info(entry["name"] if base == "." else f"{base}/{entry['name']}", entry)
            for entry in result["result"]["entries"]])

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        if limit <= 0:
            return ReadResult(file_data={"content": "", "encoding": "utf-8"},
                              no_lines_requested=True)
        result = self._call("read_file", {"path": _rel(file_path), "offset": max(offset, 0) + 1,
                                          "limit": limit})
        if not result["ok"]:
            return ReadResult(error=model_text(result))
        read = result["result"]
        if "image" in read:
            return ReadResult(file_data={"content": read["image"]["data"],
                                         "encoding": "base64"})
        # text in any encoding comes back decoded: to the protocol that is "utf-8"
        data: FileData = {"content": read["content"], "encoding": "utf-8"}
        if not read.get("lines_read"):
            if read.get("total_lines") and offset >= read["total_lines"]:  # as FilesystemBackend
                return ReadResult(error=f"Line offset {offset} exceeds file length "
                                  f"({read['total_lines']} lines)")
            return ReadResult(file_data=data)  # an empty file: no window
        start = read["start_line"]
        end = start + read["lines_read"] - 1
        following = read.get("next_offset")
        return ReadResult(file_data=data, start_line=start, end_line=end,
                          total_lines=max(read["total_lines"], end),
                          next_offset=end if following == end + 1 else None)

    def write(self, file_path: str, content: str) -> WriteResult:
        result = self._call("write_file", {"path": _rel(file_path), "content": content})
        return WriteResult(path=file_path) if result["ok"] else WriteResult(
            error=model_text(result))

    def edit(self, file_path: str, old_string: str, new_string: str,
             replace_all: bool = False) -> EditResult:
        result = self._call("edit_file", {"path": _rel(file_path), "old_string": old_string,
                                          "new_string": new_string, "replace_all": replace_all})
        if not result["ok"]:
            return EditResult(error=model_text(result))
        return EditResult(path=file_path, occurrences=result["result"]["replacements"])

    def delete(self, file_path: str) -> DeleteResult:
        result = self._call("delete_file", {"path": _rel(file_path)})
        return DeleteResult(path=file_path) if result["ok"] else DeleteResult(
            error=model_text(result))

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        base = _rel(path or "/")
        result = self._call("search_files", {"pattern": _glob(pattern), "path": base,
                                             "max_results": GLOB_MAX})
        if not result["ok"]:
            return GlobResult(error=model_text(result))
        found = result["result"]
        others = self._not_files(base) if found["matches"] else set()
        return GlobResult(
            matches=[{"path": _virtual(match)} for match in found["matches"]
                     if match not in others],
            truncated=found["truncated"],
            truncation_reason="budget" if found["truncated"] else None)

    def _not_files(self, base: str) -> set[str]:
        """What beneath `base` is not a regular file (directories, symlinks, which
        corral never follows), workspace-relative: search_files names them too, and
        the protocol's glob returns regular files only."""
        listing = self._call("list_directory", {"path": base, "recursive": True,
                                                "max_entries": GLOB_MAX})
        if not listing["ok"]:
            return set()
        prefix = "" if base == "." else f"{base}/"
        return {prefix + entry["name"] for entry in listing["result"]["entries"]
                if entry["type"] != "file"}

    def grep(self, pattern: str, path: str | None = None, glob: str | None = None, *,
             max_count: int | None = None) -> GrepResult:
        arguments: dict[str, Any] = {"pattern": re.escape(pattern), "path": _rel(path or "/"),
                                     "max_results": min(max_count or GREP_MAX, GREP_MAX)}
        if glob:
            arguments["glob"] = glob
        result = self._call("grep", arguments)
        if not result["ok"]:
            return GrepResult(error=model_text(result))
        found = result["result"]
        matches: list[GrepMatch] = [
            {"path": _virtual(match["path"]), "line": match["line"], "text": match["text"]}
            for match in found["matches"]]
        return GrepResult(matches=matches, truncated=found["truncated"])

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        responses = []
        for path, content in files:
            result = self._call("write_file", {"path": _rel(path), "encoding": "base64",
                                               "content": base64.b64encode(content).decode()})
            responses.append(FileUploadResponse(path=path, error=_file_error(result)))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        responses = []
        for path in paths:
            result = self._call("read_file", {"path": _rel(path), "encoding": "base64"})
            error = _file_error(result)
            if error is None and result["result"].get("truncated"):
                error = f"{path} is larger than one read of the sandbox allows."
            content = None if error else base64.b64decode(result["result"]["content"])
            responses.append(FileDownloadResponse(path=path, content=content, error=error))
        return responses

    # -- the sandbox's history, in the backend's paths ------------------------------

    def checkpoint(self, label: str | None = None) -> str:
        """Mark the tree's state now; `rewind` takes it back there."""
        return self.sandbox.checkpoint(label)

    def rewind(self, checkpoint: str, *, force: bool = False) -> dict[str, Any]:
        """Every path changed since `checkpoint` back to its state then."""
        return self.sandbox.rewind(checkpoint, force=force)

    def undo(self, file_path: str, *, force: bool = False) -> dict[str, Any]:
        """Revert the last recorded change of `file_path` (a backend path)."""
        return self.sandbox.undo(_rel(file_path), force=force)

    def history(self, file_path: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Recorded changes, newest first (with checkpoints, without a path)."""
        return self.sandbox.history(None if file_path is None else _rel(file_path), limit)


def _rel(path: str) -> str:
    """A backend path ("/src/app.py") as the workspace-relative path corral takes."""
    rel = path.lstrip("/")
    return rel or "."


def _virtual(rel: str) -> str:
    """A workspace-relative path as the backend's ("a.txt" -> "/a.txt")."""
    return "/" if rel in (".", "") else "/" + rel.removeprefix("./")


def _glob(pattern: str) -> str:
    """The protocol's glob in corral's terms: a pattern without "/" matches the
    name at any depth there, the whole relative path in corral; a leading "/"
    anchors to the search root, which corral's patterns always are."""
    if pattern.startswith("/"):
        return pattern.lstrip("/")
    return pattern if "/" in pattern else f"**/{pattern}"


def _info(rel: str, entry: dict[str, Any]) -> FileInfo:
    is_dir = entry["type"] == "dir"
    info: FileInfo = {"path": _virtual(rel) + ("/" if is_dir else ""), "is_dir": is_dir,
                      "size": 0 if is_dir else int(entry.get("size") or 0)}
    if entry.get("modified") is not None:
        info["modified_at"] = datetime.fromtimestamp(entry["modified"], UTC).isoformat()
    return info


def _file_error(result: dict[str, Any]) -> str | None:
    if result["ok"]:
        return None
    return _FILE_ERRORS.get(result["error"]["code"], model_text(result))
