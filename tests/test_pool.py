"""The broker and its pool on the real kernel: confinement report, require,
recycling, concurrency, async, and no processes left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral import testing
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.errors import SandboxError
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker
from corral.sandbox.call_path import RSS_CHECK_EVERY
from corral.sandbox.probe import probe
from corral.sandbox.protocol import SOCKET_SEND_BYTES
from tests.helpers.broker_helpers import (
    MakeBroker,
    as_result,
    call,
    left_running,
    running,
    wait_gone,
)


def all_pids(broker: Broker) -> list[int]:
    pids = broker.pids()
    return [pids["zygote"], *pids["workers"]]


def test_every_layer_is_active_and_reported(make_broker: MakeBroker) -> None:
    broker = make_broker(require=("landlock", "seccomp", "no_new_privs", "openat2", "rlimits"))
    assert broker.confinement == {
        "landlock_abi": broker.confinement["landlock_abi"], "seccomp": True, "no_new_privs": True,
        "openat2": True, "rlimits": True, "mount_namespace": probe()["mount_namespace"],
        "level": "full",
    }
    assert broker.confinement["landlock_abi"] >= 1


def test_a_live_worker_runs_with_no_new_privs_and_a_seccomp_filter(
    make_broker: MakeBroker,
) -> None:
    broker = make_broker(workers=2)
    for pid in broker.pids()["workers"]:
        status = Path(f"/proc/{pid}/status").read_text()
        assert "NoNewPrivs:\t1" in status
        assert "Seccomp:\t2" in status
    zygote = Path(f"/proc/{broker.pids()['zygote']}/status").read_text()
    assert "Seccomp:\t0" in zygote  # the zygote forks; only its children are confined


def test_calls_run_in_the_workers_not_the_host(make_broker: MakeBroker, workspace: Path) -> None:
    broker = make_broker(workers=1)
    result = call(broker, "write_file", path="made.txt", content="from a worker\n")
    assert result["ok"], result
    assert (workspace / "made.txt").read_text() == "from a worker\n"
    read = call(broker, "read_file", path="hello.txt")
    assert read["ok"] and read["result"]["content"] == "hello\nworld\n"
    assert "id" not in read


def test_require_of_an_unknown_layer_refuses_to_start(workspace: Path) -> None:
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    with pytest.raises(SandboxError, match=r"unknown layer.*teleport"):
        Broker([RootSpec(str(workspace), "rw")], Limits(), Policy(),
               SandboxOptions(require=("landlock", "teleport")))
    after = {child.pid for child in psutil.Process().children(recursive=True)}
    assert after <= before


def test_require_of_a_layer_not_in_use_refuses_to_start(workspace: Path) -> None:
    # The walk resolver stands in for a kernel without openat2: the layer is off.
    options = SandboxOptions(resolver="walk", require=("landlock", "openat2"))
    with pytest.raises(SandboxError, match=r"required layer\(s\) openat2 not active"):
        Broker([RootSpec(str(workspace), "rw")], Limits(), Policy(), options)
    # a refused start's processes may take a moment to exit (under load in CI: one did)
    assert not wait_gone(left_running())


def test_a_missing_layer_makes_the_level_partial(make_broker: MakeBroker) -> None:
    broker = make_broker(resolver="walk")
    assert broker.confinement["openat2"] is False
    assert broker.confinement["level"] == "partial"
    assert call(broker, "read_file", path="hello.txt")["ok"]


def test_the_host_holds_no_fd_into_the_workspace(make_broker: MakeBroker, workspace: Path) -> None:
    broker = make_broker(workers=2)
    assert call(broker, "write_file", path="sub/new.txt", content="x")["ok"]
    assert call(broker, "read_file", path="hello.txt")["ok"]
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    assert [path for path in held if path.startswith(str(workspace))] == []


def test_a_worker_that_cannot_confine_itself_halts_the_start(workspace: Path) -> None:
    # A file-size limit no rlimit can hold: the worker's confine() fails, and the
    # pool must fail closed instead of serving or respawning forever.
    limits = Limits(max_file_bytes=2**70)
    with pytest.raises(SandboxError, match="could not confine itself"):
        Broker([RootSpec(str(workspace), "rw")], limits, Policy(), SandboxOptions())
    assert not left_running()


def test_workers_recycle_after_max_calls_without_failing_a_call(make_broker: MakeBroker) -> None:
    broker = make_broker(workers=1, max_calls_per_worker=3)
    seen = set()
    for _ in range(12):
        seen.update(broker.pids()["workers"])
        assert call(broker, "read_file", path="hello.txt")["ok"]
    assert len(seen) >= 3  # 12 calls, at most 3 (+10% jitter) per worker


def test_a_worker_over_its_rss_cap_is_replaced_without_failing_a_call(
    make_broker: MakeBroker,
) -> None:
    broker = make_broker(workers=1, max_worker_rss_mb=1)  # every worker is over 1 MiB
    seen = []
    for _ in range(3 * RSS_CHECK_EVERY):
        seen += broker.pids()["workers"]
        assert call(broker, "read_file", path="hello.txt")["ok"]
    assert len(set(seen)) == 3


def test_a_worker_killed_while_idle_is_replaced_before_the_next_call(
    make_broker: MakeBroker,
) -> None:
    broker = make_broker(workers=1)
    (victim,) = broker.pids()["workers"]
    os.kill(victim, signal.SIGKILL)
    assert wait_gone([victim]) == []
    assert call(broker, "read_file", path="hello.txt")["ok"]
    assert broker.pids()["workers"] != [victim]


def test_a_request_over_the_frame_limit_fails_too_large_and_keeps_the_worker(
    make_broker: MakeBroker, workspace: Path
) -> None:
    broker = make_broker(workers=1, max_frame_bytes=64 * 1024)
    workers = broker.pids()["workers"]
    result = call(broker, "write_file", path="big.txt", content="x" * 100_000)
    assert result["error"]["code"] == "too_large"
    assert "exceeds the limit of 65536 bytes" in result["error"]["message"]
    assert not (workspace / "big.txt").exists()
    assert broker.pids()["workers"] == workers


def test_a_result_over_the_frame_limit_fails_too_large_and_keeps_the_worker(
    make_broker: MakeBroker, workspace: Path
) -> None:
    (workspace / "big.txt").write_text("y" * 100_000)
    broker = make_broker(workers=1, max_frame_bytes=64 * 1024)
    workers = broker.pids()["workers"]
    result = call(broker, "read_file", path="big.txt")
    assert result["ok"] is False and result["error"]["code"] == "too_large"
    assert broker.pids()["workers"] == workers
    assert call(broker, "read_file", path="hello.txt")["ok"]


def test_asubmit_runs_calls_concurrently_without_blocking_the_loop(
    make_broker: MakeBroker,
) -> None:
    broker = make_broker(workers=2)

    async def main() -> list[dict[str, Any]]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        request = CallRequest("read_file", {"path": "hello.txt"})
        answers = await asyncio.gather(*(broker.asubmit(request) for _ in range(20)))
        results = [as_result(answer) for answer in answers]
        ticking.cancel()
        assert ticks > 1  # the loop kept running while workers answered
        return results

    results = asyncio.run(main())
    assert all(r["ok"] and r["result"]["content"] == "hello\nworld\n" for r in results)


def test_threads_share_the_pool(make_broker: MakeBroker) -> None:
    broker = make_broker(workers=2)
    results: list[dict[str, Any]] = []

    def reader() -> None:
        for _ in range(10):
            results.append(call(broker, "read_file", path="hello.txt"))

    threads = [threading.Thread(target=reader) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 60 and all(r["ok"] for r in results)


def test_close_leaves_no_zygote_or_worker(make_broker: MakeBroker) -> None:
    broker = make_broker(workers=3)
    assert call(broker, "read_file", path="hello.txt")["ok"]
    pids = all_pids(broker)
    broker.close()
    assert [pid for pid in pids if running(pid)] == []
    result = call(broker, "read_file", path="hello.txt")
    assert result["error"]["code"] == "worker_crashed" and "closed" in result["error"]["message"]


HOST = textwrap.dedent(
    """
    import json, sys, time
    from corral.config import Limits, SandboxOptions
    from corral.policy import Policy, RootSpec
    from corral.calls.messages import CallRequest
    from corral.sandbox.broker import Broker
    from corral.sandbox.launcher import template_pids

    def start():
        broker = Broker([RootSpec(sys.argv[1], "rw")], Limits(), Policy(), SandboxOptions())
        pids = broker.pids()
        print(json.dumps([pids["zygote"], *pids["workers"], *template_pids()]), flush=True)
        return broker

    if sys.argv[2] == "thread":  # started from a thread that then ends
        import threading
        holder = []
        thread = threading.Thread(target=lambda: holder.append(start()))
        thread.start()
        thread.join()
        broker = holder[0]
    else:
        broker = start()
    answer = broker.submit(CallRequest("read_file", {"path": "hello.txt"}))
    print(json.dumps(answer.ok), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("started_from", ["main", "thread"])
def test_no_orphans_after_the_host_is_killed(workspace: Path, started_from: str) -> None:
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(workspace), started_from],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
    )
    try:
        line = host.stdout.readline() if host.stdout else ""
        pids = [int(pid) for pid in line.strip("[]\n").split(",")]
        answered = host.stdout.readline() if host.stdout else ""
        assert answered.strip() == "true"  # the pool outlives the thread that started it
        # the zygote, the first worker (the second starts when two calls overlap) and
        # the template the zygote was forked from
        assert len(pids) == 3 and all(running(pid) for pid in pids)
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait()
    assert wait_gone(pids) == []


def test_a_forked_copy_of_the_host_may_not_use_the_sandbox(make_broker: MakeBroker) -> None:
    broker = make_broker(workers=1)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            try:
                call(broker, "read_file", path="hello.txt")
                os.write(write_fd, b"served")
            except SandboxError:
                os.write(write_fd, b"refused")
        finally:
            os._exit(0)
    os.close(write_fd)
    assert os.read(read_fd, 16) == b"refused"
    os.close(read_fd)
    os.waitpid(pid, 0)
    assert call(broker, "read_file", path="hello.txt")["ok"]


def test_worker_sockets_take_a_large_answer_in_one_write(make_broker: MakeBroker) -> None:
    """Both ends of a worker's socket ask for SOCKET_SEND_BYTES of send buffer (the
    kernel grants up to net.core.wmem_max, and doubles it for its bookkeeping)."""
    broker = make_broker(workers=1)
    assert call(broker, "stat_file", path=".")["ok"]
    with open("/proc/sys/net/core/wmem_max") as limit:
        expected = 2 * min(SOCKET_SEND_BYTES, int(limit.read()))
    workers = list(testing.workers(broker))
    assert workers
    for worker in workers:
        assert worker.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == expected
