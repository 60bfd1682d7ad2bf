"""Drive `corral serve` with the MCP Inspector's CLI (the TypeScript SDK's client),
a client corral did not write: list the tools, call one with an integer argument
(which the 0.x CLI sends as text), pass corral's own `--config` past the
Inspector's, and make sure a tool error comes back as a tool result (not a
protocol error).

Needs node's `npx` and the network (npx fetches @modelcontextprotocol/inspector),
so it is a script, not a test. Usage:
    python scripts/inspector_check.py [--inspector-version 0.15.0|2.12.0|latest]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

INSPECTOR = "@modelcontextprotocol/inspector"
TIMEOUT_S = 300  # the first run downloads the inspector
REPO = Path(__file__).resolve().parent.parent


def command(version: str, workspace: Path, config: Path, *arguments: str) -> list[str]:
    """The command line of one CLI call. The Inspector's own `--config` (a servers
    file) would take corral's: 0.x reads everything after a `--` as more server
    arguments; 2.x wants its options first and the server command after `--`."""
    # the Inspector starts the server with a minimal environment: PYTHONPATH goes by -e
    inspector = ["npx", "-y", f"{INSPECTOR}@{version}", "--cli", "-e", f"PYTHONPATH={REPO}"]
    server = [sys.executable, "-m", "corral", "serve", "--workspace", str(workspace)]
    if version.startswith("0."):
        return [*inspector, *server, *arguments, "--", "--config", str(config)]
    return [*inspector, *arguments, "--", *server, "--config", str(config)]


def inspect(version: str, workspace: Path, config: Path, *arguments: str) -> Any:
    argv = command(version, workspace, config, *arguments)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode == 0:
        return json.loads(done.stdout)
    # 2.x prints a tool error's result as any other, then exits non-zero
    # (5, "tool_is_error"): that is still a tool result, not a protocol error
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = None
    if isinstance(result, dict) and result.get("isError") is True:
        return result
    raise SystemExit(f"inspector failed ({done.returncode}): {done.stdout}{done.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inspector-version", default="0.15.0")
    version = parser.parse_args().inspector_version
    if shutil.which("npx") is None:
        print("npx not found: install node to run the MCP Inspector", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        (workspace / "notes.txt").write_text("hello\nworld\n")
        (workspace / "old" / "sub").mkdir(parents=True)
        config = Path(tmp) / "corral.toml"  # enables a tool that is off by default
        config.write_text('[tools]\ndelete_directory = "allow"\n')

        def call(tool: str, *pairs: str) -> Any:
            args = [arg for pair in pairs for arg in ("--tool-arg", pair)]
            return inspect(version, workspace, config, "--method", "tools/call",
                           "--tool-name", tool, *args)

        listed = inspect(version, workspace, config, "--method", "tools/list")["tools"]
        assert all(tool["title"] and tool["outputSchema"] for tool in listed), listed
        assert all(tool["annotations"]["openWorldHint"] is False for tool in listed)
        assert "delete_directory" in {tool["name"] for tool in listed}, "--config not read"
        read = call("read_file", "path=notes.txt", "limit=1")
        assert read["structuredContent"]["content"] == "hello\n", read
        assert "continue with offset=2" in read["content"][0]["text"], read
        deleted = call("delete_directory", "path=old", "recursive=true")
        assert deleted["structuredContent"]["entries_removed"] == 1, deleted
        escape = call("read_file", "path=../../etc/passwd")
        assert escape["isError"] is True, escape
        assert escape["structuredContent"]["error"]["code"] == "outside_workspace", escape
        print(f"MCP Inspector CLI {version}: {len(listed)} tools listed (--config read), "
              "a read with limit=1, a recursive delete, an escape refused: ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
