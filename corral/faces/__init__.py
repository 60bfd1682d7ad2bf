"""The faces: what a person or a client talks to (the `corral` command, MCP and JSON
lines over stdio, MCP over HTTP for tenants). They sit above the public API
(corral.api, corral.pool) and import nothing from corral/sandbox/."""
