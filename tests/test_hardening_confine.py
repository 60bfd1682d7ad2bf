"""What a compromised worker could do with the calls it keeps, on the real kernel:
SIGIO to a chosen pid, set-id bits, fds sent back over its socket. Each denial
has a control run without seccomp where the call gets through, so the test fails
if the filter ever loses the argument check."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from confined import run_confined

from corral import seccomp

pytestmark = pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filters")


@pytest.fixture
def roots(workspace: Path) -> list[tuple[str, str]]:
    return [(str(workspace), "rw")]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield ours, theirs
    ours.close()
    theirs.close()


def _denied_then_allowed(roots, fn, *args, **options):
    confined = run_confined(fn, *args, roots=roots, **options)
    assert confined.errno == errno.EPERM, confined
    control = run_confined(fn, *args, roots=roots, drop=("seccomp",), **options)
    assert control.ok, control
    return control


def _own_sigio(path: str, owner: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETOWN, owner)  # SIGIO would go to `owner`
        return fcntl.fcntl(fd, fcntl.F_GETOWN)
    finally:
        os.close(fd)


def test_fcntl_cannot_aim_sigio_at_another_process(roots, workspace: Path) -> None:
    control = _denied_then_allowed(roots, _own_sigio, str(workspace / "hello.txt"), os.getpid())
    assert control.value == os.getpid()


def _fd_flags(path: str) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.set_blocking(fd, False)  # F_GETFL + F_SETFL
        copy = os.dup(fd)  # F_DUPFD_CLOEXEC
        os.close(copy)
        return os.get_inheritable(fd)  # F_GETFD
    finally:
        os.close(fd)


def test_fcntl_keeps_what_python_needs(roots, workspace: Path) -> None:
    assert run_confined(_fd_flags, str(workspace / "hello.txt"), roots=roots).value is False


def _set_id(path: str, mode: int) -> int:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fchmod(fd, mode)
        return os.fstat(fd).st_mode & 0o7777
    finally:
        os.close(fd)


@pytest.mark.parametrize("bit", [0o4000, 0o2000])
def test_fchmod_cannot_set_a_set_id_bit(roots, workspace: Path, bit: int) -> None:
    target = str(workspace / "hello.txt")
    assert _denied_then_allowed(roots, _set_id, target, bit | 0o755).value == bit | 0o755


def _send_fd(sock_fd: int, path: str) -> int:
    sock = socket.socket(fileno=sock_fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        return socket.send_fds(sock, [b"x"], [fd])
    finally:
        os.close(fd)
        sock.detach()


def test_a_worker_cannot_send_an_fd_over_its_socket(
    roots, workspace: Path, pair: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = pair
    _denied_then_allowed(
        roots, _send_fd, theirs.fileno(), str(workspace / "hello.txt"), keep_fds=[theirs.fileno()]
    )
    _, fds, _, _ = socket.recv_fds(ours, 1, 4)  # only the control run's fd arrived
    assert len(fds) == 1
    os.close(fds[0])
