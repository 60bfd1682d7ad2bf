"""`corral serve --http --tenants` as a subprocess: every tool through the official
SDK's streamable HTTP client (stateless 2026-07-28 and the handshake in auto
mode), then raw HTTP for what a well-behaved client never sends: no or a wrong
token, another tenant's files and sessions, bad origins and hosts, oversized and
malformed bodies, and a client that disconnects mid-call."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any

import anyio
import httpx2
import mcp_types as types
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers.calls import SECRET
from tests.helpers.http_helpers import TOKENS, Server, call, mirrored_lines, post
from tests.helpers.mcp_helpers import PNG, structured

SETTLE_S = 20.0  # only a safety net: what the tests wait for happens in ms


def run_client(server: Server, tenant: str, body: Any, *, mode: str = "2026-07-28") -> None:
    async def main() -> None:
        headers = {"authorization": f"Bearer {TOKENS[tenant]}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(server.url, http_client=http)
            async with Client(transport, mode=mode) as client:
                with anyio.fail_after(60):
                    await body(client)

    anyio.run(main)


# -- the SDK client ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])
def test_sdk_client_calls_every_tool_over_http(server: Server, mode: str) -> None:
    called: set[str] = set()
    base = f"sdk-{mode}"

    async def use(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, result
        called.add(tool)
        return structured(result)

    async def body(client: Client) -> None:
        assert client.protocol_version == "2026-07-28"
        names = {tool.name for tool in (await client.list_tools()).tools}
        await use(client, "write_file", {"path": f"{base}/b.txt", "content": "one\ntwo\n"})
        read = await use(client, "read_file", {"path": f"{base}/b.txt"})
        assert read["content"] == "one\ntwo\n"
        await use(client, "edit_file", {"path": f"{base}/b.txt", "old_string": "two",
                                        "new_string": "2"})
        await use(client, "append_file", {"path": f"{base}/b.txt", "content": "three\n"})
        await use(client, "read_multiple_files", {"paths": [f"{base}/b.txt", "hello.txt"]})
        await use(client, "list_directory", {})
        await use(client, "list_allowed_directories", {})
        await use(client, "create_directory", {"path": f"{base}/c"})
        await use(client, "stat_file", {"path": f"{base}/b.txt"})
        await use(client, "move_file", {"source": f"{base}/b.txt",
                                        "destination": f"{base}/c/b.txt"})
        await use(client, "copy_file", {"source": f"{base}/c/b.txt",
                                        "destination": f"{base}/c/d.txt"})
        await use(client, "search_files", {"pattern": "**/*.txt"})
        await use(client, "grep", {"pattern": "thr+ee"})
        await use(client, "delete_file", {"path": f"{base}/c/d.txt"})
        await use(client, "apply_patch", {"patch": f"*** Begin Patch\n*** Update File: "
                                          f"{base}/c/b.txt\n@@\n-three\n+3\n*** End Patch\n"})
        (server.alice / "pic.png").write_bytes(PNG)
        image = await client.call_tool("read_file", {"path": "pic.png"})
        assert any(isinstance(block, types.ImageContent) for block in image.content)
        # an answer this large passes through the server undecoded (its raw path)
        big = "".join(f"{n}: caf\u00e9 \"q\" \\ \t\n" for n in range(8_000))
        (server.alice / "large-read.txt").write_text(big)
        whole = await use(client, "read_file", {"path": "large-read.txt", "limit": 10_000})
        assert (whole["content"], whole["truncated"]) == (big, False)
        assert whole["total_lines"] == 8_000
        assert names == called, names ^ called
        for path in (str(server.bob / "secret.txt"), "../bob/secret.txt"):
            escape = await client.call_tool("read_file", {"path": path})
            assert structured(escape)["error"]["code"] == "outside_workspace"
            assert SECRET not in json.dumps(escape.model_dump())

    run_client(server, "alice", body, mode=mode)
    assert (server.alice / base / "c/b.txt").read_text() == "one\n2\n3\n"


def test_a_wrong_token_fails_the_sdk_client(server: Server) -> None:
    async def main() -> None:
        headers = {"authorization": "Bearer not-a-token"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(server.url, http_client=http)
            with pytest.raises(Exception):  # noqa: B017 - whatever the SDK raises for a 401
                async with Client(transport, mode="2026-07-28") as client:
                    await client.call_tool("write_file", {"path": "wrong.txt", "content": "x"})

    anyio.run(main)
    assert not (server.alice / "wrong.txt").exists()


# -- who may call --------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "wrong", TOKENS["alice"] + "x", "Basic abc"])
def test_no_token_or_a_wrong_one_is_401_and_nothing_runs(server: Server, token: str | None) -> None:
    headers = {"authorization": token} if token == "Basic abc" else None
    status, sent, _ = post(server, call("write_file", {"path": "nope.txt", "content": "x"}),
                           token=None if token == "Basic abc" else token, headers=headers)
    assert status == 401
    assert sent["www-authenticate"].startswith("Bearer")
    assert not (server.alice / "nope.txt").exists()
    assert not (server.bob / "nope.txt").exists()


def test_a_token_never_reaches_another_tenants_files(server: Server) -> None:
    for arguments in ({"path": str(server.bob / "secret.txt")}, {"path": "../bob/secret.txt"}):
        status, _, body = post(server, call("read_file", arguments), token="alice")
        assert status == 200
        assert SECRET not in body.decode()
        assert json.loads(body)["result"]["structuredContent"]["error"]["code"] == (
            "outside_workspace")
    status, _, body = post(server, call("read_file", {"path": "secret.txt"}), token="bob")
    assert SECRET in json.loads(body)["result"]["structuredContent"]["content"]
    status, _, body = post(server, call("read_file", {"path": "secret.txt"}), token="alice")
    assert json.loads(body)["result"]["structuredContent"]["error"]["code"] == "not_found"


def test_a_session_belongs_to_its_tenant(server: Server) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}
    status, headers, _ = post(server, initialize, token="alice")
    assert status == 200
    session = headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "list_directory", "arguments": {}}}
    status, _, body = post(server, listing, token="alice", headers={"mcp-session-id": session})
    assert status == 200 and "hello.txt" in body.decode()
    status, _, body = post(server, listing, token="bob", headers={"mcp-session-id": session})
    assert status == 404 and "hello.txt" not in body.decode()


# -- what the face refuses -------------------------------------------------------------


def test_foreign_origins_and_hosts_are_refused(server: Server) -> None:
    request = call("write_file", {"path": "origin.txt", "content": "x"})
    status, _, _ = post(server, request, headers={"origin": "http://evil.example"})
    assert status == 403
    status, _, _ = post(server, request, headers={"host": f"evil.example:{server.port}"})
    assert status == 403
    assert not (server.alice / "origin.txt").exists()
    status, _, _ = post(server, call("stat_file", {"path": "hello.txt"}),
                        headers={"origin": f"http://localhost:{server.port}"})
    assert status == 200


def test_oversized_and_malformed_bodies_are_refused(server: Server) -> None:
    big = call("write_file", {"path": "big.txt", "content": "x" * 70_000})
    assert post(server, big)[0] == 413
    status, _, body = post(server, b"{not json")
    assert status == 400 and json.loads(body)["error"]["code"] == -32700
    status, _, body = post(server, b"[" + json.dumps(call("stat_file", {"path": "a"})).encode()
                           + b"]")
    assert status == 400 and json.loads(body)["error"]["code"] == -32600
    assert post(server, b'{"a": NaN}')[0] == 400
    assert post(server, call("stat_file", {"path": "a"}),
                headers={"content-type": "text/plain"})[0] == 415
    assert not (server.alice / "big.txt").exists()


def test_an_oversized_chunked_body_is_refused_while_it_streams(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + TOKENS["alice"].encode() + b"\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * 16384
        with pytest.raises(OSError):  # the server answers 413 and closes as we send
            for _ in range(64):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
            raise OSError("not refused")
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413")


def test_get_is_405(server: Server) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("GET", "/mcp", headers={"authorization": f"Bearer {TOKENS['alice']}"})
    response = connection.getresponse()
    assert response.status == 405
    connection.close()


# -- a client that goes away ---------------------------------------------------------------


def workers_of(server: Server) -> list[psutil.Process]:
    """The server's descendants: its zygote template, the zygotes and their workers."""
    return psutil.Process(server.process.pid).children(recursive=True)


def test_a_client_disconnect_cancels_its_call(server: Server) -> None:
    (server.alice / "slow.txt").write_text("a" * 40 + "b\n")
    request = json.dumps(call("grep", {"pattern": "(a+)+$"})).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + TOKENS["alice"].encode() + b"\r\n"
            + mirrored_lines(request) + b"content-length: %d\r\n\r\n%s" % (len(request), request)
        )
        deadline = time.monotonic() + SETTLE_S
        busy: list[psutil.Process] = []
        while not busy:  # the grep runs: a worker burns CPU
            assert time.monotonic() < deadline, "the grep never ran"
            busy = [p for p in workers_of(server) if p.cpu_percent(0.05) > 30]
    # the socket is closed: the worker must go long before the call's 60 s timeout
    deadline = time.monotonic() + SETTLE_S
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in busy):
        assert time.monotonic() < deadline, "the disconnected client's call still runs"
        time.sleep(0.05)
    status, _, body = post(server, call("stat_file", {"path": "hello.txt"}))
    assert status == 200 and json.loads(body)["result"]["structuredContent"]["exists"]
