"""docs/integrations.md's examples run as shown, each with its framework's own
test model in place of the provider's (no network): the placeholders
/path/to/workspace and the model names are replaced, a prelude defines the
scripted model, and the tree afterwards is what the example did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepagents")
pytest.importorskip("langchain")
pytest.importorskip("agents")
pytest.importorskip("pydantic_ai")

from tests.helpers.doc_blocks import REPO, block

LANGCHAIN_MODEL = '''
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage

class Scripted(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):
        return self

def scripted(name, args):
    call = {"name": name, "args": args, "id": "c1", "type": "tool_call"}
    return Scripted(responses=[AIMessage("", tool_calls=[call]), AIMessage("done")])
'''
OPENAI_MODEL = '''
import json
from agents import set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
set_tracing_disabled(True)
arguments = json.dumps({"path": "haiku.txt", "content": "an old pond\\n", "encoding": None,
                        "expected_version": None})
SCRIPTED = ScriptedModel([[function_call("write_file", arguments, call_id="w1")],
                          [assistant_message("written")]])
'''
PYDANTIC_MODEL = '''
import builtins
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
builtins.input = lambda prompt="": "y"   # the person at the prompt says yes

def answer(messages, info):
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("write_file", {"path": "haiku.txt",
                                                                "content": "an old pond\\n"})])
    return ModelResponse(parts=[TextPart("written")])
SCRIPTED = FunctionModel(answer)
'''


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("teh notes\n")
    return ws


def run(code: str, ws: Path, prelude: str, replace: dict[str, str]) -> str:
    for placeholder, real in {"/path/to/workspace": str(ws), **replace}.items():
        assert placeholder in code, placeholder
        code = code.replace(placeholder, real)
    done = subprocess.run([sys.executable, "-c", prelude + code], cwd=ws.parent,
                          capture_output=True, text=True, timeout=180,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_deep_agents_example(ws: Path) -> None:
    prelude = LANGCHAIN_MODEL + ('SCRIPTED = scripted("edit_file", {"file_path": "/notes.txt", '
                                 '"old_string": "teh", "new_string": "the"})\n')
    shown = run(block("integrations.md", "create_deep_agent"), ws, prelude,
                {'"anthropic:claude-sonnet-4-5"': "SCRIPTED"})
    assert "'tool': 'edit_file', 'path': 'notes.txt'" in shown  # the history it printed
    assert (ws / "notes.txt").read_text() == "teh notes\n"  # and the rewind


def test_openai_agents_example(ws: Path) -> None:
    shown = run(block("integrations.md", "Runner.run"), ws, OPENAI_MODEL,
                {'"gpt-5.2"': "SCRIPTED"})
    assert shown == "written\n"
    assert (ws / "haiku.txt").read_text() == "an old pond\n"


def test_openai_capability_example(ws: Path) -> None:
    run(block("integrations.md", "CorralFilesystem(sb), Shell()"), ws, "", {})


def test_pydantic_ai_example(ws: Path) -> None:
    shown = run(block("integrations.md", "DeferredToolResults"), ws, PYDANTIC_MODEL,
                {'"openai:gpt-5.2"': "SCRIPTED"})
    assert shown.endswith("+an old pond\nwritten\n")  # the diff it showed, then the answer
    assert (ws / "haiku.txt").read_text() == "an old pond\n"


def test_langchain_example(ws: Path) -> None:
    prelude = LANGCHAIN_MODEL + 'SCRIPTED = scripted("read_file", {"path": "notes.txt"})\n'
    shown = run(block("integrations.md", "create_agent("), ws, prelude,
                {'"openai:gpt-5.2"': "SCRIPTED"})
    assert shown == "done\n"
