"""corral.Pool on the real kernel: many sandboxes in one pool. Tenant isolation
(paths, links, moves and copies across tenants; a worker confined for one tenant
is never handed another's call, and its Landlock domain refuses the other's
files), idle reaping and revival, a bounded process count, closing one sandbox,
the per-sandbox cap, fairness under a flood, and cancellation."""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral import Pool, Sandbox, testing
from corral.calls.control import SandboxSetup
from corral.config import Limits, SandboxOptions
from corral.fs.syscalls import DIR_FLAGS
from corral.history.store import kept_name
from corral.policy import Policy, RootSpec
from corral.sandbox.handles import ZygoteHandle
from corral.sandbox.protocol import read_frame, write_frame
from tests.helpers.calls import SECRET, err, ok

SETTLE_S = 20.0  # only a safety net: what the tests wait for happens in ms


def wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def live_children(pid: int) -> list[int]:
    """Children of `pid` that are not zombies."""
    alive = []
    for child in psutil.Process(pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def worker_pids(sb: Sandbox) -> list[int]:
    return sb.pids()["workers"]


def zygote_pid(pool: Pool) -> int:
    return pool._hub.zygote.pid


def held_directories(pid: int) -> set[str]:
    """The directories a process holds open (its roots, for a worker)."""
    held = set()
    for name in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{name}")
        if target.startswith("/") and os.path.isdir(target):
            held.add(target)
    return held


def snapshot(top: Path) -> dict[str, tuple[int, bytes | None]]:
    tree = {}
    for path in sorted(top.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        tree[str(path.relative_to(top))] = (st.st_ino, data)
    return tree


@pytest.fixture
def tenants(tmp_path: Path) -> tuple[Path, Path]:
    """Two workspaces side by side; b holds a secret a must never see or change."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "mine.txt").write_text("alice\n")
    (b / "secret.txt").write_text(SECRET + "\n")
    (b / "dir").mkdir()
    return a, b


@pytest.fixture
def pool() -> Iterator[Pool]:
    with Pool(max_workers=4, idle_timeout_s=30.0) as shared:
        yield shared


# -- isolation ---------------------------------------------------------------------


def test_paths_links_moves_and_copies_never_reach_another_tenant(
    pool: Pool, tenants: tuple[Path, Path]
) -> None:
    a, b = tenants
    os.symlink(str(b / "secret.txt"), a / "abs_link")
    os.symlink("../b/secret.txt", a / "rel_link")
    os.symlink(str(b), a / "dir_link")
    os.link(b / "secret.txt", a / "hard_link")  # placed by someone with access to both
    before = snapshot(b)
    sa, sb = pool.sandbox(a), pool.sandbox(b)
    ok(sb, "read_file", path="secret.txt")  # b's own tenant reads it
    outside = {
        "read_file": [{"path": str(b / "secret.txt")}, {"path": "../b/secret.txt"},
                      {"path": "abs_link"}, {"path": "rel_link"}, {"path": "dir_link/secret.txt"}],
        "list_directory": [{"path": str(b)}, {"path": ".."}, {"path": "dir_link"}],
        "stat_file": [{"path": str(b / "secret.txt")}, {"path": "dir_link/secret.txt"}],
        "grep": [{"pattern": "SECRET", "path": str(b)}, {"pattern": "SECRET", "path": "../b"}],
        "search_files": [{"pattern": "*", "path": str(b)}],
        "write_file": [{"path": str(b / "new.txt"), "content": "x"},
                       {"path": "dir_link/new.txt", "content": "x"}],
        "move_file": [{"source": "mine.txt", "destination": str(b / "moved.txt")},
                      {"source": str(b / "secret.txt"), "destination": "stolen.txt"},
                      {"source": "mine.txt", "destination": "../b/moved.txt"}],
        "copy_file": [{"source": str(b / "secret.txt"), "destination": "stolen.txt"},
                      {"source": "mine.txt", "destination": str(b / "copied.txt")},
                      {"source": "dir_link/secret.txt", "destination": "stolen.txt"}],
        "create_directory": [{"path": str(b / "made")}],
    }
    for tool, calls in outside.items():
        for arguments in calls:
            error = err(sa, tool, **arguments)
            assert error["code"] == "outside_workspace", (tool, arguments, error)
    # the hard link is b's inode: writes through it replace a's name only, appends refuse
    assert err(sa, "append_file", path="hard_link", content="more")["code"] == "path_denied"
    ok(sa, "edit_file", path="hard_link", old_string=SECRET, new_string="edited")
    ok(sa, "write_file", path="hard_link", content="overwritten\n")
    assert snapshot(b) == before
    assert not (a / "stolen.txt").exists()


def test_worker_of_one_tenant_never_serves_another(tmp_path: Path) -> None:
    """Many tenants, few workers, interleaved calls from threads: every worker holds
    only its own tenant's root, and the workers two tenants used never overlap."""
    workspaces = []
    for index in range(8):
        ws = tmp_path / f"t{index}"
        ws.mkdir()
        (ws / "who.txt").write_text(f"tenant {index}\n")
        workspaces.append(ws)
    served: dict[int, set[int]] = {index: set() for index in range(8)}
    problems: list[str] = []
    with Pool(max_workers=3, idle_timeout_s=30.0) as pool:
        sandboxes = [pool.sandbox(ws, workers=1) for ws in workspaces]

        def tenant(index: int) -> None:
            for _ in range(15):
                response = sandboxes[index].call("read_file", {"path": "who.txt"})
                if response.get("result", {}).get("content") != f"tenant {index}\n":
                    problems.append(f"tenant {index} got {response}")
                for pid in worker_pids(sandboxes[index]):
                    served[index].add(pid)
                    try:
                        held = held_directories(pid)
                    except FileNotFoundError:
                        continue  # evicted meanwhile
                    history = testing.history(sandboxes[index])
                    kept = os.path.join(history.path, kept_name(str(workspaces[index])))
                    own = {str(workspaces[index]), kept, history.work_path}
                    if held - own:  # its root, and its own workspace's history directories
                        problems.append(f"worker {pid} of tenant {index} holds {held}")

        threads = [threading.Thread(target=tenant, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not problems
    for i in served:
        for j in served:
            if i < j:
                assert not served[i] & served[j], (i, j)


class ProbeZygote(ZygoteHandle):
    """The real zygote, whose confined workers try opening paths instead of serving."""

    ENTRY = "tests.helpers.tenant_probe"


def test_landlock_domain_of_a_tenants_worker_refuses_another_tenants_files(
    tenants: tuple[Path, Path],
) -> None:
    a, b = tenants
    zygote = ProbeZygote(None)
    fd = os.open(a, DIR_FLAGS)
    try:
        setup = SandboxSetup.of([RootSpec(str(a), "rw")], Limits(), Policy(), SandboxOptions())
        pid, sock, pidfd = zygote.spawn(setup, [fd])
        sock.setblocking(True)
        report = read_frame(sock.fileno(), 1 << 20)
        assert report is not None and report["confinement"]["landlock_abi"] >= 1
        assert report["roots"] == [[str(a), "rw"]]
        assert held_directories(pid) == {str(a)}
        mine, theirs = str(a / "mine.txt"), str(b / "secret.txt")
        write_frame(sock.fileno(), {"id": 1, "paths": [mine, theirs, str(b)]}, 1 << 20)
        answer = read_frame(sock.fileno(), 1 << 20)
        assert answer is not None
        # Landlock refuses (EACCES); in the worker's mount namespace, where the kernel
        # allows one, the other tenant's paths do not even exist (ENOENT)
        hidden = "ENOENT" if report["confinement"].get("mount_namespace") else "EACCES"
        assert answer["opened"] == {mine: "ok", theirs: hidden, str(b): hidden}
        sock.close()
        os.close(pidfd)
        zygote.wait(pid)
    finally:
        os.close(fd)
        zygote.stop()


# -- lifecycle -------------------------------------------------------------------


def test_idle_workers_exit_and_come_back(tenants: tuple[Path, Path]) -> None:
    a, _ = tenants
    with Pool(max_workers=2, idle_timeout_s=0.2) as pool:
        sa = pool.sandbox(a)
        ok(sa, "read_file", path="mine.txt")
        first = worker_pids(sa)
        assert first
        wait_for(lambda: pool.stats()["workers"] == 0, "the idle worker to exit")
        # the zygote reaps its exited child a moment later, not at once
        wait_for(lambda: not live_children(zygote_pid(pool)), "the zygote to reap it")
        assert worker_pids(sa) == []
        assert "alice" in ok(sa, "read_file", path="mine.txt")["text"]  # revived on demand
        assert worker_pids(sa) and set(worker_pids(sa)).isdisjoint(first)


def test_300_sandboxes_stay_within_max_workers(tmp_path: Path) -> None:
    max_workers = 6
    peak = 0
    stop = threading.Event()
    with Pool(max_workers=max_workers, idle_timeout_s=30.0) as pool:
        zygote = zygote_pid(pool)

        def watch() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, len(live_children(zygote)))
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        sandboxes = []
        for index in range(300):
            ws = tmp_path / f"w{index}"
            ws.mkdir()
            (ws / "n.txt").write_text(str(index))
            sandboxes.append(pool.sandbox(ws))
        assert pool.stats()["sandboxes"] == 300

        def serve(part: list[tuple[int, Sandbox]]) -> None:
            for index, sb in part:
                assert ok(sb, "read_file", path="n.txt")["result"]["content"] == str(index)

        parts = [list(enumerate(sandboxes))[k::4] for k in range(4)]
        threads = [threading.Thread(target=serve, args=(part,)) for part in parts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for sb in sandboxes:  # their start-up sweeps take workers too
            testing.sweep(testing.broker(sb)).result()
        stop.set()
        watcher.join()
        assert pool.stats()["workers"] <= max_workers
        assert len(live_children(zygote)) <= max_workers
        assert 1 <= peak <= max_workers


def test_closing_one_sandbox_leaves_the_others_running(
    pool: Pool, tenants: tuple[Path, Path]
) -> None:
    a, b = tenants
    sa, sb = pool.sandbox(a), pool.sandbox(b)
    ok(sa, "read_file", path="mine.txt")
    ok(sb, "read_file", path="secret.txt")
    gone = worker_pids(sa)
    sa.close()
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
               for pid in gone)
    with pytest.raises(RuntimeError):
        sa.call("read_file", {"path": "mine.txt"})
    ok(sb, "read_file", path="secret.txt")
    assert pool.stats()["sandboxes"] == 1


def test_closing_the_pool_stops_every_process(tenants: tuple[Path, Path]) -> None:
    a, b = tenants
    pool = Pool(max_workers=4)
    sa, sb = pool.sandbox(a), pool.sandbox(b)
    ok(sa, "read_file", path="mine.txt")
    ok(sb, "read_file", path="secret.txt")
    pids = [zygote_pid(pool), *worker_pids(sa), *worker_pids(sb)]
    pool.close()
    for pid in pids:
        assert stopped(pid), pid
    with pytest.raises(RuntimeError):
        sb.call("read_file", {"path": "secret.txt"})


def stopped(pid: int) -> bool:
    """Gone, or a zombie its parent has yet to reap (which it may do as we look)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_workers_caps_a_sandboxes_share(pool: Pool, tenants: tuple[Path, Path]) -> None:
    a, _ = tenants
    sa = pool.sandbox(a, workers=1)
    most = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, pool.stats()["busy_workers"], len(worker_pids(sa)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [
        threading.Thread(target=lambda: [ok(sa, "stat_file", path="mine.txt") for _ in range(20)])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    watcher.join()
    assert most == 1


# -- fairness --------------------------------------------------------------------


def _quiet_latencies(sb: Sandbox, count: int, pids: set[int] | None = None) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        ok(sb, "stat_file", path="mine.txt")
        samples.append(time.perf_counter() - start)
        if pids is not None:
            pids.update(worker_pids(sb))
        time.sleep(0.002)
    return samples


class Flood:
    """Threads calling a sandbox as fast as they can (work in its workers, not the host)."""

    def __init__(self, sb: Sandbox, threads: int = 6) -> None:
        self.sb = sb
        self.calls = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        while not self.stop.is_set():
            ok(self.sb, "grep", pattern="needle")
            self.calls += 1

    def __enter__(self) -> Flood:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def test_a_flooding_tenant_cannot_starve_a_quiet_one(tmp_path: Path) -> None:
    """The flooder holds the whole pool when the quiet tenant arrives: the quiet one
    still gets a worker and keeps it. Its median latency stays within a generous
    multiple of its latency beside the same flood running in another pool (same
    CPU contention, no sharing), measured in the same run."""
    quiet_ws, flood_ws = tmp_path / "quiet", tmp_path / "flood"
    quiet_ws.mkdir()
    flood_ws.mkdir()
    (quiet_ws / "mine.txt").write_text("q\n")
    (flood_ws / "big.txt").write_text("line of text to grep through\n" * 20000 + "needle\n")
    with Pool(max_workers=2) as pool, Pool(max_workers=2) as elsewhere:
        alone_sb = pool.sandbox(quiet_ws, workers=1)
        with Flood(elsewhere.sandbox(flood_ws, workers=2)):
            alone = statistics.median(_quiet_latencies(alone_sb, 41)[1:])
        alone_sb.close()
        with Flood(pool.sandbox(flood_ws, workers=2)) as flood:
            wait_for(lambda: pool.stats()["queued_calls"] >= 3, "the flood to fill the pool")
            quiet = pool.sandbox(quiet_ws, workers=1)  # no worker yet: it must get one
            under: list[float] = []
            used: set[int] = set()
            measure = threading.Thread(
                target=lambda: under.extend(_quiet_latencies(quiet, 41, used))
            )
            measure.start()
            measure.join(SETTLE_S)
            starved = measure.is_alive()
            stats = pool.stats()
        measure.join()
    assert not starved, "the quiet tenant starved"
    assert stats["workers"] == 2 and stats["queued_calls"] >= 1  # the flood went on
    assert flood.calls > 0
    assert len(used) == 1  # its worker was never taken back by the flooder
    median = statistics.median(under[1:])  # the first call forks its worker
    assert median < 10 * alone, (median, alone)


# -- cancellation ----------------------------------------------------------------

CATASTROPHIC = "(a+)+$"  # exponential backtracking on a line of a's ending in b


def test_cancelling_an_awaited_call_stops_it(tenants: tuple[Path, Path]) -> None:
    a, _ = tenants
    (a / "slow.txt").write_text("a" * 40 + "b\n")

    async def scenario(pool: Pool) -> None:
        slow = pool.async_sandbox(a, limits=Limits(timeout_s=60.0))
        other = pool.async_sandbox(a)
        for sandbox in (slow, other):  # their start-up sweeps take the worker too
            await asyncio.wrap_future(testing.sweep(testing.broker(sandbox)))
        running = asyncio.ensure_future(slow.call("grep", {"pattern": CATASTROPHIC}))
        await asyncio.to_thread(wait_for, lambda: slow.pids()["workers"], "the grep")
        pid = slow.pids()["workers"][0]
        queued = asyncio.ensure_future(  # the pool's one worker is busy: this one queues
            other.call("write_file", {"path": "never.txt", "content": "x"})
        )
        await asyncio.to_thread(wait_for, lambda: pool.stats()["queued_calls"] == 1, "queueing")
        queued.cancel()
        running.cancel()
        for task in (queued, running):
            with pytest.raises(asyncio.CancelledError):
                await task
        await asyncio.to_thread(wait_for, lambda: not psutil.pid_exists(pid) or
                                psutil.Process(pid).status() == "zombie", "the worker to die")
        await asyncio.to_thread(wait_for, lambda: pool.stats()["busy_workers"] == 0, "idle")
        assert pool.stats()["queued_calls"] == 0
        assert (await other.call("stat_file", {"path": "mine.txt"}))["ok"]
        assert not (a / "never.txt").exists()

    with Pool(max_workers=1) as pool:
        asyncio.run(scenario(pool))  # a grep not stopped would run for 60 s: wait_for fails
