"""A worker that attempts a call corral never makes dies of SIGSYS: the pool
answers that call with worker_crashed, logs it naming SIGSYS (an attempt is an
event, not a quiet retry), and heals. The worker here is forked by a stand-in
zygote, loads the real seccomp filter and then attempts ptrace, as a compromised
worker would; the control worker attempts a call the filter only refuses."""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Any

import pytest

from corral import seccomp
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.seccomp.arches import load_arch, native_arch
from tests.helpers.evil_zygote import (
    FRAME_LIMIT,
    REQUEST,
    EvilZygote,
    Private,
    honest,
    honest_answer,
)

pytestmark = pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filters")
NR = load_arch(native_arch() or "x86_64").syscalls
PTRACE_TRACEME = 0


def _confined_attempt(name: str, *args: int) -> Any:
    def behaviour(fd: int, request: dict[str, Any]) -> None:
        seccomp.install()  # the worker profile, as a pool worker runs under
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(ctypes.c_long(NR[name]), *(ctypes.c_long(a) for a in args))
        honest(fd, request)  # reached only if the call was merely refused

    return behaviour


def call(pool: Private, request_id: int) -> dict[str, Any]:
    return pool.call(CallRequest(**REQUEST, id=request_id)).to_wire()


def _pool(behaviour: Any) -> Private:
    options = SandboxOptions(workers=1, max_frame_bytes=FRAME_LIMIT)
    pool = Private(EvilZygote(behaviour), options, Limits())
    pool.workers.start()
    return pool


def test_a_forbidden_call_kills_the_worker_and_is_logged(caplog) -> None:
    pool = _pool(_confined_attempt("ptrace", PTRACE_TRACEME, 0, 0, 0))
    try:
        first = pool.pids()
        with caplog.at_level(logging.WARNING, logger="corral.workers"):
            response = call(pool, 1)
        assert response["ok"] is False
        assert response["error"]["code"] == "worker_crashed"
        assert "SIGSYS" in response["error"]["message"]
        logged = [r for r in caplog.records if "SIGSYS" in r.getMessage()]
        assert len(logged) == 1 and logged[0].levelno == logging.ERROR
        assert str(first[0]) in logged[0].getMessage()
        # healed: a fresh worker serves the next call
        assert call(pool, 2) == honest_answer(2)
        assert pool.pids() != first
    finally:
        pool.close()


def test_control_a_refused_call_leaves_the_worker_serving(caplog) -> None:
    pool = _pool(_confined_attempt("socket", 2, 1, 0))  # AF_INET, SOCK_STREAM: EPERM
    try:
        first = pool.pids()
        with caplog.at_level(logging.WARNING, logger="corral.workers"):
            assert call(pool, 1) == honest_answer(1)
        assert pool.pids() == first
        assert not caplog.records
    finally:
        pool.close()


def test_other_crashes_are_logged_too(caplog) -> None:
    def dies(fd: int, request: dict[str, Any]) -> None:
        os._exit(5)  # not 3: that is EXIT_CONFINE_FAILED, which halts the sandbox

    pool = _pool(dies)
    try:
        with caplog.at_level(logging.WARNING, logger="corral.workers"):
            assert call(pool, 1)["error"]["code"] == "worker_crashed"
        assert [r.levelno for r in caplog.records] == [logging.WARNING]
        assert "exit code 5" in caplog.records[0].getMessage()
    finally:
        pool.close()
