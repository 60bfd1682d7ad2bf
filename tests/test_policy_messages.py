"""What a refusal says: the path actually refused, and its rule once."""

from __future__ import annotations

from pathlib import Path

from corral import Sandbox
from corral.faces.mcp_render import tool_result


def test_an_mcp_refusal_names_its_rule_once(workspace: Path) -> None:
    (workspace / ".env").write_text("TOKEN=x\n")
    with Sandbox(workspace) as sb:
        refused = sb.call("read_file", {"path": ".env"})
    text = tool_result(refused, structured=False)["content"][0]["text"]
    assert text.count("block-dotenv") == 1, text
    assert text == "path_denied: .env is denied by policy rule 'block-dotenv'."


def test_an_mcp_refusal_that_does_not_name_its_rule_gets_it_added() -> None:
    error = {"code": "path_denied", "message": "a.txt is outside the client's roots.",
             "rule": "client-roots"}
    reply = tool_result({"ok": False, "tool": "read_file", "error": error}, structured=False)
    assert reply["content"][0]["text"].endswith("roots. (rule client-roots)")
