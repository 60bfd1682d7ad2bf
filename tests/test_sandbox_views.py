"""The read-only views a host (and the tests) have of a running sandbox: the
processes serving it and where its history store is."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil

from corral import AsyncSandbox, Pool, Sandbox
from corral.config import HistoryOptions
from tests.helpers.calls import ok


def children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def test_pids_are_the_zygote_and_the_workers_serving_the_sandbox(sb: Sandbox) -> None:
    ok(sb, "list_directory")  # a worker has served a call
    pids = sb.pids()
    assert set(pids) == {"zygote", "workers"} and pids["workers"]
    assert {pids["zygote"], *pids["workers"]} <= children()
    assert pids["zygote"] not in pids["workers"]


def test_a_pool_sandboxs_pids_are_its_own_workers(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    with Pool() as pool, pool.sandbox(a) as first, pool.sandbox(b) as second:
        ok(first, "list_directory")
        ok(second, "list_directory")
        assert first.pids()["zygote"] == second.pids()["zygote"]  # the pool's one zygote
        assert not set(first.pids()["workers"]) & set(second.pids()["workers"])


def test_an_async_sandbox_has_the_same_views(ws: Path) -> None:
    async def main() -> None:
        async with AsyncSandbox(ws) as sb:
            assert (await sb.call("list_directory", {}))["ok"]
            assert sb.pids()["workers"] and sb.history_path is not None

    asyncio.run(main())


def test_history_path_is_the_store_the_changes_go_to(sb: Sandbox) -> None:
    assert sb.history_path is not None and os.path.isdir(sb.history_path)
    ok(sb, "write_file", path="a.txt", content="one\n")
    (entry,) = sb.history("a.txt")
    assert (Path(sb.history_path) / f"r-{entry['id']}.json").is_file()  # the change's record


def test_history_path_is_none_while_history_is_off(ws: Path) -> None:
    with Sandbox(ws, history=HistoryOptions(enabled=False)) as sb:
        assert sb.history_off is not None and sb.history_path is None
