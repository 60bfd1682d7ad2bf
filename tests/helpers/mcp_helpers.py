"""Driving `corral serve` over stdio with the MCP SDK's client, and reading its
results: shared by the MCP, HTTP and first-run tests."""

from __future__ import annotations

import base64
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[2]
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

Session = Callable[[ClientSession], Awaitable[None]]


def serve_argv(workspace: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "corral", "serve", "--workspace", str(workspace), *extra]


def run_session(
    workspace: Path,
    body: Session,
    *,
    extra: tuple[str, ...] = (),
    elicit: Callable[..., Awaitable[types.ElicitResult]] | None = None,
    client: str | None = None,
) -> None:
    """Start `corral serve`, initialize with the SDK client (named `client`, if
    given), run `body`, shut down."""

    async def main() -> None:
        argv = serve_argv(workspace, *extra)
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env={"PYTHONPATH": str(REPO)}, cwd=workspace
        )
        with open(workspace.parent / "server-stderr.log", "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write, elicitation_callback=elicit, client_info=(
                    None if client is None else types.Implementation(name=client, version="1")
                )) as session,
            ):
                await session.initialize()
                with anyio.fail_after(60):
                    await body(session)

    anyio.run(main)


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return result.structured_content


def error_code(result: types.CallToolResult) -> str:
    assert result.is_error, result
    return structured(result)["error"]["code"]


# corral.toml: write_file asks first under docs/ only, by the rule "ask-docs"
SUPERVISED_DOCS = """
[[rules]]
name = "ask-docs"
action = "supervised"
tools = ["write_file"]
paths = ["docs/**"]
"""


def write_config(tmp_path: Path, text: str) -> tuple[str, ...]:
    config = tmp_path / "corral.toml"
    config.write_text(text)
    return ("--config", str(config))
