"""MCP over stdio's entry point, at the path the design names. The code is
corral/faces/mcp_server.py, with the other faces."""

from __future__ import annotations

from corral.faces.mcp_server import MAX_CONCURRENT_CALLS, McpServer, decode, serve

__all__ = ["MAX_CONCURRENT_CALLS", "McpServer", "decode", "serve"]

