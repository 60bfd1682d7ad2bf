"""Remembered approvals over MCP, through the official SDK client: the elicitation
form offers once / this file / this rule (a titled enum defaulting to once), on
the handshake revisions and on 2026-07-28's input_required round, over stdio and
HTTP; a client that only accepts (no content) is asked every time. Grants live in
the session: a new HTTP session asks again, stateless requests share their
tenant's session."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from corral.api import Sandbox
from corral.faces.mcp_actions import Action, Reply, Send
from corral.faces.mcp_core import McpSession
from corral.faces.mcp_render import approval_choices, approval_message, approval_of
from corral.faces.mcp_revisions import REVISIONS
from corral.policy import Policy
from tests.helpers.http_helpers import TOKENS, Server, running_server, sha256
from tests.helpers.mcp_core_helpers import run_all
from tests.helpers.mcp_helpers import REPO, SUPERVISED_DOCS, serve_argv, write_config

MODES = ["legacy", "2026-07-28"]
Transport = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


class Person:
    """An elicitation callback: accepts, with `remember` as the form's answer
    (None: no content, as a client that only accepts answers)."""

    def __init__(self, remember: str | None) -> None:
        self.remember = remember
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params)
        content = None if self.remember is None else {"remember": self.remember}
        return types.ElicitResult(action="accept", content=content)


def run(client: Callable[[], Client], *paths: str) -> None:
    """Write each path with one client, in order; every call must succeed."""

    async def main() -> None:
        async with client() as connected:
            with anyio.fail_after(60):
                for path in paths:
                    result = await connected.call_tool("write_file", {"path": path, "content": "x"})
                    assert not result.is_error, result

    anyio.run(main)


def stdio_client(workspace: Path, extra: tuple[str, ...], mode: str, person: Person) -> Client:
    argv = serve_argv(workspace, *extra)
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env={"PYTHONPATH": str(REPO)}, cwd=workspace)
    return Client(params, mode=mode, elicitation_callback=person)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("remember", ["path", "rule", None])
def test_stdio_remembers_what_the_person_chose(
    tmp_path: Path, ws: Path, mode: str, remember: str | None
) -> None:
    extra = write_config(tmp_path, SUPERVISED_DOCS)
    person = Person(remember)
    run(lambda: stdio_client(ws, extra, mode, person), "docs/a.md", "docs/a.md", "docs/b.md")
    asked = {"path": 2, "rule": 1, None: 3}[remember]
    assert len(person.asked) == asked
    field = person.asked[0].requested_schema["properties"]["remember"]
    assert [choice["const"] for choice in field["oneOf"]] == ["once", "path", "rule"]
    assert field["default"] == "once" and "ask-docs" in field["oneOf"][2]["title"]
    assert "(1 byte)" not in person.asked[0].message  # a new file: no size to show
    assert "+x" in person.asked[0].message  # the diff of the change


def test_the_older_form_offers_the_choice_with_enum_names() -> None:
    request = {"tool": "write_file", "targets": [{"shown": "a.txt", "size": 3}],
               "rules": [None], "diff": "--- a/a.txt\n+++ b/a.txt"}
    choices = approval_choices(request)
    field = REVISIONS["2025-06-18"].elicitation_params("?", choices)["requestedSchema"][
        "properties"]["remember"]
    assert field["enum"] == ["once", "path", "rule"] and len(field["enumNames"]) == 3
    assert "default" not in field  # not in that revision's schema
    assert "every path" in choices[2][1]
    message = approval_message(request)
    assert "a.txt (3 bytes)" in message and message.endswith("+++ b/a.txt")


@pytest.mark.parametrize(("answer", "allow", "remember"), [
    ({"action": "accept"}, True, "once"),  # the boolean-only form
    ({"action": "accept", "content": {}}, True, "once"),
    ({"action": "accept", "content": {"remember": "rule"}}, True, "rule"),
    ({"action": "accept", "content": {"remember": "forever"}}, True, "once"),
    ({"action": "decline", "content": {"remember": "path"}}, False, "once"),
    (None, False, "once"),
])
def test_an_answer_becomes_an_approval(answer: Any, allow: bool, remember: str) -> None:
    approval = approval_of(answer)
    assert (approval.allow, approval.remember) == (allow, remember)


@pytest.fixture(scope="module")
def asking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    top = tmp_path_factory.mktemp("http-remember")
    alice = top / "alice"
    alice.mkdir()
    (top / "alice.toml").write_text(f'[workspace]\nroot = "{alice}"\n{SUPERVISED_DOCS}')
    (top / "tenants.toml").write_text(
        f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{sha256(TOKENS["alice"])}"\n'
        f'config = "{top / "alice.toml"}"\n'
    )
    yield from running_server(top, alice, alice)


def http_client(server: Server, mode: str, person: Person) -> Client:
    @contextlib.asynccontextmanager
    async def connected() -> AsyncIterator[Client]:
        headers = {"authorization": f"Bearer {TOKENS['alice']}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(server.url, http_client=http)
            async with Client(transport, mode=mode, elicitation_callback=person) as client:
                yield client

    return connected()  # type: ignore[return-value]


@pytest.mark.parametrize("mode", MODES)
def test_http_remembers_for_the_session(asking_server: Server, mode: str) -> None:
    """A handshake session's grant ends with it; stateless requests share the
    tenant's session, so a later client is not asked about that file again."""
    person = Person("path")
    path = f"docs/{mode}.md"
    run(lambda: http_client(asking_server, mode, person), path, path)
    assert len(person.asked) == 1
    field = person.asked[0].requested_schema["properties"]["remember"]
    assert field["default"] == "once"
    run(lambda: http_client(asking_server, mode, person), path)
    assert len(person.asked) == (2 if mode == "legacy" else 1)


def test_a_2025_06_18_session_remembers_with_the_older_form(ws: Path) -> None:
    """Driven sans-I/O (the SDK client speaks 2025-11-25): the question carries
    enum + enumNames, and an answer choosing "path" is not asked again."""
    policy = Policy({"write_file": "supervised"})
    session = McpSession(lambda approve: Sandbox(ws, policy=policy, approve=approve))

    def call(request_id: int) -> list[Action]:
        return run_all(session, session.handle({
            "jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "write_file",
                       "arguments": {"path": "x.txt", "content": str(request_id)}}}))

    try:
        session.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "t", "version": "1"}}})
        (question,) = call(1)
        assert isinstance(question, Send)
        field = question.message["params"]["requestedSchema"]["properties"]["remember"]
        assert field["enum"] == ["once", "path", "rule"] and "oneOf" not in field
        assert "mode" not in question.message["params"]
        (reply,) = run_all(session, session.handle({
            "jsonrpc": "2.0", "id": question.message["id"],
            "result": {"action": "accept", "content": {"remember": "path"}}}))
        assert isinstance(reply, Reply) and not reply.message["result"]["isError"]
        (again,) = call(2)  # granted: answered without a question
        assert isinstance(again, Reply) and not again.message["result"]["isError"]
        assert (ws / "x.txt").read_text() == "2"
    finally:
        session.close()
        session.shut()


@pytest.mark.parametrize("mode", MODES)
def test_an_approval_round_is_not_charged_to_the_quotas_twice(
    tmp_path: Path, ws: Path, mode: str
) -> None:
    """On 2026-07-28 the question ends a round and the call comes again: the first
    round wrote nothing, so it keeps no file or byte reservation. Quota 4: a.md makes
    docs/ and itself (2), b.md reserves 2 more (itself and docs/, made or not)."""
    extra = write_config(tmp_path, SUPERVISED_DOCS + "[quota]\nfiles_created_per_hour = 4\n")
    person = Person(None)
    run(lambda: stdio_client(ws, extra, mode, person), "docs/a.md", "docs/b.md")
    assert len(person.asked) == 2
