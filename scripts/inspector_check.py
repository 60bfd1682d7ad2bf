"""Drive `corral serve` with the MCP Inspector's CLI (the TypeScript SDK's client),
a client corral did not write: list the tools, call one, and make sure a tool
error comes back as a tool result (not a protocol error).

Needs node's `npx` and the network (npx fetches @modelcontextprotocol/inspector),
so it is a script, not a test. Usage: python scripts/inspector_check.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

INSPECTOR = "@modelcontextprotocol/inspector"
TIMEOUT_S = 300  # the first run downloads the inspector


def inspect(workspace: Path, *arguments: str) -> Any:
    command = [
        "npx", "-y", INSPECTOR, "--cli",
        sys.executable, "-m", "corral", "serve", "--workspace", str(workspace), *arguments,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"inspector failed ({done.returncode}): {done.stdout}{done.stderr}")
    return json.loads(done.stdout)


def main() -> int:
    if shutil.which("npx") is None:
        print("npx not found: install node to run the MCP Inspector", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        (workspace / "notes.txt").write_text("hello\n")
        listed = inspect(workspace, "--method", "tools/list")["tools"]
        assert all(tool["title"] and tool["outputSchema"] for tool in listed), listed
        assert all(tool["annotations"]["openWorldHint"] is False for tool in listed)
        read = inspect(workspace, "--method", "tools/call", "--tool-name", "read_file",
                       "--tool-arg", "path=notes.txt")
        assert read["structuredContent"]["content"] == "hello\n", read
        escape = inspect(workspace, "--method", "tools/call", "--tool-name", "read_file",
                         "--tool-arg", "path=../../etc/passwd")
        assert escape["isError"] is True, escape
        assert escape["structuredContent"]["error"]["code"] == "outside_workspace", escape
        print(f"MCP Inspector CLI: {len(listed)} tools listed, a read, an escape refused: ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
