"""SEP-2243 over `corral serve --http`: a 2026-07-28 request's `Mcp-Method`, `Mcp-Name`
and `MCP-Protocol-Version` must be there and say what its body says, or it is
refused (HTTP 400, -32020) before anything runs; bad `_meta` is 400 -32602, an
unsupported version 400 -32022, a method not served 404 -32601. Raw HTTP for what
the official SDK never sends, and the SDK's client itself: the headers it sends
pass, and the same requests with a header changed on the way (as a gateway
trusting the header would be fooled) are refused. Handshake clients send none of
these headers and are served as before."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers.http_helpers import STATELESS_META, TOKENS, Server, call, post

WRITE = call("write_file", {"path": "gateway.txt", "content": "written\n"})


def refused(answer: tuple[int, dict[str, str], bytes], status: int, code: int,
            request_id: Any = 1) -> dict[str, Any]:
    """The JSON-RPC error of a refused request, checked; returns it."""
    got, headers, body = answer
    assert got == status, (got, body)
    assert headers["content-type"] == "application/json"
    message = json.loads(body)
    assert message["error"]["code"] == code and message["id"] == request_id, message
    return dict(message["error"])


def request(method: str, params: dict[str, Any] | None = None, request_id: int = 1,
            meta: dict[str, Any] | None = STATELESS_META) -> dict[str, Any]:
    body = {**(params or {})}
    if meta is not None:
        body["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}


@pytest.fixture
def unwritten(server: Server) -> Path:
    target = server.alice / "gateway.txt"
    target.unlink(missing_ok=True)
    return target


# -- refused before anything runs ---------------------------------------------------


@pytest.mark.parametrize(("headers", "why"), [
    ({"mcp-name": "read_file"}, "does not match"),  # a gateway let a reading tool through
    ({"mcp-name": None}, "required"),
    ({"mcp-method": None}, "required"),
    ({"mcp-method": "tools/list"}, "does not match"),
    ({"mcp-method": "Tools/Call"}, "does not match"),  # values are case-sensitive
    ({"mcp-name": "Write_File"}, "does not match"),
    ({"mcp-protocol-version": None}, "required"),
    ({"mcp-protocol-version": "2025-11-25"}, "does not match"),
    ({"mcp-name": "=?base64?d3JpdGVfZmlsZQ?=", }, "not valid"),  # unpadded: not canonical
    ({"mcp-name": "=?base64?!!!!?=", }, "not valid"),
    ({"mcp-name": "=?base64?" + base64.b64encode(b"\xff\xfe").decode() + "?="}, "not valid"),
    ({"mcp-name": "write_file\u00e9"}, "characters"),  # not ASCII (sent as latin-1)
])
def test_a_header_missing_or_unlike_the_body_is_refused_and_nothing_runs(
    server: Server, unwritten: Path, headers: dict[str, str | None], why: str,
) -> None:
    error = refused(post(server, WRITE, headers=headers), 400, -32020)
    assert why in error["message"], error
    assert not unwritten.exists()


def test_a_repeated_header_is_refused(server: Server, unwritten: Path) -> None:
    """Two Mcp-Name headers: a gateway may read the first, a server the last."""
    raw = json.dumps(WRITE).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.putrequest("POST", "/mcp")
        for name, value in (("content-type", "application/json"),
                            ("authorization", f"Bearer {TOKENS['alice']}"),
                            ("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"),
                            ("mcp-name", "read_file"), ("mcp-name", "write_file"),
                            ("content-length", str(len(raw)))):
            connection.putheader(name, value)
        connection.endheaders(raw)
        response = connection.getresponse()
        answer = (response.status, {k.lower(): v for k, v in response.getheaders()},
                  response.read())
    finally:
        connection.close()
    assert "sent 2 times" in refused(answer, 400, -32020)["message"]
    assert not unwritten.exists()


@pytest.mark.parametrize("meta", [
    None,
    {"io.modelcontextprotocol/clientCapabilities": {}},
    {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
    {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
     "io.modelcontextprotocol/clientCapabilities": []},
])
def test_bad_meta_at_the_stateless_revision_is_400_invalid_params(
    server: Server, unwritten: Path, meta: dict[str, Any] | None,
) -> None:
    body = request("tools/call", {"name": "write_file", "arguments": WRITE["params"]["arguments"]},
                   meta=meta)
    headers: dict[str, str | None] = {"mcp-protocol-version": "2026-07-28",
                                      "mcp-method": "tools/call", "mcp-name": "write_file"}
    refused(post(server, body, headers=headers), 400, -32602)
    assert not unwritten.exists()


@pytest.mark.parametrize("version", ["2099-01-01", "v999.0.0"])
def test_an_unsupported_version_is_400_with_the_supported_ones(
    server: Server, unwritten: Path, version: str,
) -> None:
    meta = {**STATELESS_META, "io.modelcontextprotocol/protocolVersion": version}
    body = {**WRITE, "params": {**WRITE["params"], "_meta": meta}}
    error = refused(post(server, body, headers={"mcp-protocol-version": version}), 400, -32022)
    assert error["data"] == {"supported": ["2026-07-28"], "requested": version}
    # the header alone, on a request of no revision the body names
    handshake = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    error = refused(post(server, handshake, headers={"mcp-protocol-version": version}), 400,
                    -32022)
    assert error["data"]["requested"] == version
    assert not unwritten.exists()


@pytest.mark.parametrize("method", ["logging/setLevel", "resources/subscribe", "ping",
                                    "initialize", "prompts/list", "unknown/method"])
def test_a_method_not_served_is_404_method_not_found(server: Server, method: str) -> None:
    refused(post(server, request(method)), 404, -32601)


# -- accepted ---------------------------------------------------------------------


@pytest.mark.parametrize("spelled", [
    "  stat_file\t",  # leading and trailing whitespace is not part of the value
    "=?base64?" + base64.b64encode(b"stat_file").decode() + "?=",
])
def test_a_name_trimmed_or_base64_encoded_is_the_name(server: Server, spelled: str) -> None:
    status, _, body = post(server, call("stat_file", {"path": "hello.txt"}),
                           headers={"mcp-name": spelled})
    assert status == 200 and json.loads(body)["result"]["structuredContent"]["exists"]


def test_methods_without_a_target_need_no_name(server: Server) -> None:
    status, _, body = post(server, request("tools/list"))
    assert status == 200 and json.loads(body)["result"]["tools"]
    status, _, body = post(server, request("server/discover"))
    assert status == 200 and json.loads(body)["result"]["supportedVersions"] == ["2026-07-28"]


def test_handshake_revisions_need_none_of_the_headers(server: Server) -> None:
    """Clients of 2025-xx send no Mcp-Method or Mcp-Name; 2025-06-18 on send their
    own MCP-Protocol-Version after initialize."""
    for version in ("2025-11-25", "2025-06-18", "2025-03-26"):
        status, headers, body = post(server, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "old", "version": "0"}}})
        assert status == 200 and json.loads(body)["result"]["protocolVersion"] == version
        session = {"mcp-session-id": headers["mcp-session-id"]}
        if version != "2025-03-26":
            session["mcp-protocol-version"] = version
        status, _, body = post(server, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                        "params": {"name": "stat_file",
                                                   "arguments": {"path": "hello.txt"}}},
                               headers=dict(session))
        assert status == 200 and "error" not in json.loads(body), body
        status, _, body = post(server, {"jsonrpc": "2.0", "id": 3, "method": "ping"},
                               headers=dict(session))
        assert status == 200 and json.loads(body)["result"] == {}


# -- the SDK's client ------------------------------------------------------------


def through_sdk(server: Server, use: Callable[[Client], Any],
                change: Callable[[httpx2.Request], None] | None = None) -> list[dict[str, str]]:
    """Run `use` with the official SDK's client at 2026-07-28; `change` edits each
    request on its way out. Returns the headers of every POST it sent."""
    sent: list[dict[str, str]] = []

    async def hook(outgoing: httpx2.Request) -> None:
        if outgoing.method == "POST":
            if change is not None:
                change(outgoing)
            sent.append({k.lower(): v for k, v in outgoing.headers.items()})

    async def main() -> None:
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKENS['alice']}"},
                                      timeout=60, event_hooks={"request": [hook]}) as http:
            transport = streamable_http_client(server.url, http_client=http)
            async with Client(transport, mode="2026-07-28") as client:
                with anyio.fail_after(60):
                    await use(client)

    anyio.run(main)
    return sent


def test_the_sdk_client_sends_the_headers_and_is_served(server: Server) -> None:
    async def use(client: Client) -> None:
        result = await client.call_tool("stat_file", {"path": "hello.txt"})
        assert not result.is_error, result

    sent = through_sdk(server, use)
    calls = [headers for headers in sent if headers.get("mcp-method") == "tools/call"]
    assert calls and all(h["mcp-name"] == "stat_file" and h["mcp-protocol-version"]
                         == "2026-07-28" for h in calls), sent


@pytest.mark.parametrize(("header", "value"), [
    ("mcp-name", "read_file"), ("mcp-method", "tools/list"),
    ("mcp-protocol-version", "2025-11-25"),
])
def test_the_sdk_clients_call_with_a_header_changed_on_the_way_is_refused(
    server: Server, unwritten: Path, header: str, value: str,
) -> None:
    def change(outgoing: httpx2.Request) -> None:
        if outgoing.headers.get("mcp-name") == "write_file":
            outgoing.headers[header] = value

    errors: list[Exception] = []

    async def use(client: Client) -> None:
        try:
            await client.call_tool("write_file", {"path": "gateway.txt", "content": "x"})
        except Exception as exc:  # the SDK raises the JSON-RPC error
            errors.append(exc)

    through_sdk(server, use, change)
    assert (errors and "-32020" in repr(errors[0])) or "mismatch" in str(errors[0]).lower(), errors
    assert not unwritten.exists()
