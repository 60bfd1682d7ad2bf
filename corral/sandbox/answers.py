"""What the host accepts from a worker. A worker is confined because the code in
it may be made to misbehave, so its answers are untrusted input: beyond being a
frame of JSON (protocol.py) and repeating the request's id (pool.py), an answer
must have the shape the host's code reads, or the worker is treated as lost.
The content itself (file text, listings) is the worker's to give.
"""

from __future__ import annotations

from typing import Any

from corral.errors import ERROR_CODES

_TOUCHED_FIELDS = ("path", "root", "resolved", "decision")
_APPROVAL_FIELDS = ("key", "root", "resolved", "path")


def malformed(response: dict[str, Any], request: dict[str, Any]) -> str | None:
    """Why `response` cannot be the answer to `request`; None if it can."""
    if "cleanup" in request:
        return None if _count(response.get("removed")) else "a cleanup answer without a count"
    if "find_temps" in request:
        temps = response.get("temps")
        return None if isinstance(temps, list) and all(map(_temp, temps)) else (
            "a temp listing that is not [root index, path, pid] triples"
        )
    tool = request.get("tool")
    if response.get("tool") != tool and (isinstance(tool, str) or response.get("tool") != ""):
        return "an answer for another tool"
    ok = response.get("ok")
    if ok is True:
        problem = _success(response)
    elif ok is False:
        problem = _failure(response.get("error"))
    else:
        problem = "an answer that is neither ok nor an error"
    return problem or _meta(response.get("meta", {}))


def _success(response: dict[str, Any]) -> str | None:
    result = response.get("result")
    if not isinstance(result, dict) or not isinstance(response.get("text"), str):
        return "a result without its dict and text"
    image = result.get("image")
    if image is not None and not (
        isinstance(image, dict) and _strings(image, ("media_type", "data"))
    ):
        return "an image block without media_type and data"
    return None


def _failure(error: Any) -> str | None:
    if not isinstance(error, dict) or error.get("code") not in ERROR_CODES:
        return "an error without a known code"
    if not isinstance(error.get("message"), str) or not _optional_string(error.get("rule")):
        return "an error without a message"
    return None


def _meta(meta: Any) -> str | None:
    if not isinstance(meta, dict):
        return "meta that is not an object"
    touched = meta.get("touched", [])
    needs = meta.get("needs_approval", [])
    if not isinstance(touched, list) or not all(
        isinstance(t, dict) and _strings(t, _TOUCHED_FIELDS) and _optional_string(t.get("rule"))
        for t in touched
    ):
        return "meta.touched entries without their paths"
    if not isinstance(needs, list) or not all(
        isinstance(n, dict) and _strings(n, _APPROVAL_FIELDS) and _optional_string(n.get("rule"))
        for n in needs
    ):
        return "meta.needs_approval entries without their paths"
    if not _count(meta.get("bytes", 0)):
        return "meta.bytes that is not a count"
    return None


def _temp(item: Any) -> bool:
    return (
        isinstance(item, list) and len(item) == 3 and _count(item[0])
        and isinstance(item[1], str) and _count(item[2])
    )


def _strings(entry: dict[str, Any], fields: tuple[str, ...]) -> bool:
    return all(isinstance(entry.get(name), str) for name in fields)


def _optional_string(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
