"""Clients that hand a model structuredContent instead of the text content
(pydantic-ai's MCP toolset, fastmcp's Client): what the model would receive still
carries the numbered lines and the paging hint of a long read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from mcp import ClientSession
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ToolReturnPart

from corral import Sandbox
from corral.tools.formats import mcp_tool
from tests.helpers.http_helpers import call, post, running_server, tenant
from tests.helpers.mcp_helpers import REPO, run_session, serve_argv

LONG = "".join(f"line {n}\n" for n in range(1, 101))


def _transport(ws: Path) -> StdioTransport:
    argv = serve_argv(ws)
    return StdioTransport(command=sys.executable, args=argv[1:], env={"PYTHONPATH": str(REPO)},
                          cwd=str(ws))


def _seen(shown: str) -> None:
    """Numbered lines (cat -n) and the hint to page on, as corral's text has them."""
    assert "     1\tline 1" in shown and "     3\tline 3" in shown, shown
    assert "offset=4" in shown, shown


@pytest.fixture
def long_ws(ws: Path) -> Path:
    (ws / "long.txt").write_text(LONG)
    return ws


def test_pydantic_ai_shows_the_model_the_numbered_text(long_ws: Path) -> None:
    async def main() -> Any:
        async with MCPToolset(_transport(long_ws)) as toolset:
            return await toolset.direct_call_tool("read_file", {"path": "long.txt", "limit": 3})

    mapped = anyio.run(main)
    assert isinstance(mapped, dict)  # the structured content, not the text block
    shown = ToolReturnPart(tool_name="read_file", content=mapped).model_response_str()
    # the model reads that dict as JSON: the text is in it, escaped as JSON escapes it
    assert '"     1\\tline 1\\n' in shown and "continue with offset=4" in shown, shown
    _seen(json.loads(shown)["text"])


def test_fastmcp_client_data_carries_the_numbered_text(long_ws: Path) -> None:
    async def main() -> Any:
        async with Client(_transport(long_ws)) as client:
            return await client.call_tool("read_file", {"path": "long.txt", "limit": 3})

    result = anyio.run(main)
    data = result.data
    text = data["text"] if isinstance(data, dict) else data.text
    _seen(text)
    assert result.structured_content["content"] == "line 1\nline 2\nline 3\n"


def test_without_structured_text_the_text_is_in_content_only(long_ws: Path) -> None:
    """--no-structured-text: structuredContent is the result alone (still what
    outputSchema describes), and content still carries the numbered text; the
    official SDK client, which validates structuredContent, accepts it."""
    seen: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        schemas = {tool.name: tool.output_schema for tool in (await session.list_tools()).tools}
        result = await session.call_tool("read_file", {"path": "long.txt", "limit": 3})
        seen.update(schema=schemas["read_file"], result=result)

    run_session(long_ws, body, extra=("--no-structured-text",))
    result = seen["result"]
    assert not result.is_error
    assert "text" not in result.structured_content
    assert result.structured_content["content"] == "line 1\nline 2\nline 3\n"
    jsonschema.validate(result.structured_content, seen["schema"])
    _seen(result.content[0].text)


def _read_three(ws: Path, client: str | None, *extra: str) -> Any:
    seen: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        seen["result"] = await session.call_tool("read_file", {"path": "long.txt", "limit": 3})

    run_session(ws, body, extra=extra, client=client)
    return seen["result"]


def test_a_client_named_as_the_python_sdk_gets_the_text_in_structured_content(
    long_ws: Path,
) -> None:
    """The SDK's default name is what pydantic-ai (and other frameworks on that SDK)
    send: by default their structuredContent carries the text."""
    result = _read_three(long_ws, None)
    assert result.structured_content["text"] == result.content[0].text
    _seen(result.structured_content["text"])


def test_another_client_gets_the_text_once_unless_told(long_ws: Path) -> None:
    """A client named otherwise (one that shows the model content) gets the text in
    content alone: a read's text travels twice, not three times; --structured-text
    adds it for every client."""
    result = _read_three(long_ws, "claude-code")
    assert "text" not in result.structured_content
    assert result.structured_content["content"] == "line 1\nline 2\nline 3\n"
    _seen(result.content[0].text)
    forced = _read_three(long_ws, "claude-code", "--structured-text")
    assert forced.structured_content["text"] == forced.content[0].text


def test_no_structured_text_is_refused_with_jsonl(ws: Path) -> None:
    done = subprocess.run([*serve_argv(ws, "--jsonl", "--no-structured-text")], input=b"",
                          capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=60)
    assert done.returncode != 0
    assert b"--no-structured-text are for MCP" in done.stderr


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6364f8ff1f0000050001a5f645400000000049454e44ae426082")


def test_no_structured_text_over_http_stateless_text_image_and_error(tmp_path: Path) -> None:
    """--http passes the flag to every tenant's sessions: a stateless (2026-07-28)
    read's structuredContent is the contract's result alone (valid against its
    outputSchema), an image's leaves its data to content, an error is unchanged."""
    alice = tmp_path / "alice"
    alice.mkdir()
    (alice / "a.txt").write_text("one\ntwo\n")
    (alice / "p.png").write_bytes(PNG)
    (tmp_path / "tenants.toml").write_text(tenant("alice", f'workspace = "{alice}"'))
    served = running_server(tmp_path, alice, alice, "--no-structured-text")
    server = next(served)
    try:
        replies = [json.loads(post(server, call("read_file", {"path": path}))[2])["result"]
                   for path in ("a.txt", "p.png", "nope.txt")]
    finally:
        served.close()
    text, image, error = replies
    assert text["resultType"] == "complete"
    assert "text" not in text["structuredContent"]
    assert text["structuredContent"]["content"] == "one\ntwo\n"
    assert text["content"][0]["text"].endswith("2\ttwo")
    assert image["content"][1]["type"] == "image" and "image" not in image["structuredContent"]
    with Sandbox(alice) as sb:
        schema = mcp_tool(next(s for s in sb.tools() if s["name"] == "read_file"), strict=False)
    for reply in (text, image):
        jsonschema.validate(reply["structuredContent"], schema["outputSchema"])
    assert error["isError"] and error["structuredContent"]["error"]["code"] == "not_found"
