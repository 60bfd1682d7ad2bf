"""Tolerant matching and kept encodings as an MCP client sees them: `corral serve`
driven by the official MCP SDK's stdio client."""

from __future__ import annotations

from pathlib import Path

from mcp.client.session import ClientSession

from tests.helpers.mcp_helpers import error_code, run_session, structured, write_config


def test_drift_encodings_and_the_lesson_over_mcp(tmp_path: Path, workspace: Path) -> None:
    extra = write_config(tmp_path, '[workspace]\nfallback_encodings = ["cp1252"]\n')
    (workspace / "main.go").write_bytes(b"func f() {\r\n\tif x {\r\n\t\treturn 1\r\n\t}\r\n}\r\n")
    (workspace / "notes.txt").write_bytes(b"\xff\xfe" + "na\u00efve\n".encode("utf-16-le"))
    (workspace / "old.txt").write_bytes(b"caf\xe9\n")

    async def body(session: ClientSession) -> None:
        listed = await session.list_tools()
        edit = next(tool for tool in listed.tools if tool.name == "edit_file")
        assert "match" in edit.input_schema["properties"]
        success = (edit.output_schema or {})["anyOf"][0]  # the other branch: a failure
        assert "match" in success["properties"]
        drifted = await session.call_tool("edit_file", {
            "path": "main.go", "old_string": "    if x {\n        return 1\n",
            "new_string": "    if x {\n        return 2\n"})
        assert not drifted.is_error, drifted
        assert structured(drifted)["match"] == "indentation"
        exact = await session.call_tool("edit_file", {
            "path": "main.go", "old_string": "if y {\n", "new_string": "z", "match": "exact"})
        assert error_code(exact) == "no_match"
        assert "line 2 differs" in structured(exact)["error"]["message"]
        read = await session.call_tool("read_file", {"path": "notes.txt"})
        assert (structured(read)["encoding"], structured(read)["content"]) == (
            "utf-16-le", "na\u00efve\n")
        legacy = await session.call_tool("edit_file", {
            "path": "old.txt", "old_string": "caf\u00e9", "new_string": "\u20ac"})
        assert not legacy.is_error, legacy

    run_session(workspace, body, extra=extra)
    assert (workspace / "main.go").read_bytes() == (
        b"func f() {\r\n\tif x {\r\n\t\treturn 2\r\n\t}\r\n}\r\n")
    assert (workspace / "old.txt").read_bytes() == b"\x80\n"
