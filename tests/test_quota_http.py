"""Tenants' quotas over `corral serve --http`: held exactly under concurrent calls,
independent between tenants, and refused without a worker."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
import pytest

from tests.helpers.http_helpers import Server, call, post, running_server, tenant

ALICE_CALLS = 10  # alice's calls_per_minute
CONCURRENT = 100


@pytest.fixture(scope="module")
def quota_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    top = tmp_path_factory.mktemp("quota")
    alice, bob = top / "alice", top / "bob"
    alice.mkdir()
    bob.mkdir()
    (top / "tenants.toml").write_text(
        tenant("alice", f'workspace = "{alice}"\nquota = {{calls_per_minute = {ALICE_CALLS}}}')
        + tenant("bob", f'workspace = "{bob}"\nquota = {{calls_per_minute = 1000}}')
    )
    yield from running_server(top, alice, bob, "--max-tenant-requests", "128")


def outcome(server: Server, token: str, index: int) -> str:
    """'ok' or the error code of one stateless tools/call."""
    status, _, body = post(server, call("list_directory", {}, index), token=token)
    assert status == 200, (status, body)
    result = json.loads(body)["result"]
    if not result["isError"]:
        return "ok"
    error = result["structuredContent"]["error"]
    if error["code"] == "quota_exceeded":
        assert 0 < error["retry_after_s"] <= 60
    return str(error["code"])


def test_concurrent_calls_hold_a_tenants_quota_exactly(quota_server: Server) -> None:
    with ThreadPoolExecutor(CONCURRENT + 30) as threads:
        alice = [threads.submit(outcome, quota_server, "alice", i) for i in range(CONCURRENT)]
        bob = [threads.submit(outcome, quota_server, "bob", i) for i in range(30)]
        alice_got = [future.result() for future in alice]
        bob_got = [future.result() for future in bob]
    assert alice_got.count("ok") == ALICE_CALLS
    assert alice_got.count("quota_exceeded") == CONCURRENT - ALICE_CALLS
    assert bob_got == ["ok"] * 30  # another tenant's quota is its own


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def test_a_tenant_over_its_quota_is_answered_without_a_worker(quota_server: Server) -> None:
    """Every process under the server (its zygote and workers) is stopped: a call that
    needed one would hang until the HTTP client gave up; the refusal comes back."""
    for _ in range(ALICE_CALLS):  # used up, whatever ran before
        outcome(quota_server, "alice", 0)
    stopped = descendants(quota_server.process.pid)
    assert stopped  # the zygote at least
    for process in stopped:
        os.kill(process.pid, signal.SIGSTOP)
    try:
        got: list[Any] = [outcome(quota_server, "alice", i) for i in range(5)]
    finally:
        for process in stopped:
            os.kill(process.pid, signal.SIGCONT)
    assert got == ["quota_exceeded"] * 5


def test_every_session_of_a_tenant_counts_together(quota_server: Server) -> None:
    for _ in range(ALICE_CALLS):  # the stateless session uses it up
        outcome(quota_server, "alice", 0)
    status, headers, _ = post(quota_server, {
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}})
    assert status == 200
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "list_directory", "arguments": {}}}
    status, _, body = post(quota_server, listing,
                           headers={"mcp-session-id": headers["mcp-session-id"]})
    assert status == 200
    error = json.loads(body)["result"]["structuredContent"]["error"]
    assert error["code"] == "quota_exceeded"
