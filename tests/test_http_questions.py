"""Questions from the server to a handshake-revision client over HTTP: an
approval (elicitation/create) and the client's roots (roots/list) travel in the
answer's event stream, and the client's answers, POSTed back to the session, let
the call go on. The official SDK's streamable HTTP client, in the handshake
(legacy) mode, against `corral serve --http` as a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.test_http import TOKENS, Server, post, sha256, structured
from tests.test_mcp import REPO


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    top = tmp_path_factory.mktemp("http-ask")
    alice = top / "alice"
    (alice / "docs").mkdir(parents=True)
    (top / "alice.toml").write_text(
        f'[workspace]\nroot = "{alice}"\n[tools]\nwrite_file = "supervised"\n'
    )
    (top / "tenants.toml").write_text(
        f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{sha256(TOKENS["alice"])}"\n'
        f'config = "{top / "alice.toml"}"\n'
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "corral", "serve", "--http", "127.0.0.1:0",
         "--tenants", str(top / "tenants.toml")],
        stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=top,
    )
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    assert "serving MCP over HTTP at http://127.0.0.1:" in line, line
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    try:
        yield Server(port, process, alice, alice)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def run_legacy(server: Server, body: Any, *, elicit: Any = None,
               roots: list[str] | None = None) -> None:
    """Drive the server with the SDK client at the handshake revision (2025-11-25)."""

    async def list_roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in roots or ()])

    async def main() -> None:
        headers = {"authorization": f"Bearer {TOKENS['alice']}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(server.url, http_client=http)
            client = Client(transport, mode="legacy", elicitation_callback=elicit,
                            list_roots_callback=list_roots if roots is not None else None)
            async with client:
                assert client.protocol_version == "2025-11-25"
                with anyio.fail_after(60):
                    await body(client)

    anyio.run(main)


@pytest.mark.parametrize("action", ["accept", "decline"])
def test_a_handshake_client_is_asked_to_approve_over_http(server: Server, action: str) -> None:
    asked: list[str] = []
    path = f"docs/{action}.md"

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=action)

    async def body(client: Client) -> None:
        result = await client.call_tool("write_file", {"path": path, "content": "x"})
        if action == "accept":
            assert not result.is_error, result
        else:
            assert structured(result)["error"]["code"] == "approval_denied"

    run_legacy(server, body, elicit=elicit)
    assert len(asked) == 1 and "write_file" in asked[0] and path in asked[0]
    assert (server.alice / path).exists() == (action == "accept")


def test_a_handshake_clients_roots_narrow_its_calls_over_http(server: Server) -> None:
    """roots/list is asked over HTTP too: a root elsewhere leaves the workspace out."""
    elsewhere = server.alice.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)

    async def body(client: Client) -> None:
        result = await client.call_tool("list_directory", {"path": "docs"})
        assert structured(result)["error"]["code"] == "path_denied"

    run_legacy(server, body, roots=[elsewhere.as_uri()])


def test_a_request_that_takes_no_event_stream_cannot_be_asked(server: Server) -> None:
    """Without text/event-stream in Accept there is no way to ask: the supervised
    call fails approval_required and says what would let it be asked."""
    plain = {"accept": "application/json"}
    status, headers, _ = post(server, {
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "t", "version": "1"}}}, headers=plain)
    assert status == 200
    session = {**plain, "mcp-session-id": headers["mcp-session-id"]}
    status, headers, body = post(server, {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "docs/plain.md", "content": "x"}},
    }, headers=session)
    assert status == 200 and headers["content-type"] == "application/json"
    error = httpx2.Response(200, content=body).json()["result"]["structuredContent"]["error"]
    assert error["code"] == "approval_required" and "text/event-stream" in error["message"]
    assert not (server.alice / "docs/plain.md").exists()
