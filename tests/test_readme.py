"""The README's promises, run as written: the quick-start call prints what the
README shows, the MCP client setup it shows is what `corral mcp-config` prints
and starts a working server, and the Python example runs a model's tool call
end to end (against a stubbed provider)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.helpers.terminal import on_terminal_stdout

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
PYTHON = "/home/me/corral/.venv/bin/python3"  # the README's stand-in for sys.executable
PROJECT = "/path/to/project"
# The HTTP library this openai release is built on (httpx; httpx2 in later releases).
http = sys.modules[openai.DefaultHttpxClient.__mro__[1].__module__.partition(".")[0]]


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def block_with(language: str, needle: str) -> str:
    (block,) = [b for b in readme_blocks(language) if needle in b]
    return block


def mine(text: str, workspace: Path) -> str:
    """The README's placeholders replaced by this interpreter and a real workspace."""
    return text.replace(PYTHON, sys.executable).replace(PROJECT, str(workspace))


def test_quick_start_prints_what_the_readme_shows() -> None:
    setup = block_with("sh", "corral call read_file").strip().splitlines()
    assert setup[0].startswith("python3 -m venv ") and setup[1] == "pip install ."
    argv = shlex.split(setup[-1])
    assert argv[0] == "corral"
    command = shutil.which("corral")
    assert command is not None, "the package is not installed: `pip install .` puts corral on PATH"
    code, out, err = on_terminal_stdout(*argv[1:], command=[command])
    assert code == 0 and err == ""
    shown = block_with("text", "File tools for AI agents")
    assert out == shown  # the README's own line count included: it is kept true
    assert f" of {len(README.splitlines())};" in out
    assert len(out.splitlines()) <= 5  # short and readable


def test_mcp_config_prints_the_readme_block(workspace: Path) -> None:
    snippet = block_with("json", '"mcpServers"')
    done = subprocess.run(
        [sys.executable, "-m", "corral", "mcp-config", "--workspace", str(workspace)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert done.stdout == mine(snippet, workspace)
    claude = block_with("sh", "claude mcp add").strip()
    done = subprocess.run(
        [sys.executable, "-m", "corral", "mcp-config", "--client", "claude",
         "--workspace", str(workspace)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert json.loads(done.stdout) == json.loads(mine(snippet, workspace))
    assert done.stderr.splitlines()[-1].strip() == mine(claude, workspace)


def test_mcp_client_snippet_starts_a_working_server(workspace: Path) -> None:
    server = json.loads(mine(block_with("json", '"mcpServers"'), workspace))["mcpServers"]["corral"]
    seen: dict[str, object] = {}

    async def main() -> None:
        # A client's environment: no virtualenv on PATH, some other directory.
        params = StdioServerParameters(
            command=server["command"], args=server["args"], env={}, cwd="/"
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            seen["tools"] = {tool.name for tool in (await session.list_tools()).tools}
            result = await session.call_tool("read_file", {"path": "hello.txt"})
            seen["read"] = result.structured_content

    anyio.run(main)
    assert {"read_file", "write_file", "grep"} <= seen["tools"]  # type: ignore[operator]
    assert "delete_file" not in seen["tools"]  # type: ignore[operator]
    assert seen["read"]["content"] == "hello\nworld\n"  # type: ignore[index]


def completion(message: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions response holding one assistant message."""
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4.1",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
    }


def test_python_example_runs_a_tool_call_end_to_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requests: list[dict[str, Any]] = []

    def provider(request: http.Request) -> http.Response:
        """The model: first asks for two tool calls (one wrong), then answers."""
        body = json.loads(request.content)
        requests.append(body)
        if len(requests) == 1:
            calls = [
                ("call_1", "read_file", {"path": "README.md", "limit": 3}),
                ("call_2", "read_file", {"path": "../../etc/passwd"}),
            ]
            return http.Response(200, json=completion({
                "role": "assistant", "content": None,
                "tool_calls": [
                    {"id": i, "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}
                    for i, name, args in calls
                ],
            }))
        return http.Response(200, json=completion(
            {"role": "assistant", "content": "corral confines an agent's file tools."}
        ))

    class StubbedOpenAI(openai.OpenAI):
        def __init__(self, **kwargs: Any) -> None:
            transport = http.MockTransport(provider)
            super().__init__(api_key="test", http_client=http.Client(transport=transport))

    monkeypatch.setattr(openai, "OpenAI", StubbedOpenAI)
    monkeypatch.chdir(REPO)
    example = block_with("python", "sb.call(")
    exec(compile(example, "README.md", "exec"), {"__name__": "readme"})

    assert capsys.readouterr().out == "corral confines an agent's file tools.\n"
    first, second = requests
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert {"read_file", "grep", "edit_file"} <= offered and "delete_file" not in offered
    assert first["tools"][0]["function"]["parameters"]["type"] == "object"
    assert all(tool["function"]["strict"] for tool in first["tools"])  # sb.tools(strict=True)
    answers = {m["tool_call_id"]: m["content"] for m in second["messages"] if m["role"] == "tool"}
    assert answers["call_1"].startswith("     1\t# corral\n")
    assert answers["call_2"].startswith("outside_workspace: ")
