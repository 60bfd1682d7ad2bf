"""`corral serve` driven as a subprocess by the official MCP SDK's stdio client
(the conformance check), plus raw JSON-RPC for what a well-behaved client never sends."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters

from tests.helpers.calls import SECRET
from tests.helpers.mcp_helpers import (
    PNG,
    REPO,
    SUPERVISED_DOCS,
    error_code,
    run_session,
    serve_argv,
    structured,
    write_config,
)


def test_initialize_and_list_tools(workspace: Path) -> None:
    async def body(session: ClientSession) -> None:
        assert session.protocol_version == "2025-11-25"
        assert session.server_info is not None and session.server_info.name == "corral"
        listed = await session.list_tools()
        names = {tool.name for tool in listed.tools}
        assert {"read_file", "write_file", "edit_file", "grep", "stat_file"} <= names
        assert "delete_file" not in names  # off by default
        for tool in listed.tools:
            assert tool.description and tool.input_schema["type"] == "object"
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is not None

    run_session(workspace, body)


def test_call_every_tool(tmp_path: Path, workspace: Path) -> None:
    extra = write_config(tmp_path, '[tools]\ndelete_file = "allow"\n')
    (workspace / "pic.png").write_bytes(PNG)
    called: set[str] = set()

    async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict:
        result = await session.call_tool(tool, arguments)
        assert not result.is_error, result
        assert isinstance(result.content[0], types.TextContent)
        called.add(tool)
        return structured(result)

    async def body(session: ClientSession) -> None:
        written = await call(session, "write_file", {"path": "a/b.txt", "content": "one\ntwo\n"})
        assert written["created"] is True
        read = await call(session, "read_file", {"path": "a/b.txt"})
        assert read["content"] == "one\ntwo\n" and read["version"] == written["version"]
        edited = await call(
            session, "edit_file", {"path": "a/b.txt", "old_string": "two", "new_string": "2"}
        )
        assert edited["replacements"] == 1
        await call(session, "append_file", {"path": "a/b.txt", "content": "three\n"})
        assert (workspace / "a/b.txt").read_text() == "one\n2\nthree\n"
        many = await call(session, "read_multiple_files", {"paths": ["a/b.txt", "hello.txt"]})
        assert len(many["files"]) == 2
        listing = await call(session, "list_directory", {"path": "."})
        assert {"a", "hello.txt"} <= {entry["name"] for entry in listing["entries"]}
        assert (await call(session, "create_directory", {"path": "c"}))["created"] is True
        assert (await call(session, "stat_file", {"path": "a/b.txt"}))["type"] == "file"
        await call(session, "move_file", {"source": "a/b.txt", "destination": "c/b.txt"})
        await call(session, "copy_file", {"source": "c/b.txt", "destination": "c/d.txt"})
        found = await call(session, "search_files", {"pattern": "**/*.txt"})
        assert "c/d.txt" in found["matches"]
        grep = await call(session, "grep", {"pattern": "thr+ee"})
        assert {match["path"] for match in grep["matches"]} == {"c/b.txt", "c/d.txt"}
        assert (await call(session, "delete_file", {"path": "c/d.txt"}))["deleted"] is True
        assert not (workspace / "c/d.txt").exists()
        image = await session.call_tool("read_file", {"path": "pic.png"})
        blocks = [block for block in image.content if isinstance(block, types.ImageContent)]
        assert blocks and blocks[0].mime_type == "image/png"
        assert base64.b64decode(blocks[0].data) == PNG
        assert "image" not in structured(image)
        # answers this large pass through the server undecoded, but for an image's
        big_png = PNG + b"\0" * 200_000
        (workspace / "big.png").write_bytes(big_png)
        image = await session.call_tool("read_file", {"path": "big.png"})
        blocks = [block for block in image.content if isinstance(block, types.ImageContent)]
        assert base64.b64decode(blocks[0].data) == big_png and "image" not in structured(image)
        big = "".join(f"{n}: caf\u00e9 \"q\" \\ \t\n" for n in range(8_000))
        (workspace / "big.txt").write_text(big)
        whole = await call(session, "read_file", {"path": "big.txt", "limit": 10_000})
        assert (whole["content"], whole["truncated"]) == (big, False)

    run_session(workspace, body, extra=extra)
    assert called == {
        "write_file",
        "read_file",
        "edit_file",
        "append_file",
        "read_multiple_files",
        "list_directory",
        "create_directory",
        "stat_file",
        "move_file",
        "copy_file",
        "search_files",
        "grep",
        "delete_file",
    }


def test_escapes_are_error_results(workspace: Path, outside: Path) -> None:
    (workspace / "link").symlink_to(outside / "secret.txt")

    async def body(session: ClientSession) -> None:
        for path in ("../outside/secret.txt", str(outside / "secret.txt"), "link"):
            result = await session.call_tool("read_file", {"path": path})
            assert error_code(result) == "outside_workspace"
            assert SECRET not in json.dumps(result.model_dump())
        result = await session.call_tool("write_file", {"path": "../outside/x", "content": "x"})
        assert error_code(result) == "outside_workspace"
        result = await session.call_tool("read_file", {"path": "missing.txt"})
        assert error_code(result) == "not_found"
        result = await session.call_tool("read_file", {"path": 7})
        assert error_code(result) == "invalid_arguments"

    run_session(workspace, body)
    assert not (outside / "x").exists()


def test_denied_tool_is_absent_and_refused(tmp_path: Path, workspace: Path) -> None:
    extra = write_config(tmp_path, '[tools]\nwrite_file = "deny"\n')

    async def body(session: ClientSession) -> None:
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert "write_file" not in names and "read_file" in names
        result = await session.call_tool("write_file", {"path": "x.txt", "content": "x"})
        assert error_code(result) == "tool_disabled"

    run_session(workspace, body, extra=extra)
    assert not (workspace / "x.txt").exists()


SUPERVISED_TOOL = '[tools]\nwrite_file = "supervised"\n'


@pytest.mark.parametrize("config", [SUPERVISED_TOOL, SUPERVISED_DOCS], ids=["tool", "path"])
@pytest.mark.parametrize("action", ["accept", "decline"])
def test_supervised_call_asks_by_elicitation(
    tmp_path: Path, workspace: Path, config: str, action: str
) -> None:
    extra = write_config(tmp_path, config)
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=action)

    async def body(session: ClientSession) -> None:
        result = await session.call_tool("write_file", {"path": "docs/x.md", "content": "x"})
        if action == "accept":
            assert not result.is_error, result
        else:
            assert error_code(result) == "approval_denied"
        other = await session.call_tool("write_file", {"path": "y", "content": "y"})
        assert other.is_error == (config == SUPERVISED_TOOL and action == "decline")

    run_session(workspace, body, extra=extra, elicit=elicit)
    expected_asks = 2 if config == SUPERVISED_TOOL else 1
    assert len(asked) == expected_asks and "write_file" in asked[0] and "docs/x.md" in asked[0]
    assert ("ask-docs" in asked[0]) == (config == SUPERVISED_DOCS)
    assert (workspace / "docs/x.md").exists() == (action == "accept")


def test_supervised_tool_without_elicitation_needs_approval(
    tmp_path: Path, workspace: Path
) -> None:
    extra = write_config(tmp_path, '[tools]\nwrite_file = "supervised"\n')

    async def body(session: ClientSession) -> None:
        result = await session.call_tool("write_file", {"path": "x.txt", "content": "x"})
        assert error_code(result) == "approval_required"

    run_session(workspace, body, extra=extra)
    assert not (workspace / "x.txt").exists()


def test_unknown_tool_is_a_protocol_error(workspace: Path) -> None:
    async def body(session: ClientSession) -> None:
        with pytest.raises(Exception, match="no_such_tool"):
            await session.call_tool("no_such_tool", {})
        assert (await session.call_tool("stat_file", {"path": "hello.txt"})).is_error is False

    run_session(workspace, body)


# -- raw JSON-RPC ----------------------------------------------------------------

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}},
}


def raw_session(workspace: Path, lines: list[bytes]) -> dict[Any, dict[str, Any]]:
    """Send `lines`, close stdin, and return the responses by id (None: id-less errors,
    collected in a list) once the server has exited on EOF."""
    proc = subprocess.run(
        serve_argv(workspace),
        input=b"".join(line + b"\n" for line in lines),
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    responses: dict[Any, Any] = {None: []}
    for line in proc.stdout.splitlines():
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0"
        if message["id"] is None:
            responses[None].append(message)
        else:
            assert message["id"] not in responses
            responses[message["id"]] = message
    return responses


def request(request_id: Any, method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def test_raw_protocol_errors(workspace: Path) -> None:
    lines = [
        json.dumps(INIT).encode(),
        b"{not json",
        b"\xff\xfe",
        b"[" * 100_000,
        b"[1, 2]",
        b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}',
        b'{"id": 1, "method": "ping"}',
        request(2, "no/such/method"),
        request(3, "tools/call", {"arguments": {}}),
        request(4, "tools/call", {"name": "read_file", "arguments": [1]}),
        request(5, "tools/call", ["read_file"]),
        request(6, "initialize", INIT["params"]),
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        b'{"jsonrpc": "2.0", "method": "notifications/unknown"}',
        b'{"jsonrpc": "2.0", "id": "late", "result": {}}',
        b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}}',
        b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]}',
        b'{"jsonrpc": "2.0", "id": 8, "method": "ping", "params": null}',
        b'{"jsonrpc": "2.0", "id": 9}',
        request(7, "ping"),
        request("s", "tools/call", {"name": "read_file", "arguments": {"path": "hello.txt"}}),
    ]
    responses = raw_session(workspace, lines)
    assert responses[0]["result"]["protocolVersion"] == "2025-06-18"
    assert [m["error"]["code"] for m in responses[None]] == [-32700, -32700, -32700, -32600, -32600]
    assert responses[1]["error"]["code"] == -32600
    assert responses[2]["error"]["code"] == -32601
    assert responses[3]["error"]["code"] == -32602
    assert responses[4]["error"]["code"] == -32602
    assert responses[5]["error"]["code"] == -32602
    assert responses[6]["error"]["code"] == -32600
    assert responses[7]["result"] == responses[8]["result"] == {}
    assert responses[9]["error"]["code"] == -32600
    assert responses["s"]["result"]["structuredContent"]["content"] == "hello\nworld\n"
    assert set(responses) == {None, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, "s"}


def test_version_negotiation(workspace: Path) -> None:
    old = dict(INIT, params=dict(INIT["params"], protocolVersion="2024-11-05"))
    future = dict(INIT, id=1, params=dict(INIT["params"], protocolVersion="2099-01-01"))
    call = request(2, "tools/call", {"name": "stat_file", "arguments": {"path": "hello.txt"}})
    responses = raw_session(workspace, [json.dumps(old).encode(), call])
    assert responses[0]["result"]["protocolVersion"] == "2024-11-05"
    assert "structuredContent" not in responses[2]["result"]  # added in 2025-06-18
    responses = raw_session(workspace, [json.dumps(future).encode()])
    assert responses[1]["result"]["protocolVersion"] == "2025-11-25"


def test_eof_finishes_calls_in_flight(workspace: Path) -> None:
    calls = [
        request(
            i,
            "tools/call",
            {"name": "write_file", "arguments": {"path": f"f{i}.txt", "content": str(i)}},
        )
        for i in range(1, 21)
    ]
    responses = raw_session(workspace, [json.dumps(INIT).encode(), *calls])
    assert all(responses[i]["result"]["isError"] is False for i in range(1, 21))
    assert sorted(p.name for p in workspace.glob("f*.txt")) == sorted(
        f"f{i}.txt" for i in range(1, 21)
    )


def test_cancel_while_waiting_for_approval(tmp_path: Path, workspace: Path) -> None:
    """A call cancelled while its elicitation is pending gets no response, writes
    nothing, and the server keeps serving; its id cannot be reused while in flight."""
    extra = write_config(tmp_path, '[tools]\nwrite_file = "supervised"\n')
    proc = subprocess.Popen(
        serve_argv(workspace, *extra),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, Any]) -> None:
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def receive() -> dict[str, Any]:
        return json.loads(proc.stdout.readline())

    try:
        send(dict(INIT, params=dict(INIT["params"], capabilities={"elicitation": {}})))
        assert receive()["id"] == 0
        send(
            json.loads(
                request(
                    1,
                    "tools/call",
                    {"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}},
                )
            )
        )
        asked = receive()
        assert asked["method"] == "elicitation/create" and "mode" not in asked["params"]
        send(
            json.loads(
                request(1, "tools/call", {"name": "stat_file", "arguments": {"path": "hello.txt"}})
            )
        )
        assert receive()["error"]["code"] == -32600  # id 1 is still in flight
        send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        send(json.loads(request(2, "ping")))
        assert receive() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read() == b""
    finally:
        proc.kill()
        proc.wait()
    assert not (workspace / "x.txt").exists()


def test_sandbox_that_cannot_start_fails_initialize(tmp_path: Path) -> None:
    """The workspace vanishes after the command line was checked: initialize gets a
    JSON-RPC error naming the cause and the server exits 1."""
    workspace = tmp_path / "gone"
    workspace.mkdir()
    proc = subprocess.Popen(
        serve_argv(workspace),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(request(1, "ping") + b"\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    workspace.rmdir()
    out, err = proc.communicate(json.dumps(INIT).encode() + b"\n", timeout=60)
    reply = json.loads(out)
    assert reply["error"]["code"] == -32603 and str(workspace) in reply["error"]["message"]
    assert proc.returncode == 1 and b"cannot start the sandbox" in err


def test_high_level_client_falls_back_from_discover(workspace: Path) -> None:
    """mcp.Client (mode "auto") probes `server/discover` first; our -32601 sends it
    to the initialize handshake."""
    argv = serve_argv(workspace)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env={"PYTHONPATH": str(REPO)})

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(params) as client:
                result = await client.call_tool("read_file", {"path": "hello.txt"})
                assert result.structured_content["content"] == "hello\nworld\n"

    anyio.run(main)


def test_a_name_that_is_not_utf8_does_not_break_the_session(workspace: Path) -> None:
    with open(os.path.join(os.fsencode(workspace), b"bad\xff.txt"), "wb") as handle:
        handle.write(b"y")

    async def body(session: ClientSession) -> None:
        listing = structured(await session.call_tool("list_directory", {"path": "."}))
        assert "bad\ufffd.txt" in {entry["name"] for entry in listing["entries"]}
        assert (await session.call_tool("stat_file", {"path": "hello.txt"})).is_error is False

    run_session(workspace, body)
