"""MCP over stdio's entry point, at the path the design names. The code is
corral/faces/mcp_server.py, with the other faces."""

from __future__ import annotations

from typing import Any

from corral.faces import mcp_server as _face
from corral.faces.mcp_server import MAX_CONCURRENT_CALLS, McpServer, decode, serve

__all__ = ["MAX_CONCURRENT_CALLS", "McpServer", "decode", "serve"]


def __getattr__(name: str) -> Any:
    # Any other name the module had before it moved.
    return getattr(_face, name)
