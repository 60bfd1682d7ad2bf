"""corral.integrations.openai_agents: `tools(sb)` are sb.tools() as strict
FunctionTools, and the SDK's runner (a ScriptedModel, its own test double)
drives read -> edit -> apply_patch -> refused escape through them, seeing
corral's text; a supervised tool interrupts the run for the SDK's approval; and
CorralFilesystem puts corral's view_image and apply_patch in a SandboxAgent."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, set_tracing_disabled
from agents.run_config import SandboxRunConfig
from agents.sandbox import SandboxAgent
from agents.testing import ScriptedModel, assistant_message, function_call, scripted_sandbox_session
from openai.types.responses import ResponseCustomToolCall

from corral import AsyncSandbox, Sandbox
from corral.integrations.openai_agents import CorralFilesystem, tools
from corral.policy import Policy
from tests.helpers.calls import SECRET
from tests.helpers.integration_helpers import (
    ESCAPE_REFUSED,
    PATCH,
    READ_TEXT,
    STEPS,
    assert_after_steps,
    assert_undone,
    build,
)

set_tracing_disabled(True)  # no network: the SDK would export traces to OpenAI
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ"
                       "/pLvAAAAAElFTkSuQmCC")


def strict_arguments(sb: Sandbox | AsyncSandbox, name: str, given: dict[str, Any]) -> str:
    """A strict-mode model's arguments: every property, null for those not given."""
    (spec,) = [s for s in sb.tools(strict=True) if s["name"] == name]
    return json.dumps({key: given.get(key) for key in spec["input_schema"]["properties"]})


def outputs(model: ScriptedModel) -> list[Any]:
    """The tool outputs the model was shown in its last call."""
    return [item["output"] for item in model.calls[-1].input
            if isinstance(item, dict) and item.get("type", "").endswith("call_output")]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return build(tmp_path)


def test_tools_are_the_sandboxs_strict_specs(ws: Path) -> None:
    with Sandbox(ws, policy=Policy({"grep": "deny"})) as sb:
        offered = tools(sb)
        specs = sb.tools(strict=True)
    assert [(t.name, t.description, t.params_json_schema, t.strict_json_schema)
            for t in offered] == [
        (s["name"], s["description"], s["input_schema"], True) for s in specs]
    assert "grep" not in [t.name for t in offered]


def test_an_agent_reads_edits_patches_and_is_refused(ws: Path) -> None:
    async def main() -> tuple[ScriptedModel, Any]:
        with Sandbox(ws) as sb:
            model = ScriptedModel([
                [function_call(name, strict_arguments(sb, name, args), call_id=f"c{i}")]
                for i, (name, args) in enumerate(STEPS)] + [[assistant_message("done")]])
            checkpoint = sb.checkpoint()
            result = await Runner.run(Agent(name="coder", model=model, tools=tools(sb)), "go")
            assert_after_steps(ws)
            sb.rewind(checkpoint)
            return model, result

    model, result = asyncio.run(main())
    assert_undone(ws)
    assert result.final_output == "done"
    shown = outputs(model)
    assert shown[0] == READ_TEXT
    assert shown[1].startswith("Edited notes.txt: 1 replacement.")
    assert shown[2].startswith("Applied the patch to 2 files:")
    assert shown[3] == ESCAPE_REFUSED
    assert SECRET not in repr([call.input for call in model.calls])


def test_a_supervised_tool_interrupts_for_the_sdks_approval(ws: Path) -> None:
    async def main() -> None:
        with Sandbox(ws, policy=Policy({"write_file": "supervised"})) as sb:
            model = ScriptedModel([
                [function_call("write_file", strict_arguments(
                    sb, "write_file", {"path": "n.txt", "content": "x\n"}), call_id="w1")],
                [function_call("write_file", strict_arguments(
                    sb, "write_file", {"path": "m.txt", "content": "y\n"}), call_id="w2")],
                [assistant_message("done")]])
            agent = Agent(name="coder", model=model, tools=tools(sb))
            first = await Runner.run(agent, "go")
            (item,) = first.interruptions
            assert item.tool_name == "write_file"
            assert not (ws / "n.txt").exists()
            state = first.to_state()
            state.approve(item)
            second = await Runner.run(agent, state)
            assert (ws / "n.txt").read_text() == "x\n"
            (item,) = second.interruptions
            state = second.to_state()
            state.reject(item)
            third = await Runner.run(agent, state)
            assert third.final_output == "done"
            assert outputs(model)[0] == "Created n.txt (2 bytes)."

    asyncio.run(main())
    assert not (ws / "m.txt").exists()


def test_corral_filesystem_replaces_the_sdks_tools(ws: Path) -> None:
    (ws / "dot.png").write_bytes(PNG)
    operations = json.dumps({"operations": [
        {"type": "update_file", "path": "notes.txt", "diff": "@@\n-world\n+there\n"},
        {"type": "create_file", "path": "made.txt", "diff": "+made\n"}]})
    model = ScriptedModel([
        [ResponseCustomToolCall(call_id="p1", input=PATCH, name="apply_patch",
                                type="custom_tool_call", id="p1")],
        [ResponseCustomToolCall(call_id="p2", input=operations, name="apply_patch",
                                type="custom_tool_call", id="p2")],
        [function_call("view_image", {"path": "dot.png"}, call_id="v1")],
        [function_call("view_image", {"path": "escape/secret.txt"}, call_id="v2")],
        [assistant_message("done")]])
    session = scripted_sandbox_session([])  # any call into the SDK's own sandbox fails

    async def main() -> None:
        with Sandbox(ws) as sb:
            agent = SandboxAgent(name="coder", model=model, capabilities=[CorralFilesystem(sb)])
            await Runner.run(agent, "go", run_config=RunConfig(
                sandbox=SandboxRunConfig(session=session)))

    asyncio.run(main())
    assert [(type(t).__name__, t.name) for t in model.calls[0].tools] == [
        ("FunctionTool", "view_image"), ("CustomTool", "apply_patch")]
    assert session.calls == ()  # corral did every call
    assert (ws / "src" / "app.py").read_text() == "print('hello')\n"
    assert (ws / "notes.txt").read_text() == "hello\nthere\n"
    assert (ws / "made.txt").read_text() == "made\n"
    shown = outputs(model)
    assert shown[0].startswith("Applied the patch to 2 files:")
    assert shown[1].startswith("Applied the patch to 2 files:")
    assert shown[2] == [{"type": "input_image", "image_url": "data:image/png;base64,"
                         + base64.b64encode(PNG).decode()}]
    assert shown[3] == "cannot read escape/secret.txt: path escapes the workspace roots."


def test_an_async_sandbox_is_awaited(ws: Path) -> None:
    async def main() -> list[Any]:
        async with AsyncSandbox(ws) as sb:
            name, args = STEPS[0]
            model = ScriptedModel([[function_call(name, strict_arguments(sb, name, args),
                                                  call_id="c0")], [assistant_message("done")]])
            await Runner.run(Agent(name="coder", model=model, tools=tools(sb)), "go")
            return outputs(model)

    assert asyncio.run(main()) == [READ_TEXT]
