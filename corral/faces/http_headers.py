"""The request headers of MCP 2026-07-28 over HTTP (SEP-2243), checked against the body.

Gateways in front of an MCP server route, authorize and log by `Mcp-Method`,
`Mcp-Name` and `MCP-Protocol-Version` without reading the body; a server that
reads the body must refuse a request whose headers are missing or say
something else, or a gateway that lets a tenant use only reading tools by
`Mcp-Name` is bypassed by a body that calls a writing one. So, on every
request of the stateless revision (its `_meta` names a protocol version, or
its `MCP-Protocol-Version` header does), before anything runs:

- `MCP-Protocol-Version` is required and equal to `_meta`'s version; a
  version corral does not serve is -32022 (data: supported, requested);
- `_meta` carries the version (a string) and the client's capabilities (an
  object), else -32602;
- `Mcp-Method` is required and equal to the body's method; `Mcp-Name` is
  required for `tools/call` and `prompts/get` (equal to `params.name`) and
  `resources/read` (`params.uri`) whenever the body names one;
- each of the three is sent once (a second copy could tell a gateway one
  thing and this check another), in visible ASCII, compared after trimming
  spaces and tabs and, for `Mcp-Name`, decoding the `=?base64?...?=` form
  (canonical base64 of UTF-8); values are compared case-sensitively.
Any header missing, repeated, malformed or different is HTTP 400 with
-32020 (HeaderMismatch). A request of a handshake revision (no `_meta`
version, and no header or a handshake revision's) is left alone: those
clients send none of these headers.

The decoding is written here rather than taken from the `mcp` SDK, which has
one, because the HTTP face does not depend on the SDK.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from corral.faces.mcp_revisions import (
    CLIENT_CAPABILITIES_KEY,
    HANDSHAKE_VERSIONS,
    PROTOCOL_VERSION_KEY,
    STATELESS_VERSIONS,
)

HEADER_MISMATCH = -32020
INVALID_PARAMS = -32602
UNSUPPORTED_PROTOCOL_VERSION = -32022
VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
CHECKED = (VERSION_HEADER, METHOD_HEADER, NAME_HEADER)
# The methods whose body names a target, and the param that names it.
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
SPELLED = {VERSION_HEADER: "MCP-Protocol-Version", METHOD_HEADER: "Mcp-Method",
           NAME_HEADER: "Mcp-Name"}
_SENTINEL = re.compile(r"=\?base64\?(.*)\?=", re.DOTALL)
_VISIBLE = re.compile(r"[\x20-\x7e\t]*")


class Refusal(NamedTuple):
    """A request refused before it runs: its HTTP status and JSON-RPC error."""

    status: int
    code: int
    message: str
    data: Any = None


def mismatch(message: str) -> Refusal:
    return Refusal(400, HEADER_MISMATCH, f"Header mismatch: {message}")


def refusal(raw: Iterable[tuple[bytes, bytes]], message: dict[str, Any]) -> Refusal | None:
    """Why the request with headers `raw` (as ASGI gives them) and body `message`
    (a JSON object) is refused, or None: it may go on."""
    values: dict[str, list[str]] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        if key in CHECKED:
            values.setdefault(key, []).append(value.decode("latin-1"))
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    stated = PROTOCOL_VERSION_KEY in meta
    body_version = meta.get(PROTOCOL_VERSION_KEY)
    sent = values.get(VERSION_HEADER)
    handshake = sent is None or (len(sent) == 1 and sent[0].strip(" \t") in HANDSHAKE_VERSIONS)
    if handshake and not stated:
        return None  # a handshake revision's request
    header: dict[str, str | None] = {}
    for checked in CHECKED:
        copies = values.get(checked)
        if copies is not None and len(copies) > 1:
            return mismatch(f"{SPELLED[checked]} is sent {len(copies)} times")
        if copies is not None and not _VISIBLE.fullmatch(copies[0]):
            return mismatch(f"{SPELLED[checked]} holds characters a header may not")
        header[checked] = None if copies is None else copies[0].strip(" \t")
    version = header[VERSION_HEADER]
    if version is None:
        return mismatch(f"the MCP-Protocol-Version header is required (the body's "
                        f"_meta names {body_version!r})")
    if stated and body_version != version:
        return mismatch(f"MCP-Protocol-Version header value {version!r} does not match "
                        f"the body's _meta value {body_version!r}")
    if version not in STATELESS_VERSIONS:
        return Refusal(400, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                       {"supported": list(STATELESS_VERSIONS), "requested": version})
    if not (isinstance(body_version, str) and isinstance(meta.get(CLIENT_CAPABILITIES_KEY), dict)):
        return Refusal(400, INVALID_PARAMS,
                       f"params._meta needs {PROTOCOL_VERSION_KEY!r} (a string) and "
                       f"{CLIENT_CAPABILITIES_KEY!r} (an object) at protocol {version}")
    method = message.get("method")
    if header[METHOD_HEADER] is None:
        return mismatch("the Mcp-Method header is required")
    if header[METHOD_HEADER] != method:
        return mismatch(f"Mcp-Method header value {header[METHOD_HEADER]!r} does not match "
                        f"the body's method {method!r}")
    field = NAMED.get(method) if isinstance(method, str) else None
    named = params.get(field) if field is not None else None
    if named is None:
        return None  # nothing to name: the session says what is missing
    spelled = header[NAME_HEADER]
    if spelled is None:
        return mismatch(f"the Mcp-Name header is required for {method}")
    decoded = _decoded(spelled)
    if decoded is None:
        return mismatch("Mcp-Name is not valid =?base64?...?= (canonical base64 of UTF-8)")
    if decoded != named:
        return mismatch(f"Mcp-Name header value {decoded!r} does not match the body's "
                        f"{field} {named!r}")
    return None


def _decoded(value: str) -> str | None:
    """A header value as meant: the `=?base64?...?=` form decoded (None: malformed)."""
    sentinel = _SENTINEL.fullmatch(value)
    if sentinel is None:
        return value
    payload = sentinel[1]
    try:
        data = base64.b64decode(payload, validate=True)
    except binascii.Error:
        return None
    if base64.b64encode(data).decode() != payload:  # one spelling per value
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None
