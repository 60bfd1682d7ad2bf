"""corral.integrations.deepagents: every BackendProtocol method is a corral
call with corral's failures as the protocol's error results; CompositeBackend
routes to it; a deep agent (create_deep_agent, a scripted fake chat model) drives
read -> edit -> apply_patch (corral's, from the LangChain toolkit) -> refused
escapes through it; the backend's undo and rewind take the tree back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents")

from deepagents import create_deep_agent
from deepagents.backends import CompositeBackend, StateBackend
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pydantic import Field

from corral import AsyncSandbox, Sandbox
from corral.errors import ERROR_CODES
from corral.integrations import deepagents as adapter
from corral.integrations.deepagents import CorralBackend
from corral.integrations.langchain import CorralToolkit
from tests.helpers.calls import SECRET
from tests.helpers.integration_helpers import ESCAPE_REFUSED, PATCH, assert_after_steps, build


class ScriptedChat(FakeMessagesListChatModel):
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def tool_call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id,
                                      "type": "tool_call"}])


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return build(tmp_path)


@pytest.fixture
def backend(ws: Path) -> Any:
    with Sandbox(ws) as sb:
        yield CorralBackend(sb)


def test_each_method_is_a_corral_call(backend: CorralBackend, ws: Path) -> None:
    listed = backend.ls("/")
    assert listed.error is None
    assert {e["path"]: e["is_dir"] for e in listed.entries or []} == {
        "/notes.txt": False, "/src/": True, "/escape": False}  # .env: denied, so not listed
    assert [e["path"] for e in backend.ls("/src").entries or []] == ["/src/app.py"]
    read = backend.read("/notes.txt", offset=1, limit=5)
    assert (read.file_data, read.start_line, read.end_line, read.total_lines) == (
        {"content": "world\n", "encoding": "utf-8"}, 2, 2, 2)
    paged = backend.read("/notes.txt", limit=1)
    assert (paged.end_line, paged.next_offset) == (1, 1)  # the protocol's 0-based resume
    assert backend.read("/notes.txt", limit=0).no_lines_requested
    past = backend.read("/notes.txt", offset=5)
    assert past.error == "Line offset 5 exceeds file length (2 lines)"  # FilesystemBackend's
    assert backend.write("/src/b.py", "a.b()\n").path == "/src/b.py"
    assert backend.edit("/src/b.py", "a.", "c.").occurrences == 1
    assert (ws / "src" / "b.py").read_text() == "c.b()\n"
    assert [m["path"] for m in backend.glob("*.py").matches or []] == [
        "/src/app.py", "/src/b.py"]
    assert [m["path"] for m in backend.glob("**").matches or []] == [
        "/notes.txt", "/src/app.py", "/src/b.py"]  # files only; escape is not followed
    grep = backend.grep("c.b(")  # literal, though corral's grep takes a regex
    assert grep.matches == [{"path": "/src/b.py", "line": 1, "text": "c.b()"}]
    assert backend.upload_files([("/up/bin", b"\x00\xff")])[0].error is None
    (down,) = backend.download_files(["/up/bin"])
    assert down.content == b"\x00\xff"


def test_corrals_failures_are_the_protocols_error_results(backend: CorralBackend) -> None:
    assert backend.read("/escape/secret.txt").error == ESCAPE_REFUSED
    assert backend.read("/.env").error == ".env is denied by policy rule 'block-dotenv'."
    assert backend.ls("/nope").error
    assert backend.write("/escape/x.txt", "x").error
    assert backend.edit("/notes.txt", "absent", "x").error
    assert backend.grep("x", path="/escape").error
    assert backend.delete("/notes.txt").error  # delete_file is off by default
    codes = [(r.path, r.error) for r in backend.download_files(
        ["/nope", "/src", "/escape/secret.txt", "/.env"])]
    assert codes == [("/nope", "file_not_found"), ("/src", "is_directory"),
                     ("/escape/secret.txt", "permission_denied"),
                     ("/.env", "permission_denied")]
    assert backend.upload_files([("/escape/up", b"x")])[0].error == "permission_denied"


def test_every_mapped_code_is_corrals() -> None:
    assert set(adapter._FILE_ERRORS) <= ERROR_CODES


def test_composite_backend_routes_to_it(backend: CorralBackend, ws: Path) -> None:
    composite = CompositeBackend(default=StateBackend(), routes={"/workspace/": backend})
    assert composite.read("/workspace/notes.txt").file_data["content"] == "hello\nworld\n"
    assert composite.write("/workspace/routed.txt", "r\n").error is None
    assert (ws / "routed.txt").read_text() == "r\n"
    assert [m["path"] for m in composite.glob("*.txt", path="/workspace/").matches or []] == [
        "/workspace/notes.txt", "/workspace/routed.txt"]
    assert composite.read("/workspace/escape/secret.txt").error == ESCAPE_REFUSED


def test_an_async_sandbox_is_refused(ws: Path) -> None:
    with pytest.raises(TypeError, match="AsyncSandbox"):
        CorralBackend(AsyncSandbox.__new__(AsyncSandbox))


def test_a_deep_agent_reads_edits_patches_and_is_refused(ws: Path) -> None:
    model = ScriptedChat(responses=[
        tool_call("read_file", {"file_path": "/notes.txt"}, "c0"),
        tool_call("edit_file", {"file_path": "/notes.txt", "old_string": "world",
                                "new_string": "there"}, "c1"),
        tool_call("apply_patch", {"patch": PATCH}, "c2"),
        tool_call("read_file", {"file_path": "/escape/secret.txt"}, "c3"),
        tool_call("read_file", {"file_path": "/.env"}, "c4"),
        AIMessage("done")], seen=[])
    with Sandbox(ws) as sb:
        backend = CorralBackend(sb)
        checkpoint = backend.checkpoint("before the agent")
        patch = [t for t in CorralToolkit(sb).get_tools() if t.name == "apply_patch"]
        agent = create_deep_agent(model=model, tools=patch, backend=backend)
        out = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
        assert_after_steps(ws)
        assert backend.undo("/notes.txt")["ok"]  # the edit, undone
        assert (ws / "notes.txt").read_text() == "hello\nworld\n"
        assert [e["path"] for e in backend.history("/src/app.py")] == ["src/app.py"]
        assert backend.rewind(checkpoint)["ok"]
    assert (ws / "src" / "app.py").read_text() == "print('hi')\n"
    assert not (ws / "src" / "new.py").exists()
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "hello" in answers[0].content and "world" in answers[0].content
    assert "/notes.txt" in answers[1].content
    assert answers[2].content.startswith("Applied the patch to 2 files:")
    assert [m.status for m in answers] == ["success"] * 3 + ["error"] * 2
    assert answers[3].content == f"Error: {ESCAPE_REFUSED}"  # corral's, in the middleware's
    assert answers[4].content == "Error: .env is denied by policy rule 'block-dotenv'."
    assert SECRET not in repr(model.seen)
