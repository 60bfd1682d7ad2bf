"""The README's two user-facing promises, run as written: the MCP client
configuration snippet starts a working server, and the quick-start call works."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_mcp_client_snippet_starts_a_working_server(workspace: Path) -> None:
    (snippet,) = [b for b in readme_blocks("json") if '"mcpServers"' in b]
    server = json.loads(snippet)["mcpServers"]["corral"]
    args = [str(workspace) if a == "/path/to/project" else a for a in server["args"]]
    command = shutil.which(server["command"])
    assert command is not None, "the package is not installed: `pip install .` puts corral on PATH"
    seen: dict[str, object] = {}

    async def main() -> None:
        params = StdioServerParameters(command=command, args=args)
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


def test_quick_start_call_reads_the_readme() -> None:
    quick = next(b for b in readme_blocks("sh") if "corral call read_file" in b)
    argv = quick.split("&&")[-1].split()
    assert argv[:3] == ["corral", "call", "read_file"]
    done = subprocess.run(
        [shutil.which("corral") or "corral", "call", "read_file", '{"path": "README.md"}'],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["content"].startswith("# corral")
