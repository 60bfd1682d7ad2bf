"""A workspace renamed or replaced under a running sandbox, on the real kernel: a
worker forked after a rename serves the moved directory (its mount namespace is
built from the fd the sandbox holds, not the path); a replaced one (removed and
made again) answers a clear not_found naming the removal in a private and a
pooled sandbox alike, never a halt; and an HTTP tenant gets a new sandbox on the
directory there now, as a restart would."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Pool, Sandbox
from corral.config import HistoryOptions, SandboxOptions
from corral.sandbox import _mountns
from tests.helpers.http_helpers import call, post, running_server, tenant

# every call on a freshly forked worker: each builds its mount namespace anew
FRESH = SandboxOptions(workers=1, max_calls_per_worker=1)
ROUNDS = 3


@pytest.fixture(params=["private", "pooled"])
def open_sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Sandbox(ws, **kw), or the same from a Pool, closed after the test."""
    pool = Pool(idle_timeout_s=1) if request.param == "pooled" else None
    made: list[Sandbox] = []

    def make(ws: Path) -> Sandbox:
        arguments: dict[str, Any] = {
            "options": FRESH, "history": HistoryOptions(path=str(tmp_path / "store"))}
        sandbox = pool.sandbox(ws, **arguments) if pool is not None else Sandbox(ws, **arguments)
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()
    if pool is not None:
        pool.close()


def _served(tmp_path: Path, open_sandbox: Any, content: str) -> tuple[Path, Sandbox]:
    """A workspace holding a.txt (`content`), and its sandbox, which has read it once."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text(content)
    sb = open_sandbox(ws)
    first = sb.call("read_file", {"path": "a.txt"})
    assert first["ok"], first
    return ws, sb


def test_a_worker_forked_after_a_rename_serves_the_moved_directory(
    tmp_path: Path, open_sandbox: Any
) -> None:
    ws, sb = _served(tmp_path, open_sandbox, "before\n")
    before = set(sb.pids()["workers"])  # each recycled after its one call
    moved = tmp_path / "moved"
    ws.rename(moved)
    (moved / "b.txt").write_text("after the move\n")
    pids: set[int] = set()
    for round_ in range(ROUNDS):
        read = sb.call("read_file", {"path": "b.txt"})
        assert read["ok"], read
        assert read["result"]["content"] == "after the move\n"
        wrote = sb.call("write_file", {"path": f"new{round_}.txt", "content": "x"})
        assert wrote["ok"], wrote
        assert (moved / f"new{round_}.txt").read_text() == "x"
        pids.update(sb.pids()["workers"])
    assert not pids & before  # every call after the move ran on a worker forked after it
    assert not ws.exists()  # nothing was made at the old path


def _replace(ws: Path, content: str) -> None:
    shutil.rmtree(ws)
    ws.mkdir()
    (ws / "a.txt").write_text(content)


def test_a_replaced_workspace_is_named_and_the_sandbox_keeps_answering(
    tmp_path: Path, open_sandbox: Any
) -> None:
    ws, sb = _served(tmp_path, open_sandbox, "old\n")
    _replace(ws, "new\n")
    for _ in range(ROUNDS):  # each on a worker forked after the replacement
        answer = sb.call("read_file", {"path": "a.txt"})
        assert answer["error"]["code"] == "not_found", answer
        message = answer["error"]["message"]
        assert "the workspace directory was removed while the sandbox was running" in message
        assert "only a new sandbox serves" in message
    assert sb._workspace_replaced()  # what a face that serves the path asks
    # the directory there now is served by a new sandbox on the same path
    again = open_sandbox(ws)
    read = again.call("read_file", {"path": "a.txt"})
    assert read["ok"] and read["result"]["content"] == "new\n", read


def _text(answer: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(answer)["result"]
    return result


def test_an_http_tenant_gets_a_new_sandbox_on_its_replaced_workspace(tmp_path: Path) -> None:
    """The stateless revision's requests share one sandbox per tenant: once its
    workspace is replaced, the next request is served on the new directory."""
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    for ws in (alice, bob):
        ws.mkdir()
        (ws / "a.txt").write_text(f"{ws.name} old\n")
    (tmp_path / "tenants.toml").write_text(
        tenant("alice", f'workspace = "{alice}"') + tenant("bob", f'workspace = "{bob}"'))
    read = call("read_file", {"path": "a.txt"})
    for server in running_server(tmp_path, alice, bob):
        status, _, body = post(server, read)
        assert status == 200 and "alice old" in _text(body)["content"][0]["text"], body
        _replace(alice, "alice new\n")
        for request_id in range(2, 2 + ROUNDS):
            status, _, body = post(server, {**read, "id": request_id})
            result = _text(body)
            assert status == 200 and not result.get("isError"), body
            assert "alice new" in result["content"][0]["text"], body
        # the other tenant was never touched
        status, _, body = post(server, read, token="bob")
        assert "bob old" in _text(body)["content"][0]["text"], body


def test_a_root_renamed_while_its_namespace_is_built_is_found_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_mountns opens a root where the kernel says its fd's directory is; a rename
    between the asking and the opening is asked again, never bound from a path
    that now names another directory."""
    ws, moved = tmp_path / "ws", tmp_path / "moved"
    ws.mkdir()
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    asked: list[str] = []
    where = _mountns._where

    def asking(held: int) -> str:
        asked.append(where(held))
        return asked[-1]

    monkeypatch.setattr(_mountns, "_where", asking)
    path = _mountns._where(fd)
    ws.rename(moved)  # right after the kernel answered; another directory there
    ws.mkdir()
    try:
        opened = _mountns._open_held(fd, path)
        try:
            assert os.path.samestat(os.fstat(opened), os.fstat(fd))
            assert asked == [str(ws), str(moved)]
        finally:
            os.close(opened)
    finally:
        os.close(fd)
