"""The 2026-07-28 (stateless) revision beside the handshake ones: the official SDK
client pinned to 2026-07-28 and in auto mode, approvals through input_required,
and both eras interleaved on one server process answering the same."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from corral.faces.mcp_roots import client_roots
from tests.helpers.calls import SECRET
from tests.helpers.mcp_helpers import PNG, REPO, error_code, serve_argv, structured, write_config

Body = Callable[[Client], Awaitable[None]]
MODES = ["2026-07-28", "auto"]


def run_client(
    workspace: Path,
    body: Body,
    *,
    mode: str,
    extra: tuple[str, ...] = (),
    elicit: Callable[..., Awaitable[types.ElicitResult]] | None = None,
    roots: list[str] | None = None,
    expect: str = "2026-07-28",
) -> None:
    """Start `corral serve` and drive it with the SDK's high-level Client."""

    async def list_roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in roots or ()])

    async def main() -> None:
        argv = serve_argv(workspace, *extra)
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env={"PYTHONPATH": str(REPO)}, cwd=workspace
        )
        client = Client(
            params, mode=mode, elicitation_callback=elicit,
            list_roots_callback=list_roots if roots is not None else None,
        )
        async with client:
            assert client.protocol_version == ("2025-11-25" if expect == "legacy" else expect)
            with anyio.fail_after(60):
                await body(client)

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_sdk_client_lists_and_calls_every_tool(
    tmp_path: Path, workspace: Path, outside: Path, mode: str
) -> None:
    extra = write_config(tmp_path, '[tools]\ndelete_file = "allow"\n')
    (workspace / "pic.png").write_bytes(PNG)
    (workspace / "link").symlink_to(outside / "secret.txt")
    called: set[str] = set()
    schemas: dict[str, dict[str, Any]] = {}

    async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, result
        called.add(tool)
        jsonschema.validate(structured(result), schemas[tool])
        return structured(result)

    async def body(client: Client) -> None:
        listed = await client.list_tools()
        schemas.update({tool.name: tool.output_schema or {} for tool in listed.tools})
        if mode == "auto":  # a pinned client never asks server/discover who we are
            assert client.server_info is not None and client.server_info.name == "corral"
        names = {tool.name for tool in listed.tools}
        for tool in listed.tools:
            assert tool.title and tool.output_schema is not None
            assert tool.annotations is not None and tool.annotations.open_world_hint is False
        await call(client, "write_file", {"path": "a/b.txt", "content": "one\ntwo\n"})
        assert (await call(client, "read_file", {"path": "a/b.txt"}))["content"] == "one\ntwo\n"
        await call(client, "edit_file", {"path": "a/b.txt", "old_string": "two", "new_string": "2"})
        await call(client, "append_file", {"path": "a/b.txt", "content": "three\n"})
        await call(client, "read_multiple_files", {"paths": ["a/b.txt", "hello.txt"]})
        await call(client, "list_directory", {})
        await call(client, "create_directory", {"path": "c"})
        await call(client, "stat_file", {"path": "a/b.txt"})
        await call(client, "move_file", {"source": "a/b.txt", "destination": "c/b.txt"})
        await call(client, "copy_file", {"source": "c/b.txt", "destination": "c/d.txt"})
        await call(client, "search_files", {"pattern": "**/*.txt"})
        await call(client, "grep", {"pattern": "thr+ee"})
        await call(client, "delete_file", {"path": "c/d.txt"})
        await call(client, "apply_patch", {"patch": "*** Begin Patch\n*** Update File: "
                                           "c/b.txt\n@@\n-three\n+3\n*** End Patch\n"})
        roots = await call(client, "list_allowed_directories", {})
        assert roots["roots"] == [{"path": str(workspace), "mode": "rw"}]
        image = await client.call_tool("read_file", {"path": "pic.png"})
        assert any(isinstance(block, types.ImageContent) for block in image.content)
        assert names == called
        for path in ("../outside/secret.txt", str(outside / "secret.txt"), "link"):
            escape = await client.call_tool("read_file", {"path": path})
            assert error_code(escape) == "outside_workspace"
            assert SECRET not in json.dumps(escape.model_dump())
            # a failure's structuredContent fits outputSchema too (some clients check it)
            jsonschema.validate(structured(escape), schemas["read_file"])

    run_client(workspace, body, mode=mode, extra=extra)
    assert (workspace / "c/b.txt").read_text() == "one\n2\n3\n"


SUPERVISED_TOOL = '[tools]\nwrite_file = "supervised"\n'
SUPERVISED_PATH = """
[[rules]]
name = "ask-for-docs"
action = "supervised"
tools = ["write_file", "move_file"]
paths = ["docs/**"]
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", [SUPERVISED_TOOL, SUPERVISED_PATH], ids=["tool", "path"])
@pytest.mark.parametrize("action", ["accept", "decline"])
def test_supervised_write_asks_through_input_required(
    tmp_path: Path, workspace: Path, config: str, action: str, mode: str
) -> None:
    extra = write_config(tmp_path, config)
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=action)

    async def body(client: Client) -> None:
        result = await client.call_tool("write_file", {"path": "docs/x.md", "content": "x"})
        if action == "accept":
            assert not result.is_error, result
        else:
            assert error_code(result) == "approval_denied"

    run_client(workspace, body, mode=mode, extra=extra, elicit=elicit)
    assert len(asked) == 1 and "write_file" in asked[0] and "docs/x.md" in asked[0]
    assert ("ask-for-docs" in asked[0]) == (config == SUPERVISED_PATH)
    assert (workspace / "docs/x.md").exists() == (action == "accept")


def test_two_approvals_in_one_call_take_two_rounds(tmp_path: Path, workspace: Path) -> None:
    """move_file with both ends under a supervised rule asks once per end; the
    first answer rides in the sealed requestState while the second is asked."""
    extra = write_config(tmp_path, SUPERVISED_PATH)
    (workspace / "docs").mkdir()
    (workspace / "docs/a.md").write_text("a")
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept")

    async def body(client: Client) -> None:
        moved = await client.call_tool(
            "move_file", {"source": "docs/a.md", "destination": "docs/b.md"}
        )
        assert not moved.is_error, moved

    run_client(workspace, body, mode="2026-07-28", extra=extra, elicit=elicit)
    assert len(asked) >= 1 and (workspace / "docs/b.md").read_text() == "a"


def test_supervised_without_elicitation_needs_approval(tmp_path: Path, workspace: Path) -> None:
    extra = write_config(tmp_path, SUPERVISED_TOOL)

    async def body(client: Client) -> None:
        result = await client.call_tool("write_file", {"path": "x.txt", "content": "x"})
        assert error_code(result) == "approval_required"

    run_client(workspace, body, mode="2026-07-28", extra=extra)
    assert not (workspace / "x.txt").exists()


# -- client roots narrow, never widen ------------------------------------------------


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
def test_client_roots_narrow_and_never_widen(workspace: Path, outside: Path, mode: str) -> None:
    (workspace / "src").mkdir()
    (workspace / "src/a.txt").write_text("a\n")
    (workspace / "src/up").symlink_to("../hello.txt")  # resolves outside the client root
    roots = [(workspace / "src").as_uri(), outside.as_uri()]

    async def body(client: Client) -> None:
        first = await client.call_tool("read_file", {"path": "src/a.txt"})
        assert not first.is_error, first
        for path in ("hello.txt", "src/up", "src/../hello.txt"):
            denied = await client.call_tool("read_file", {"path": path})
            assert error_code(denied) == "path_denied", path
            assert structured(denied)["error"]["rule"] == "client-roots"
        wrote = await client.call_tool("write_file", {"path": "new.txt", "content": "x"})
        assert error_code(wrote) == "path_denied"
        escape = await client.call_tool("read_file", {"path": str(outside / "secret.txt")})
        assert error_code(escape) == "outside_workspace"  # a client root is no new root
        listed = await client.call_tool("list_allowed_directories", {})
        assert structured(listed)["roots"] == [{"path": str(workspace / "src"), "mode": "rw"}]

    run_client(workspace, body, mode=mode, roots=roots, expect=mode)
    assert not (workspace / "new.txt").exists()


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
def test_client_roots_that_hold_the_workspace_or_none_leave_it_whole(
    workspace: Path, mode: str
) -> None:
    async def body(client: Client) -> None:
        assert not (await client.call_tool("read_file", {"path": "hello.txt"})).is_error
        listed = await client.call_tool("list_allowed_directories", {})
        assert structured(listed)["roots"] == [{"path": str(workspace), "mode": "rw"}]

    run_client(workspace, body, mode=mode, roots=[workspace.parent.as_uri()], expect=mode)
    run_client(workspace, body, mode=mode, roots=[], expect=mode)


def test_client_roots_elsewhere_leave_nothing(workspace: Path, outside: Path) -> None:
    async def body(client: Client) -> None:
        denied = await client.call_tool("read_file", {"path": "hello.txt"})
        assert error_code(denied) == "path_denied"
        listed = await client.call_tool("list_allowed_directories", {})
        assert structured(listed)["roots"] == []

    run_client(workspace, body, mode="2026-07-28", roots=[outside.as_uri()])


def test_client_roots_answer_parsing() -> None:
    assert client_roots({"roots": [{"uri": "file:///a/b/../c"}, {"uri": "https://x/y"},
                                   {"uri": "file://localhost/d%20e"}]}) == ["/a/c", "/d e"]
    assert client_roots({"roots": [{"uri": "https://x/y"}]}) is None  # no file root: no narrowing
    assert client_roots({"roots": []}) is None
    assert client_roots({"roots": [{"uri": "file://otherhost/x"}]}) is None
    for bad in (None, {}, {"roots": "x"}, {"roots": [{"name": "no uri"}]}):
        with pytest.raises(ValueError):
            client_roots(bad)


# -- raw JSON-RPC: both eras on one process ----------------------------------------

CAPABILITIES = {"elicitation": {"form": {}}}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
}


class Raw:
    """A `corral serve` process spoken to one JSON-RPC line at a time."""

    def __init__(self, workspace: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            serve_argv(workspace, *extra), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        self.ids = iter(range(1, 1_000_000))

    def ask(self, method: str, params: dict[str, Any], *, envelope: bool) -> dict[str, Any]:
        if envelope:
            params = {**params, "_meta": ENVELOPE}
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert answer["id"] == message["id"], answer
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


def without_era(result: dict[str, Any]) -> dict[str, Any]:
    """A result minus what only the stateless era adds (and the volatile mtime)."""
    plain = {k: v for k, v in result.items() if k not in ("resultType", "_meta", "ttlMs",
                                                          "cacheScope")}
    return json.loads(json.dumps(plain).replace(' "modified"', ' "m"'))


def test_both_eras_interleaved_on_one_process_answer_the_same(workspace: Path) -> None:
    raw = Raw(workspace)
    try:
        init = raw.ask("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "t", "version": "0"}},
                       envelope=False)
        assert init["result"]["protocolVersion"] == "2025-11-25"
        discovered = raw.ask("server/discover", {}, envelope=True)["result"]
        assert discovered["supportedVersions"] == ["2026-07-28"]
        assert discovered["resultType"] == "complete"
        old, new = (raw.ask("tools/list", {}, envelope=e)["result"] for e in (False, True))
        assert new["resultType"] == "complete" and new["cacheScope"] == "private"
        assert without_era(old) == without_era(new)
        calls = [
            ("read_file", {"path": "hello.txt"}),
            ("stat_file", {"path": "hello.txt"}),
            ("read_file", {"path": "../outside/secret.txt"}),
            ("grep", {"pattern": "wor", "glob": None}),
            ("list_directory", {"path": None}),
            ("read_file", {"path": "hello.txt", "offset": "x"}),
            ("list_allowed_directories", {}),
        ]
        for name, arguments in calls:
            params = {"name": name, "arguments": arguments}
            old, new = (raw.ask("tools/call", params, envelope=e)["result"] for e in (False, True))
            assert new["resultType"] == "complete"
            assert without_era(old) == without_era(new), name
        bad = raw.ask("tools/call", {"name": "nope", "arguments": {}}, envelope=True)
        assert bad["error"]["code"] == -32602
        future = raw.ask("tools/list", {"_meta": {**ENVELOPE,
                         "io.modelcontextprotocol/protocolVersion": "2099-01-01"}},
                         envelope=False)
        assert future["error"]["code"] == -32022
        assert future["error"]["data"]["supported"] == ["2026-07-28"]
        no_caps = raw.ask("tools/list", {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}, envelope=False)
        assert no_caps["error"]["code"] == -32602
    finally:
        raw.close()


def test_stateless_without_initialize_and_sealed_state(tmp_path: Path, workspace: Path) -> None:
    raw = Raw(workspace, *write_config(tmp_path, SUPERVISED_TOOL))
    try:
        params = {"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}
        first = raw.ask("tools/call", params, envelope=True)["result"]
        assert first["resultType"] == "input_required"
        (key, question), = first["inputRequests"].items()
        assert question["method"] == "elicitation/create"
        state = first["requestState"]
        accept = {key: {"action": "accept", "content": {}}}
        # the state is bound to this call: another call's retry may not use it
        other = {"name": "write_file", "arguments": {"path": "y.txt", "content": "y"},
                 "inputResponses": accept, "requestState": state}
        assert raw.ask("tools/call", other, envelope=True)["error"]["code"] == -32602
        forged = {**params, "inputResponses": accept, "requestState": state[:-2] + "AA"}
        assert raw.ask("tools/call", forged, envelope=True)["error"]["code"] == -32602
        # an answer nobody asked for (no state) is not an approval
        unasked = raw.ask("tools/call", {**params, "inputResponses": accept}, envelope=True)
        assert unasked["result"]["resultType"] == "input_required"
        assert not (workspace / "y.txt").exists() and not (workspace / "x.txt").exists()
        done = raw.ask("tools/call", {**params, "inputResponses": accept, "requestState": state},
                       envelope=True)["result"]
        assert done["resultType"] == "complete" and done["isError"] is False
        assert (workspace / "x.txt").read_text() == "x"
    finally:
        raw.close()


def test_unknown_method_and_handshake_only_requests(workspace: Path) -> None:
    raw = Raw(workspace)
    try:
        assert raw.ask("tools/list", {}, envelope=False)["error"]["code"] == -32600
        assert raw.ask("no/such", {}, envelope=True)["error"]["code"] == -32601
    finally:
        raw.close()


def test_handshake_roots_fail_closed_and_are_asked_again_on_change(workspace: Path) -> None:
    raw = Raw(workspace)
    assert raw.proc.stdin is not None and raw.proc.stdout is not None

    def send(message: dict[str, Any]) -> None:
        raw.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        raw.proc.stdin.flush()

    def read() -> dict[str, Any]:
        return json.loads(raw.proc.stdout.readline())

    try:
        raw.ask("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
                               "clientInfo": {"name": "t", "version": "0"}}, envelope=False)
        call = {"name": "read_file", "arguments": {"path": "hello.txt"}}
        send({"id": "c1", "method": "tools/call", "params": call})
        asked = read()
        assert asked["method"] == "roots/list"
        send({"id": asked["id"], "error": {"code": -32603, "message": "no roots today"}})
        failed = read()
        assert failed["id"] == "c1" and failed["result"]["isError"] is True
        assert failed["result"]["structuredContent"]["error"]["code"] == "path_denied"
        # asked again (the failed answer is not kept); now it names a folder elsewhere
        send({"id": "c2", "method": "tools/call", "params": call})
        asked = read()
        assert asked["method"] == "roots/list"
        send({"id": asked["id"], "result": {"roots": [{"uri": "file:///nowhere"}]}})
        assert read()["result"]["structuredContent"]["error"]["rule"] == "client-roots"
        # the answer is kept until the client says its roots changed
        send({"id": "c3", "method": "tools/call", "params": call})
        assert read()["id"] == "c3"
        send({"method": "notifications/roots/list_changed"})
        send({"id": "c4", "method": "tools/call", "params": call})
        asked = read()
        assert asked["method"] == "roots/list"
        send({"id": asked["id"], "result": {"roots": [{"uri": workspace.as_uri()}]}})
        answer = read()
        assert answer["id"] == "c4" and answer["result"]["isError"] is False
    finally:
        raw.close()
