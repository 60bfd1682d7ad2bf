"""corral.integrations.langchain: the toolkit's tools are sb.tools(), and a
LangChain agent (create_agent, a scripted fake chat model) drives read -> edit
-> apply_patch -> refused escape through them, seeing corral's text; a rewind
takes the tree back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from corral import AsyncSandbox, Sandbox
from corral.integrations.langchain import CorralToolkit
from corral.policy import Policy
from tests.helpers.calls import SECRET
from tests.helpers.integration_helpers import (
    ESCAPE_REFUSED,
    READ_TEXT,
    STEPS,
    assert_after_steps,
    assert_undone,
    build,
)


class ScriptedChat(FakeMessagesListChatModel):
    """LangChain's fake chat model, recording what it was shown and which tools it
    was bound to (the fake itself binds none)."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[dict[str, Any]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.bound[:] = [convert_to_openai_tool(tool) for tool in tools]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def scripted(steps: list[tuple[str, dict[str, Any]]]) -> ScriptedChat:
    replies: list[BaseMessage] = [
        AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{i}",
                                   "type": "tool_call"}])
        for i, (name, args) in enumerate(steps)]
    return ScriptedChat(responses=[*replies, AIMessage("done")], seen=[], bound=[])


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return build(tmp_path)


def test_tools_are_the_sandboxs(ws: Path) -> None:
    with Sandbox(ws, policy=Policy({"grep": "deny"})) as sb:
        tools = CorralToolkit(sb).get_tools()
        specs = sb.tools()
    assert [tool.name for tool in tools] == [spec["name"] for spec in specs]
    assert "grep" not in [tool.name for tool in tools]  # denied: hidden, as sb.tools() hides it
    for tool, spec in zip(tools, specs, strict=True):
        function = convert_to_openai_tool(tool)["function"]
        assert function["parameters"] == spec["input_schema"]
        assert function["description"] == spec["description"]


def test_an_agent_reads_edits_patches_and_is_refused(ws: Path) -> None:
    model = scripted(STEPS)
    with Sandbox(ws) as sb:
        checkpoint = sb.checkpoint("before the agent")
        agent = create_agent(model, tools=CorralToolkit(sb).get_tools())
        out = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
        assert_after_steps(ws)
        assert [tool["function"]["name"] for tool in model.bound] == [
            spec["name"] for spec in sb.tools()]
        sb.rewind(checkpoint)
    assert_undone(ws)
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["success", "success", "success", "error"]
    assert answers[0].content == READ_TEXT  # corral's text, not a dict
    assert answers[1].content.startswith("Edited notes.txt: 1 replacement.")
    assert answers[2].content.startswith("Applied the patch to 2 files:")
    assert answers[3].content == ESCAPE_REFUSED
    assert answers[0].artifact["result"]["content"] == "hello\nworld\n"  # the data, beside
    # the last model call saw every answer, and never the secret
    shown = [m.content for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert shown == [m.content for m in answers]
    assert SECRET not in repr(model.seen)


def test_a_refusal_is_an_error_tool_message(ws: Path) -> None:
    with Sandbox(ws) as sb:
        (read,) = [t for t in CorralToolkit(sb).get_tools() if t.name == "read_file"]
        answer = read.invoke({"type": "tool_call", "id": "x", "name": "read_file",
                              "args": {"path": ".env"}})
    assert isinstance(answer, ToolMessage)
    assert answer.status == "error"
    assert answer.content == ".env is denied by policy rule 'block-dotenv'."


def test_an_async_sandbox_is_awaited(ws: Path) -> None:
    async def main() -> None:
        async with AsyncSandbox(ws) as sb:
            (read,) = [t for t in CorralToolkit(sb).get_tools() if t.name == "read_file"]
            assert await read.ainvoke({"path": "notes.txt"}) == READ_TEXT
            with pytest.raises(NotImplementedError):
                read.invoke({"path": "notes.txt"})  # no blocking call on an async sandbox

    asyncio.run(main())


def test_a_supervised_call_asks_the_sandboxs_callback(ws: Path) -> None:
    asked: list[dict[str, Any]] = []

    def approve(request: dict[str, Any]) -> bool:
        asked.append(request)
        return False

    with Sandbox(ws, policy=Policy({"write_file": "supervised"}), approve=approve) as sb:
        (write,) = [t for t in CorralToolkit(sb).get_tools() if t.name == "write_file"]
        answer = write.invoke({"type": "tool_call", "id": "w", "name": "write_file",
                               "args": {"path": "n.txt", "content": "x"}})
    assert [r["targets"][0]["path"] for r in asked] == ["n.txt"]
    assert answer.status == "error"
    assert "n.txt" in answer.content
    assert not (ws / "n.txt").exists()
