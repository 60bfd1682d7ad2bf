"""A client's roots (MCP `roots/list`): the directories it names, which narrow the
configured roots for its calls and never widen them."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit


def client_roots(answer: object) -> list[str] | None:
    """The directories a `roots/list` answer names, as absolute paths: they narrow
    the configured roots (a call outside all of them fails path_denied), never
    widen them. Only file:// URIs on this host count; an answer that names none
    does not narrow (clients send an empty list when no folder is open). Anything
    malformed is a ValueError: the call fails rather than run unnarrowed."""
    roots = answer.get("roots") if isinstance(answer, dict) else None
    if not isinstance(roots, list):
        raise ValueError("the client's roots/list answer has no roots list")
    paths = []
    for root in roots:
        uri = root.get("uri") if isinstance(root, dict) else None
        if not isinstance(uri, str):
            raise ValueError("a root in the client's roots/list answer has no uri")
        parts = urlsplit(uri)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            continue
        path = unquote(parts.path)
        if path.startswith("/") and "\0" not in path:
            paths.append(os.path.normpath(path))
    return paths or None
