"""A stand-in zygote whose workers misbehave on purpose on their first request,
and a private sandbox's call path over it: what the compromised-worker tests of
the pool (tests/test_hardening_pool.py, test_pool_logs.py, test_seccomp_kill.py)
drive. The workers are real forked processes on real sockets."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.sandbox.call_path import CallPath
from corral.sandbox.protocol import encode, read_frame, send_bytes
from corral.sandbox.worker_set import WorkerSet

FRAME_LIMIT = 1 << 20  # small, so an oversize announcement is cheap to make
LAYERS = {"landlock_abi": 0, "seccomp": False, "no_new_privs": False, "rlimits": False}
REQUEST: dict[str, Any] = {"tool": "read_file", "arguments": {"path": "x"}}

Behaviour = Callable[[int, dict[str, Any]], None]


def honest(fd: int, request: dict[str, Any]) -> None:
    if "cleanup" in request:
        answer: dict[str, Any] = {"id": request["id"], "removed": 0}
    else:
        answer = {
            "id": request["id"], "ok": True, "tool": request["tool"], "result": {},
            "text": "fine", "meta": {"touched": [], "bytes": 0, "needs_approval": []},
        }
    send_bytes(fd, encode(answer, FRAME_LIMIT))


class EvilZygote:
    """Stands in for the zygote: forks workers that misbehave (generation 0 only)."""

    pid = os.getpid()

    def __init__(self, evil: Behaviour, killed_at_boot: int = 0, boot_exit: int = 0) -> None:
        self.evil = evil
        self.killed_at_boot = killed_at_boot  # this many workers die of SIGKILL before reporting
        self.boot_exit = boot_exit  # or, if not 0, every worker exits with it before reporting
        self.spawned = 0
        self.children: set[int] = set()

    def spawn(self, *_: object) -> tuple[int, socket.socket, int]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        behaviour = self.evil if self.spawned == self.killed_at_boot else honest
        killed = self.spawned < self.killed_at_boot
        self.spawned += 1
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the fake worker
            code = 0
            try:
                ours.close()
                if killed:
                    os.kill(os.getpid(), signal.SIGKILL)
                if self.boot_exit:
                    os._exit(self.boot_exit)
                _serve(theirs.fileno(), behaviour)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        ours.setblocking(False)
        self.children.add(pid)
        return pid, ours, os.pidfd_open(pid)

    def wait(self, pid: int) -> int | None:
        self.children.discard(pid)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    def stop(self) -> None:
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        self.children.clear()


def _serve(fd: int, behaviour: Behaviour) -> None:  # pragma: no cover - the fake worker
    send_bytes(fd, encode({"confinement": LAYERS, "pid": os.getpid()}, FRAME_LIMIT))
    while (request := read_frame(fd, FRAME_LIMIT)) is not None:
        behaviour(fd, request)


class Private:
    """A private sandbox's workers (a WorkerSet of `zygote`'s) and its call path."""

    def __init__(self, zygote: Any, options: SandboxOptions, limits: Limits) -> None:
        self.workers = WorkerSet(zygote, options, limits)
        self.path = CallPath(self.workers, options, limits)

    def call(self, request: CallRequest) -> Any:
        return self.path.call(request)

    def pids(self) -> list[int]:
        return self.workers.pids()

    def close(self) -> None:
        self.workers.close()


def honest_answer(request_id: int) -> dict[str, Any]:
    return {
        "id": request_id, "ok": True, "tool": "read_file", "result": {}, "text": "fine",
        "meta": {},  # as the host writes it: what is empty left out
    }
