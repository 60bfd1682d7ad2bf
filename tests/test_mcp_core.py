"""The MCP core is sans-I/O: it imports nothing that waits, and every input comes
back as actions (Reply, Send, Run, Drop). Driven here by hand, as a face would,
with a real sandbox: a question's timeout is the face's to keep, a stateless
round ends as a plain reply, and a call withdrawn while it asks is dropped."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import corral.faces.mcp_core
from corral.api import Sandbox
from corral.faces.mcp_actions import Action, Drop, Reply, Send
from corral.faces.mcp_core import ELICITATION_TIMEOUT_S, McpSession
from corral.faces.mcp_jsonrpc import ProtocolError
from corral.faces.mcp_revisions import (
    CLIENT_CAPABILITIES_KEY,
    PROTOCOL_VERSION_KEY,
    STATELESS_VERSIONS,
    served_at,
)
from corral.faces.mcp_threads import SessionDriver
from corral.policy import Policy
from tests.helpers.mcp_core_helpers import run_all

WRITE = {"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}


# The sans-I/O core: the session and the modules beside it.
CORE = ("mcp_core", "mcp_actions", "mcp_calls", "mcp_jsonrpc", "mcp_render", "mcp_revisions",
        "mcp_roots", "mcp_state")


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_nothing_that_waits(module: str) -> None:
    faces = Path(corral.faces.mcp_core.__file__).parent
    tree = ast.parse((faces / f"{module}.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    waiting = {"threading", "concurrent.futures", "concurrent", "asyncio", "queue"}
    assert not imported & waiting, imported & waiting


@pytest.fixture
def session(workspace: Path) -> Iterator[McpSession]:
    policy = Policy({"write_file": "supervised"})
    session = McpSession(lambda approve: Sandbox(workspace, policy=policy, approve=approve))
    yield session
    session.close()
    session.shut()


def handshake(session: McpSession) -> None:
    (reply,) = session.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "t", "version": "1"}}})
    assert isinstance(reply, Reply) and "result" in reply.message


def ask(session: McpSession) -> Send:
    """A supervised write: it runs until its question, which it sends and waits for."""
    handshake(session)
    (question,) = run_all(session, session.handle(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": WRITE}))
    assert isinstance(question, Send) and question.call == 1
    assert question.message["method"] == "elicitation/create"
    assert question.timeout == ELICITATION_TIMEOUT_S
    return question


def error_code(action: Action) -> str:
    assert isinstance(action, Reply)
    code: str = action.message["result"]["structuredContent"]["error"]["code"]
    return code


def test_an_answer_lets_the_call_go_on(session: McpSession, workspace: Path) -> None:
    question = ask(session)
    (reply,) = run_all(session, session.handle(
        {"jsonrpc": "2.0", "id": question.message["id"], "result": {"action": "accept"}}))
    assert isinstance(reply, Reply) and not reply.message["result"]["isError"]
    assert (workspace / "x.txt").read_text() == "x"


def test_a_question_that_times_out_is_cancelled_and_counts_as_no(
    session: McpSession, workspace: Path
) -> None:
    question = ask(session)
    notice, reply = run_all(session, session.timed_out(question.message["id"]))
    assert isinstance(notice, Send) and notice.message["method"] == "notifications/cancelled"
    assert notice.message["params"]["requestId"] == question.message["id"]
    assert error_code(reply) == "approval_denied"
    # a late answer finds nothing to answer
    assert session.handle({"jsonrpc": "2.0", "id": question.message["id"],
                           "result": {"action": "accept"}}) == []
    assert not (workspace / "x.txt").exists()


def test_a_call_withdrawn_while_it_asks_is_dropped(session: McpSession, workspace: Path) -> None:
    question = ask(session)
    assert session.handle({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 1}}) == [Drop(1)]
    assert session.handle({"jsonrpc": "2.0", "id": question.message["id"],
                           "result": {"action": "accept"}}) == []
    assert not (workspace / "x.txt").exists()


def test_input_over_answers_open_questions_no(session: McpSession, workspace: Path) -> None:
    ask(session)
    (reply,) = run_all(session, session.close())
    assert error_code(reply) == "approval_denied"
    assert not (workspace / "x.txt").exists()


def test_a_stateless_round_ends_with_a_plain_reply(session: McpSession) -> None:
    meta: dict[str, Any] = {PROTOCOL_VERSION_KEY: "2026-07-28",
                            CLIENT_CAPABILITIES_KEY: {"elicitation": {"form": {}}}}
    (reply,) = run_all(session, session.handle(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**WRITE, "_meta": meta}}))
    assert isinstance(reply, Reply)
    assert reply.message["result"]["resultType"] == "input_required"
    assert session.cancelled(1)  # the round is over: nothing of it is left in flight


def test_the_driver_takes_any_response_id(session: McpSession) -> None:
    """A response's id is the client's to get wrong (a list, an object): it names
    no question, and the driver goes on serving."""
    delivered: list[Action] = []
    driver = SessionDriver(session, deliver=lambda action, _own: delivered.append(action),
                           spawn=lambda run: pytest.fail("nothing to run"))
    for bad in ([1], {"a": 1}, None, 2.5):
        assert driver.handle({"jsonrpc": "2.0", "id": bad, "result": {}}) == []
    assert delivered == []
    assert driver.handle({"jsonrpc": "2.0", "id": 1, "method": "ping"}) == []
    assert delivered == [Reply({"jsonrpc": "2.0", "id": 1, "result": {}})]
    driver.close()


@pytest.mark.parametrize("answer", [
    {"result": ["accept"]}, {"result": {"action": ["accept"]}}, {"result": {"action": "ACCEPT"}},
    {"error": {"code": -1, "message": "no"}}, {"result": None},
], ids=["list", "action-list", "upper", "error", "null"])
def test_a_forged_answer_to_an_approval_is_a_no(
    session: McpSession, workspace: Path, answer: dict[str, Any]
) -> None:
    question = ask(session)
    (reply,) = run_all(session, session.handle(
        {"jsonrpc": "2.0", "id": question.message["id"], **answer}))
    assert error_code(reply) == "approval_denied"
    assert not (workspace / "x.txt").exists()


def test_a_request_before_any_way_in_names_both_ways() -> None:
    """Neither a handshake nor a stateless request's _meta: the error says both."""
    with pytest.raises(ProtocolError) as raised:
        served_at("server/discover", {}, None, {})
    assert "before initialize" in raised.value.message
    assert all(name in raised.value.message for name in (
        PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY, *STATELESS_VERSIONS))
