"""corral.integrations.pydantic_ai: the toolset's tools are sb.tools(), and a
pydantic-ai agent (FunctionModel) drives read -> edit -> apply_patch -> refused
escape through them, seeing corral's text; a supervised call ends the run with
DeferredToolRequests carrying corral's request, and runs once approved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from corral import AsyncSandbox, Pool, Sandbox
from corral.integrations.pydantic_ai import CorralToolset
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


class Script:
    """A FunctionModel's function: one scripted response per model request,
    recording the requests and the tools it was offered."""

    def __init__(self, steps: list[tuple[str, dict[str, Any]]]) -> None:
        self.responses = [[ToolCallPart(name, args, tool_call_id=f"c{i}")]
                          for i, (name, args) in enumerate(steps)]
        self.seen: list[list[ModelMessage]] = []
        self.tools: list[Any] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        self.tools = list(info.function_tools)
        step = len(self.seen) - 1
        parts = self.responses[step] if step < len(self.responses) else [TextPart("done")]
        return ModelResponse(parts=list(parts))


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [part for message in messages if isinstance(message, ModelRequest)
            for part in message.parts if isinstance(part, ToolReturnPart)]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return build(tmp_path)


def test_tools_are_the_sandboxs(ws: Path) -> None:
    script = Script([])
    with Sandbox(ws, policy=Policy({"grep": "deny"})) as sb:
        Agent(FunctionModel(script), toolsets=[CorralToolset(sb)]).run_sync("hi")
        specs = sb.tools()
    assert [(t.name, t.description, t.parameters_json_schema) for t in script.tools] == [
        (s["name"], s["description"], s["input_schema"]) for s in specs]
    assert "grep" not in [t.name for t in script.tools]


def test_an_agent_reads_edits_patches_and_is_refused(ws: Path) -> None:
    script = Script(STEPS)
    with Sandbox(ws) as sb:
        checkpoint = sb.checkpoint()
        result = Agent(FunctionModel(script), toolsets=[CorralToolset(sb)]).run_sync("go")
        assert_after_steps(ws)
        sb.rewind(checkpoint)
    assert_undone(ws)
    assert result.output == "done"
    answers = returns(result.all_messages())
    assert [a.outcome for a in answers] == ["success", "success", "success", "failed"]
    assert answers[0].content == READ_TEXT
    assert answers[1].content.startswith("Edited notes.txt: 1 replacement.")
    assert answers[2].content.startswith("Applied the patch to 2 files:")
    assert answers[3].content == ESCAPE_REFUSED  # a failed result, not a retry prompt
    assert answers[0].metadata["result"]["version"]
    assert returns(script.seen[-1]) == answers  # what the model was last shown
    assert SECRET not in repr(script.seen)


def test_test_model_calls_every_tool(ws: Path) -> None:
    """pydantic-ai's TestModel calls each tool with arguments made from its schema."""
    with Sandbox(ws) as sb:
        result = Agent(TestModel(), toolsets=[CorralToolset(sb)]).run_sync("go")
        names = [spec["name"] for spec in sb.tools()]
    assert sorted({a.tool_name for a in returns(result.all_messages())}) == sorted(names)


def test_a_supervised_call_is_deferred_then_runs_once_approved(ws: Path) -> None:
    script = Script([("write_file", {"path": "n.txt", "content": "x\n"}),
                     ("write_file", {"path": "m.txt", "content": "y\n"})])
    with Sandbox(ws, policy=Policy({"write_file": "supervised"})) as sb:
        agent = Agent(FunctionModel(script), toolsets=[CorralToolset(sb)],
                      output_type=[str, DeferredToolRequests])
        first = agent.run_sync("go")
        assert isinstance(first.output, DeferredToolRequests)
        assert not (ws / "n.txt").exists()  # the worker stopped before acting
        (call,) = first.output.approvals
        request = first.output.metadata[call.tool_call_id]
        assert request["targets"][0]["path"] == "n.txt"
        assert request["diff"].endswith("+x")
        # approved, and remembered for that path: corral's grant, through pydantic-ai
        second = agent.run_sync(message_history=first.all_messages(),
                                deferred_tool_results=DeferredToolResults(
                                    approvals={call.tool_call_id: True},
                                    metadata={call.tool_call_id: {"remember": "path"}}))
        assert (ws / "n.txt").read_text() == "x\n"
        assert [g["path"] for g in sb.approvals()] == ["n.txt"]
        # the next write (another path) is deferred again; denied, it never runs
        assert isinstance(second.output, DeferredToolRequests)
        (call,) = second.output.approvals
        third = agent.run_sync(message_history=second.all_messages(),
                               deferred_tool_results=DeferredToolResults(
                                   approvals={call.tool_call_id: ToolDenied("no")}))
    assert not (ws / "m.txt").exists()
    assert third.output == "done"


def test_an_async_sandbox_is_awaited(ws: Path) -> None:
    import asyncio

    async def main() -> Any:
        async with AsyncSandbox(ws) as sb:
            script = Script(STEPS[:1])
            return await Agent(FunctionModel(script), toolsets=[CorralToolset(sb)]).run("go")

    result = asyncio.run(main())
    assert returns(result.all_messages())[0].content == READ_TEXT


def test_a_pooled_sandbox_serves_it(ws: Path) -> None:
    with Pool() as pool:
        sb = pool.sandbox(ws)
        result = Agent(FunctionModel(Script(STEPS[:1])), toolsets=[CorralToolset(sb)]).run_sync(
            "go")
    assert returns(result.all_messages())[0].content == READ_TEXT


def test_a_remember_corral_does_not_know_fails_having_written_nothing(ws: Path) -> None:
    script = Script([("write_file", {"path": "n.txt", "content": "x\n"})])
    with Sandbox(ws, policy=Policy({"write_file": "supervised"})) as sb:
        agent = Agent(FunctionModel(script), toolsets=[CorralToolset(sb)],
                      output_type=[str, DeferredToolRequests])
        first = agent.run_sync("go")
        assert isinstance(first.output, DeferredToolRequests)
        (call,) = first.output.approvals
        with pytest.raises(ValueError, match="remember"):
            agent.run_sync(message_history=first.all_messages(),
                           deferred_tool_results=DeferredToolResults(
                               approvals={call.tool_call_id: True},
                               metadata={call.tool_call_id: {"remember": "forever"}}))
        assert sb.approvals() == []
    assert not (ws / "n.txt").exists()
