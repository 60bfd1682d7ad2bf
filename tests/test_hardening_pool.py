"""A compromised worker must not hurt the host. The pool runs on real processes
and sockets, but its workers are forked here and misbehave on purpose on their
first request: huge or garbage frames, silence, fds over SCM_RIGHTS, answers for
another id, or of the wrong shape. Each gets its worker replaced and a clear
error for that call only; the next call is served by a fresh, honest worker."""

from __future__ import annotations

import os
import socket
import struct
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.errors import SandboxError
from corral.sandbox.protocol import encode, read_frame, send_bytes
from corral.sandbox.supplies import MAX_BOOT_KILLS
from tests.helpers.evil_zygote import (
    FRAME_LIMIT,
    REQUEST,
    Behaviour,
    EvilZygote,
    Private,
    honest,
    honest_answer,
)


@pytest.fixture
def make_pool() -> Iterator[Callable[..., Private]]:
    pools: list[Private] = []

    def make(evil: Behaviour, timeout_s: float = 10.0, **zygote: int) -> Private:
        options = SandboxOptions(workers=1, max_frame_bytes=FRAME_LIMIT)
        pool = Private(EvilZygote(evil, **zygote), options, Limits(timeout_s=timeout_s))
        pools.append(pool)
        pool.workers.start()
        return pool

    yield make
    for pool in pools:
        pool.close()


def call(pool: Private, request_id: int = 1) -> dict[str, Any]:
    return pool.call(CallRequest(**REQUEST, id=request_id)).to_wire()


def huge_header(fd: int, request: dict[str, Any]) -> None:
    os.write(fd, struct.pack(">I", 0xFFFF_FFFF))
    time.sleep(60)


def over_the_limit(fd: int, request: dict[str, Any]) -> None:
    os.write(fd, struct.pack(">I", FRAME_LIMIT + 1) + b"{" * 64)
    time.sleep(60)


def garbage(fd: int, request: dict[str, Any]) -> None:
    os.write(fd, struct.pack(">I", 5) + b"\xff\xfe{[(")


def truncated(fd: int, request: dict[str, Any]) -> None:
    os.write(fd, struct.pack(">I", 100) + b'{"id": ')
    os._exit(0)


def another_id(fd: int, request: dict[str, Any]) -> None:
    honest(fd, {**request, "id": request["id"] + 1})  # a fake "ok" for the next call


def not_a_number(fd: int, request: dict[str, Any]) -> None:
    payload = b'{"id": %d, "ok": true, "tool": "read_file", "result": {"size": NaN}, "text": ""}'
    payload %= request["id"]
    os.write(fd, struct.pack(">I", len(payload)) + payload)  # strict JSON has no NaN


def a_list(fd: int, request: dict[str, Any]) -> None:
    os.write(fd, struct.pack(">I", 2) + b"[]")  # JSON, but not an object


SHAPES = {
    "ok is not a bool": {"ok": "yes"},
    "another tool": {"tool": "write_file"},
    "result not a dict": {"result": [1]},
    "text not a string": {"text": {"a": 1}},
    "image without data": {"result": {"image": {"media_type": "image/png"}}},
    "unknown error code": {"ok": False, "error": {"code": "pwned", "message": "x"}},
    "error without message": {"ok": False, "error": {"code": "io_error"}},
    "meta not a dict": {"meta": 5},
    "touched not paths": {"meta": {"touched": [{"path": 1}]}},
    "needs_approval not paths": {"meta": {"needs_approval": [5]}},
    "bytes negative": {"meta": {"bytes": -1}},
}


def misshapen(change: dict[str, Any]) -> Behaviour:
    def behaviour(fd: int, request: dict[str, Any]) -> None:
        answer = {
            "id": request["id"], "ok": True, "tool": request["tool"], "result": {},
            "text": "fine", **change,
        }
        send_bytes(fd, encode(answer, FRAME_LIMIT))

    return behaviour


@pytest.mark.parametrize(
    "evil", [huge_header, over_the_limit, garbage, truncated, another_id, not_a_number, a_list],
    ids=lambda fn: fn.__name__,
)
def test_a_bad_frame_loses_the_worker_not_the_host(make_pool, evil: Behaviour) -> None:
    pool = make_pool(evil)
    first = pool.pids()
    response = call(pool)
    assert response["error"]["code"] == "worker_crashed"
    assert call(pool, 2) == honest_answer(2)
    assert pool.pids() != first


@pytest.mark.parametrize("change", SHAPES.values(), ids=SHAPES.keys())
def test_an_answer_of_the_wrong_shape_loses_the_worker(make_pool, change: dict) -> None:
    pool = make_pool(misshapen(change))
    response = call(pool)
    assert response["ok"] is False
    assert response["error"]["code"] == "worker_crashed"
    assert "sent an invalid answer (it sent" in response["error"]["message"]
    assert call(pool, 2)["ok"] is True


def silent(fd: int, request: dict[str, Any]) -> None:
    time.sleep(60)


def test_a_silent_worker_times_out_and_is_replaced(make_pool) -> None:
    pool = make_pool(silent, timeout_s=0.3)
    first = pool.pids()
    assert call(pool)["error"]["code"] == "timeout"
    assert call(pool, 2)["ok"] is True
    assert pool.pids() != first


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def test_fds_a_worker_sends_never_reach_the_host(make_pool) -> None:
    def send_fds_then_answer(fd: int, request: dict[str, Any]) -> None:
        sock = socket.socket(fileno=fd)
        files = [os.open("/dev/null", os.O_RDONLY) for _ in range(8)]
        frame = encode(honest_answer(request["id"]) | {"meta": {}}, FRAME_LIMIT)
        socket.send_fds(sock, [frame[:1]], files)
        sock.sendall(frame[1:])
        sock.detach()

    pool = make_pool(send_fds_then_answer)
    before = _open_fds()
    assert call(pool)["ok"] is True
    assert _open_fds() == before  # the kernel dropped them: the host reads with readv


def test_workers_killed_while_starting_are_replaced(make_pool) -> None:
    pool = make_pool(honest, killed_at_boot=MAX_BOOT_KILLS)  # the OOM killer, say
    assert call(pool) == honest_answer(1)


def test_workers_killed_at_every_start_halt_the_pool(make_pool) -> None:
    with pytest.raises(SandboxError, match="killed while starting"):
        make_pool(honest, killed_at_boot=MAX_BOOT_KILLS + 2)


def test_a_worker_that_exits_before_reporting_halts_at_once(make_pool) -> None:
    with pytest.raises(SandboxError, match=r"did not start \(exit code 7\)"):
        make_pool(honest, boot_exit=7)


def test_an_announced_frame_costs_memory_only_as_its_bytes_arrive() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        ours.setblocking(False)
        theirs.sendall(struct.pack(">I", 256 << 20) + b"{" * 10)  # then nothing
        tracemalloc.start()
        try:
            with pytest.raises(TimeoutError):
                read_frame(ours.fileno(), 512 << 20, time.monotonic() + 0.05)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 4 << 20  # not the 256 MiB announced
