"""`corral serve --http --state-key-file`: two servers given one key accept each other's
2026-07-28 rounds (an approval begun on one completes on the other, as behind a
gateway with two replicas, or across a restart); without it each refuses the
other's requestState. A key file others may read, or too short, is refused at start."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli_helpers import run
from tests.helpers.http_helpers import STATELESS_META, Server, post, running_server, tenant

ASKING_META = {**STATELESS_META, "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
WRITE = {"name": "write_file", "arguments": {"path": "approved.txt", "content": "yes\n"}}


@pytest.fixture
def top(tmp_path: Path) -> Path:
    """alice, whose write_file is supervised, and a key file only its owner reads."""
    alice = tmp_path / "alice"
    alice.mkdir()
    (tmp_path / "alice.toml").write_text(
        f'[workspace]\nroot = "{alice}"\n[tools]\nwrite_file = "supervised"\n')
    (tmp_path / "tenants.toml").write_text(tenant("alice", f'config = "{tmp_path / "alice.toml"}"'))
    key = tmp_path / "state.key"
    key.write_text("c2VjcmV0LXRoYXQtb25seS10aGUtc2VydmVyLXJlYWRz\n")
    key.chmod(0o600)
    return tmp_path


def two_servers(top: Path, *flags: str) -> Iterator[tuple[Server, Server]]:
    first = running_server(top, top / "alice", top / "alice", *flags)
    second = running_server(top, top / "alice", top / "alice", *flags)
    try:
        yield next(first), next(second)
    finally:
        first.close()
        second.close()


def tools_call(params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {**params, "_meta": ASKING_META}}


def begin_on(server: Server) -> tuple[str, str]:
    """Round 1: the call asks for approval; (the question's key, the requestState)."""
    status, _, body = post(server, tools_call(WRITE))
    result = json.loads(body)["result"]
    assert status == 200 and result["resultType"] == "input_required", result
    (key, question), = result["inputRequests"].items()
    assert question["method"] == "elicitation/create"
    return key, result["requestState"]


def finish_on(server: Server, key: str, state: str) -> dict[str, Any]:
    """Round 2: the same call, approved, with round 1's requestState."""
    retry = {**WRITE, "inputResponses": {key: {"action": "accept", "content": {}}},
             "requestState": state}
    status, _, body = post(server, tools_call(retry))
    assert status == 200, body
    return dict(json.loads(body))


def test_a_round_begun_on_one_server_completes_on_another_given_the_same_key(top: Path) -> None:
    for one, other in two_servers(top, "--state-key-file", str(top / "state.key")):
        key, state = begin_on(one)
        assert not (top / "alice" / "approved.txt").exists()
        done = finish_on(other, key, state)["result"]
        assert done["resultType"] == "complete" and done["isError"] is False, done
        assert (top / "alice" / "approved.txt").read_text() == "yes\n"


def test_without_the_key_another_server_refuses_the_state(top: Path) -> None:
    for one, other in two_servers(top):
        key, state = begin_on(one)
        error = finish_on(other, key, state)["error"]
        assert error["code"] == -32602 and "requestState" in error["message"], error
        assert not (top / "alice" / "approved.txt").exists()


@pytest.mark.parametrize(("mode", "text", "why"), [
    (0o640, "x" * 40, "may be read by others (mode 640); it must be readable by the server's "
                      "account only: chmod 600 it"),
    (0o600, "short", "holds 5 bytes; it needs 32 to 4096"),
])
def test_a_key_file_others_may_read_or_too_short_is_refused_at_start(
    capsys: pytest.CaptureFixture[str], top: Path, mode: int, text: str, why: str,
) -> None:
    key = top / "state.key"
    key.write_text(text)
    os.chmod(key, mode)
    code, _, error = run(capsys, "serve", "--http", "127.0.0.1:0", "--tenants",
                         str(top / "tenants.toml"), "--state-key-file", str(key))
    assert code == 2
    assert error.startswith(f"corral: error: {key}: the state key file ") and why in error, error


def test_the_key_file_goes_with_http(capsys: pytest.CaptureFixture[str], top: Path) -> None:
    code, _, error = run(capsys, "serve", "--workspace", str(top / "alice"),
                         "--state-key-file", str(top / "state.key"))
    assert code == 2 and "--state-key-file goes with --http" in error, error
