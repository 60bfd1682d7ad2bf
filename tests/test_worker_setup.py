"""A shared pool's blank worker refuses any setup but a well-formed one with one
directory fd per root, says why in its boot report, and exits before it confines
itself or reads anything else (forged on its socket, against the real zygote)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.calls.control import SandboxSetup
from corral.config import Limits, SandboxOptions
from corral.fs.syscalls import DIR_FLAGS
from corral.policy import Policy, RootSpec
from corral.sandbox.handles import ZygoteHandle
from corral.sandbox.protocol import (
    CONTROL_FRAME_BYTES,
    EXIT_CONFINE_FAILED,
    MAX_ROOTS,
    POKE,
    encode,
    read_frame,
)


@pytest.fixture(scope="module")
def zygote() -> Iterator[ZygoteHandle]:
    handle = ZygoteHandle(None)
    yield handle
    handle.stop()


def _setup_frame(ws: Path) -> bytes:
    setup = SandboxSetup.of([RootSpec(str(ws), "rw")], Limits(), Policy(), SandboxOptions())
    return encode(setup.to_wire(), CONTROL_FRAME_BYTES)


def _boot(zygote: ZygoteHandle, send: Callable[[socket.socket], None]) -> tuple[Any, int | None]:
    """A blank worker sent what `send` sends: (its boot report, its exit code)."""
    pid, sock, pidfd = zygote.spawn(None, ())
    with sock:
        sock.setblocking(True)
        send(sock)
        report = read_frame(sock.fileno(), 1 << 20, time.monotonic() + 30)
    os.close(pidfd)
    return report, zygote.wait(pid)


def _socket_fd() -> int:
    with socket.socket(socket.AF_UNIX) as sock:
        return os.dup(sock.fileno())


def _with_fds(frame: bytes, open_fds: Callable[[], list[int]]) -> Callable[[socket.socket], None]:
    """Sends `frame` with the fds open_fds opens when it sends (only the forgery a
    test sends opens any), closed once sent."""
    def send(sock: socket.socket) -> None:
        fds = open_fds()
        try:
            socket.send_fds(sock, [frame], fds)
        finally:
            for fd in fds:
                os.close(fd)
    return send


def test_a_setup_with_its_root_fd_confines_the_worker(zygote: ZygoteHandle, ws: Path) -> None:
    report, code = _boot(zygote, _with_fds(_setup_frame(ws), lambda: [os.open(ws, DIR_FLAGS)]))
    assert report["roots"] == [[str(ws), "rw"]] and code == 0


@pytest.mark.parametrize("forged", [
    "garbage", "huge", "request", "poke", "no_fd", "extra_fd", "too_many_fds", "file", "socket",
])
def test_a_forged_setup_is_refused(zygote: ZygoteHandle, ws: Path, forged: str) -> None:
    (ws / "f.txt").write_text("x")
    frame = _setup_frame(ws)
    root = str(ws)
    sends: dict[str, tuple[Callable[[socket.socket], None], str]] = {
        "garbage": (lambda s: s.sendall(b"\0\0\0\5hello"), "not valid JSON"),
        "huge": (lambda s: s.sendall(b"\x7f\xff\xff\xff"), "exceeds the limit"),
        "request": (lambda s: s.sendall(encode({"id": 1, "tool": "read_file",
                                                "arguments": {"path": "f.txt"}}, 1 << 20)),
                    "without its roots"),
        "poke": (lambda s: s.sendall(POKE + frame), "not valid JSON"),
        "no_fd": (lambda s: s.sendall(frame), "1 roots came with 0 fds"),
        "extra_fd": (_with_fds(frame, lambda: [os.open(root, DIR_FLAGS), os.open("/", DIR_FLAGS)]),
                     "1 roots came with 2 fds"),
        "too_many_fds": (_with_fds(frame, lambda: [os.open(root, DIR_FLAGS)
                                                   for _ in range(MAX_ROOTS + 1)]),
                         f"more than {MAX_ROOTS} file descriptors"),
        "file": (_with_fds(frame, lambda: [os.open(ws / "f.txt", os.O_RDONLY)]), "not a directory"),
        "socket": (_with_fds(frame, lambda: [_socket_fd()]), "not a directory"),
    }
    send, why = sends[forged]
    report, code = _boot(zygote, send)
    assert report["confine_error"].startswith("its setup was refused")
    assert why in report["confine_error"]
    assert code == EXIT_CONFINE_FAILED
