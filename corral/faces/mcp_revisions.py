"""The MCP revisions corral speaks, and every way they differ, in one table.

The protocol core (mcp_core) asks a `Revision` what to do instead of comparing
version strings, so a new revision is one more row here.

Two eras:
- handshake (2024-11-05 .. 2025-11-25): `initialize` picks the revision for the
  whole connection; the server asks the client things (elicitation, roots) with
  requests of its own.
- stateless (2026-07-28): no handshake; every request names its revision and
  the client's capabilities in `params._meta`; the server never sends a
  request: it answers `resultType: "input_required"` with the questions
  (`inputRequests`), and the client retries the request with the answers
  (`inputResponses`) and the opaque `requestState` it was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.faces.mcp_jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNSUPPORTED_PROTOCOL_VERSION,
    ProtocolError,
)
from corral.tools.formats import mcp_tool

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
REMEMBER_FIELD = "remember"  # the approval form's one field: once, path or rule


@dataclass(frozen=True)
class Revision:
    version: str
    stateless: bool  # per-request `_meta` envelope, server/discover, resultType
    structured: bool  # structuredContent in results; title and outputSchema on tools
    elicitation: bool  # the client can be asked to approve (form elicitation)
    elicitation_mode: bool  # elicitation params carry "mode": "form"
    # a choice's titles: oneOf [{const, title}] with a default (2025-11-25 on), else
    # the older enum + enumNames
    titled_enums: bool = False

    def tool(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A tool spec from `Sandbox.tools()` in the shape `tools/list` returns here
        (title and outputSchema arrived with structured results)."""
        tool = mcp_tool(spec, strict=False)
        if not self.structured:
            del tool["title"], tool["outputSchema"]
        return tool

    def result(
        self, result: dict[str, Any], *, server_info: dict[str, Any], cacheable: bool = False
    ) -> dict[str, Any]:
        """A complete result as this revision spells it."""
        if not self.stateless:
            return result
        stamped = {**result, "resultType": "complete", "_meta": {SERVER_INFO_KEY: server_info}}
        if cacheable:
            # Listings hold this session's policy: no shared cache may serve them to
            # someone else, and a client re-asks whenever it wants (no caching hint).
            stamped.update(ttlMs=0, cacheScope="private")
        return stamped

    def input_required(
        self, requests: dict[str, Any], state: str, *, server_info: dict[str, Any]
    ) -> dict[str, Any]:
        """A stateless round that ends with questions for the client."""
        assert self.stateless
        return {
            "resultType": "input_required", "inputRequests": requests, "requestState": state,
            "_meta": {SERVER_INFO_KEY: server_info},
        }

    def elicitation_params(
        self, message: str, choices: list[tuple[str, str]]
    ) -> dict[str, Any]:
        """An approval question: "accept" approves; one optional field, `remember`,
        offers `choices` ((value, title) pairs, the first the default)."""
        field: dict[str, Any] = {"type": "string", "title": "Remember this approval"}
        if self.titled_enums:
            field["oneOf"] = [{"const": value, "title": title} for value, title in choices]
            field["default"] = choices[0][0]
        else:
            field["enum"] = [value for value, _ in choices]
            field["enumNames"] = [title for _, title in choices]
        params: dict[str, Any] = {
            "message": message,
            "requestedSchema": {"type": "object", "properties": {REMEMBER_FIELD: field}},
        }
        if self.elicitation_mode:
            params["mode"] = "form"
        return params


REVISIONS: dict[str, Revision] = {
    revision.version: revision
    for revision in (
        Revision("2026-07-28", stateless=True, structured=True,
                 elicitation=True, elicitation_mode=True, titled_enums=True),
        Revision("2025-11-25", stateless=False, structured=True,
                 elicitation=True, elicitation_mode=True, titled_enums=True),
        Revision("2025-06-18", stateless=False, structured=True,
                 elicitation=True, elicitation_mode=False),
        Revision("2025-03-26", stateless=False, structured=False,
                 elicitation=False, elicitation_mode=False),
        Revision("2024-11-05", stateless=False, structured=False,
                 elicitation=False, elicitation_mode=False),
    )
}
# Newest first; a client asking `initialize` for a revision we do not speak is
# answered with the newest handshake one and decides whether to go on.
HANDSHAKE_VERSIONS = tuple(v for v, r in REVISIONS.items() if not r.stateless)
STATELESS_VERSIONS = tuple(v for v, r in REVISIONS.items() if r.stateless)


def negotiate(requested: object) -> Revision:
    """The handshake revision `initialize` answers with."""
    if isinstance(requested, str) and requested in HANDSHAKE_VERSIONS:
        return REVISIONS[requested]
    return REVISIONS[HANDSHAKE_VERSIONS[0]]


def elicits_forms(capabilities: object) -> bool:
    """Whether a client's capabilities allow form elicitation (an empty object means forms)."""
    if not isinstance(capabilities, dict):
        return False
    elicitation = capabilities.get("elicitation")
    return isinstance(elicitation, dict) and (not elicitation or "form" in elicitation)


def lists_roots(capabilities: object) -> bool:
    """Whether a client's capabilities say it can list its roots."""
    return isinstance(capabilities, dict) and isinstance(capabilities.get("roots"), dict)


def states_a_version(params: dict[str, Any]) -> bool:
    """A request of the stateless revision: its _meta names a protocol version."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def served_at(
    method: str, params: dict[str, Any], handshake: Revision | None,
    capabilities: dict[str, Any],
) -> tuple[Revision | None, dict[str, Any]]:
    """The revision a request is served at, and the client capabilities it has:
    those its _meta names, else the `handshake`'s (None before `initialize`, which
    only ping may be)."""
    meta = params.get("_meta")
    if isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta:
        version = meta[PROTOCOL_VERSION_KEY]
        declared = meta.get(CLIENT_CAPABILITIES_KEY)
        if not isinstance(version, str) or not isinstance(declared, dict):
            raise ProtocolError(
                INVALID_PARAMS,
                f"params._meta needs {PROTOCOL_VERSION_KEY!r} (a string) and "
                f"{CLIENT_CAPABILITIES_KEY!r} (an object)",
            )
        if version not in STATELESS_VERSIONS:
            raise ProtocolError(
                UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                data={"supported": list(STATELESS_VERSIONS), "requested": version},
            )
        return REVISIONS[version], declared
    if handshake is None and method != "ping":
        # neither a stateless request (its _meta names the revision) nor after a
        # handshake: say both ways in, not only the older one
        stateless = ", ".join(STATELESS_VERSIONS)
        raise ProtocolError(
            INVALID_REQUEST,
            f"{method} before initialize (or, at revision {stateless}, without "
            f"params._meta {PROTOCOL_VERSION_KEY!r} and {CLIENT_CAPABILITIES_KEY!r})",
        )
    return handshake, capabilities
