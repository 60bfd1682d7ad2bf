"""Questions from the server to a handshake-revision client over HTTP: an
approval (elicitation/create) and the client's roots (roots/list) travel in the
answer's event stream, and the client's answers, POSTed back to the session, let
the call go on. The official SDK's streamable HTTP client, in the handshake
(legacy) mode, against `corral serve --http` as a subprocess."""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers.http_helpers import TOKENS, Server, post, running_server, sha256
from tests.helpers.mcp_helpers import structured


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
    yield from running_server(top, alice, alice)


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


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A tenant that may have one request in progress, so one call asking at once."""
    top = tmp_path_factory.mktemp("http-ask-bounded")
    alice = top / "alice"
    alice.mkdir()
    (top / "alice.toml").write_text(
        f'[workspace]\nroot = "{alice}"\n[tools]\nwrite_file = "supervised"\n'
    )
    (top / "tenants.toml").write_text(
        f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{sha256(TOKENS["alice"])}"\n'
        f'config = "{top / "alice.toml"}"\n'
    )
    yield from running_server(top, alice, alice, "--max-tenant-requests", "1")


def post_admitted(server: Server, body: dict[str, Any],
                  headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """post(), again while the tenant's one request in progress has not yet been
    let go (the asking call's thread is done a moment after its question is out)."""
    for _ in range(200):
        status, got, answer = post(server, body, headers=headers)
        if status != 429:
            return status, got, answer
        time.sleep(0.01)
    pytest.fail("the tenant stayed at its bound")


def next_event(response: http.client.HTTPResponse) -> dict[str, Any]:
    while line := response.readline():
        if line.startswith(b"data: "):
            event: dict[str, Any] = json.loads(line[len(b"data: "):])
            return event
    pytest.fail("the event stream ended")


def handshake(server: Server) -> dict[str, str]:
    """A 2025-11-25 session whose client can be asked; the headers that name it."""
    status, headers, _ = post(server, {
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "t", "version": "1"}}})
    assert status == 200
    return {"mcp-session-id": headers["mcp-session-id"]}


def write(request_id: int, path: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "write_file", "arguments": {"path": path, "content": "x"}}}


@contextlib.contextmanager
def asking(server: Server, session: dict[str, str], request_id: int,
           path: str) -> Iterator[tuple[http.client.HTTPResponse, dict[str, Any]]]:
    """A supervised write whose answer is an event stream; it and its question."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/mcp", body=json.dumps(write(request_id, path)), headers={
            "content-type": "application/json", "accept": "application/json, text/event-stream",
            "authorization": f"Bearer {TOKENS['alice']}", **session})
        stream = connection.getresponse()
        assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
        question = next_event(stream)
        assert question["method"] == "elicitation/create"
        assert path in question["params"]["message"]
        yield stream, question
    finally:
        connection.close()


def accept(server: Server, session: dict[str, str], question: dict[str, Any]) -> None:
    status, _, _ = post_admitted(server, {"jsonrpc": "2.0", "id": question["id"],
                                          "result": {"action": "accept"}}, session)
    assert status == 202


def test_a_tenant_has_a_bounded_number_of_calls_asking(bounded: Server) -> None:
    """The question travels in the call's event stream and the answer POSTed
    back lets it go on; meanwhile a tenant at its bound of asking calls cannot
    ask another (approval_required), so its questions hold few connections."""
    session = handshake(bounded)
    with asking(bounded, session, 2, "a.txt") as (stream, question):
        status, _, body = post_admitted(bounded, write(3, "b.txt"), session)
        error = json.loads(body)["result"]["structuredContent"]["error"]
        assert status == 200 and error["code"] == "approval_required"
        accept(bounded, session, question)
        answer = next_event(stream)
        assert answer["id"] == 2 and not answer["result"]["isError"]
    assert (bounded.alice / "a.txt").exists() and not (bounded.alice / "b.txt").exists()


def test_a_request_id_in_use_is_refused_and_the_first_answered(server: Server) -> None:
    """Two open requests of a session with one id: the second is refused, and the
    first, waiting for its question's answer, still gets its own answer."""
    session = handshake(server)
    with asking(server, session, 7, "docs/first.md") as (stream, question):
        status, _, body = post(server, write(7, "docs/second.md"), headers=session)
        assert status == 200 and json.loads(body)["error"]["code"] == -32600
        accept(server, session, question)
        answer = next_event(stream)
        assert answer["id"] == 7 and not answer["result"]["isError"]
    assert (server.alice / "docs/first.md").exists()
    assert not (server.alice / "docs/second.md").exists()
