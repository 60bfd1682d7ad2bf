"""OpenAI's Responses API has apply_patch as a native tool: a request lists it as
{"type": "apply_patch"}, and the model answers with `apply_patch_call` items,
each one file operation ({"type": "create_file" | "update_file" |
"delete_file", "path", "diff"?}, the diff in the same V4A format as a Codex
patch's body). These map such a call onto corral's apply_patch tool and its
result onto the `apply_patch_call_output` item the API takes back."""

from __future__ import annotations

from typing import Any

from corral.errors import CorralError

NATIVE_TOOL = {"type": "apply_patch"}  # how a Responses request offers the native tool
_HEADERS = {"create_file": "*** Add File: ", "update_file": "*** Update File: ",
            "delete_file": "*** Delete File: "}


def patch_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """The apply_patch arguments for one `apply_patch_call` item (or its `operation`):
    {"patch": "*** Begin Patch ... *** End Patch"}. invalid_arguments for an
    operation the API does not define."""
    operation = call.get("operation", call)
    kind, path = operation.get("type"), operation.get("path")
    if kind not in _HEADERS or not isinstance(path, str) or not path:
        raise CorralError(
            "invalid_arguments", "an apply_patch_call operation needs a type (create_file, "
            "update_file or delete_file) and a path.")
    lines = [f"{_HEADERS[kind]}{path}"]
    diff = operation.get("diff") or ""
    if not isinstance(diff, str):
        raise CorralError("invalid_arguments", "an apply_patch_call's diff must be text.")
    body = diff.rstrip("\n").split("\n") if diff.strip() else []
    if kind == "create_file":  # each line of the new file is "+"-prefixed; a bare blank is one
        body = [line if line.startswith("+") else f"+{line}" for line in body]
    if kind != "delete_file":
        lines += body
    return {"patch": "\n".join(["*** Begin Patch", *lines, "*** End Patch"]) + "\n"}


def call_output(call: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The `apply_patch_call_output` item answering `call`, from the dict
    Sandbox.call returned: completed with the tool's text, or failed with its error."""
    failed = not response.get("ok")
    output = response["error"]["message"] if failed else response.get("text", "")
    return {"type": "apply_patch_call_output", "call_id": call["call_id"],
            "status": "failed" if failed else "completed", "output": output}
