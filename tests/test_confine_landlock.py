"""Landlock inside a confined child, asserting the kernel's errno. Each denial
has a control run with the Landlock layer dropped (everything else still
applied) that succeeds, so the test fails if the layer is ever lost."""

from __future__ import annotations

import encodings.idna  # noqa: F401  (see test_tcp_connect_is_refused_even_without_seccomp)
import errno
import os
import socket
import sys
from pathlib import Path

import pytest

from corral.sandbox import probe
from tests.helpers.calls import SECRET
from tests.helpers.confined import run_confined as _run_confined

pytestmark = pytest.mark.skipif(probe.probe()["landlock_abi"] < 1, reason="no Landlock")


def run_confined(fn, *args, drop=(), **options):
    """Landlock's own refusals: the mount namespace, which hides host paths from the
    start (tests/test_mount_namespace.py), is left out of every run here."""
    return _run_confined(fn, *args, drop=("mount_namespace", *drop), **options)
LAZY_CANDIDATES = ("colorsys", "wave", "nntplib", "mailcap", "xdrlib", "sndhdr")


@pytest.fixture
def ro_dir(tmp_path: Path) -> Path:
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "data.txt").write_text("read-only data\n")
    return ro


@pytest.fixture
def roots(workspace: Path, ro_dir: Path) -> list[tuple[str, str]]:
    return [(str(workspace), "rw"), (str(ro_dir), "ro")]


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def _write(path: str, text: str = "x") -> int:
    with open(path, "w") as handle:
        return handle.write(text)


def _denied_then_allowed(roots, fn, *args, err=errno.EACCES, drop=("landlock",)):
    confined = run_confined(fn, *args, roots=roots)
    assert confined.errno == err, confined
    control = run_confined(fn, *args, roots=roots, drop=drop)
    assert control.ok, control
    return control


def test_etc_passwd_is_out_of_reach(roots) -> None:
    control = _denied_then_allowed(roots, _read, "/etc/passwd")
    assert "root" in control.value


def test_a_file_outside_the_roots_by_absolute_path(roots, outside: Path) -> None:
    control = _denied_then_allowed(roots, _read, str(outside / "secret.txt"))
    assert SECRET in control.value


def test_creating_a_file_outside_the_roots(roots, outside: Path) -> None:
    _denied_then_allowed(roots, _write, str(outside / "new.txt"))


def _at(call, *paths: str) -> None:
    """`call` as corral.fs makes it: a parent fd and a final name (mkdirat, renameat2,
    unlinkat), since the worker's filter refuses x86_64's older mkdir, rename, unlink."""
    fds = [os.open(os.path.dirname(p), os.O_PATH | os.O_DIRECTORY) for p in paths]
    try:
        names = [os.path.basename(p) for p in paths]
        if call is os.rename:
            os.rename(names[0], names[1], src_dir_fd=fds[0], dst_dir_fd=fds[1])
        else:
            call(names[0], dir_fd=fds[0])
    finally:
        for fd in fds:
            os.close(fd)


def test_making_a_directory_outside_the_roots(roots, outside: Path) -> None:
    _denied_then_allowed(roots, _at, os.mkdir, str(outside / "newdir"))


def test_moving_a_file_out_of_the_roots(roots, workspace: Path, outside: Path) -> None:
    src, dst = str(workspace / "hello.txt"), str(outside / "stolen.txt")
    confined = run_confined(_at, os.rename, src, dst, roots=roots)
    assert confined.errno in (errno.EACCES, errno.EXDEV), confined
    assert (workspace / "hello.txt").exists()
    assert run_confined(_at, os.rename, src, dst, roots=roots, drop=("landlock",)).ok


def test_writing_in_a_read_only_root(roots, ro_dir: Path) -> None:
    _denied_then_allowed(roots, _write, str(ro_dir / "data.txt"))
    _denied_then_allowed(roots, _write, str(ro_dir / "new.txt"))
    _denied_then_allowed(roots, _at, os.unlink, str(ro_dir / "data.txt"))


def test_reading_a_read_only_root_works(roots, ro_dir: Path) -> None:
    assert run_confined(_read, str(ro_dir / "data.txt"), roots=roots).value == "read-only data\n"


def _lazy_import(name: str) -> str:
    __import__(name)
    return name


def test_a_lazy_import_fails(roots) -> None:
    name = next(n for n in LAZY_CANDIDATES if n not in sys.modules)
    confined = run_confined(_lazy_import, name, roots=roots)
    assert not confined.ok
    assert confined.errno == errno.EACCES or confined.error == "ModuleNotFoundError", confined
    assert run_confined(_lazy_import, name, roots=roots, drop=("landlock",)).ok
    assert name not in sys.modules


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    yield server.getsockname()
    server.close()


def _connect(address: tuple[str, int]) -> str:
    with socket.create_connection(address, timeout=5):
        return "connected"


@pytest.mark.skipif(probe.probe()["landlock_abi"] < 4, reason="Landlock ABI < 4: no TCP rules")
def test_tcp_connect_is_refused_even_without_seccomp(roots, listener) -> None:
    # seccomp refuses socket() first (EPERM); with it dropped, Landlock still refuses
    # connect (EACCES). create_connection imports encodings.idna: imported above, in the
    # parent, or the child's read of it is what Landlock refuses, and the test passes
    # (or, once another test has imported it, fails) without reaching connect at all.
    _denied_then_allowed(roots, _connect, listener, err=errno.EPERM, drop=("landlock", "seccomp"))
    refused = run_confined(_connect, listener, roots=roots, drop=("seccomp",))
    assert refused.errno == errno.EACCES and "idna" not in refused.message, refused


def _signal_parent() -> str:
    os.kill(os.getppid(), 0)
    return "signalled"


def _connect_abstract(name: bytes) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(name)
    return "connected"


@pytest.mark.skipif(probe.probe()["landlock_abi"] < 6, reason="Landlock ABI < 6: no scoping")
def test_signals_and_abstract_sockets_are_scoped_even_without_seccomp(roots) -> None:
    drop_seccomp = run_confined(_signal_parent, roots=roots, drop=("seccomp",))
    assert drop_seccomp.errno == errno.EPERM, drop_seccomp
    assert run_confined(_signal_parent, roots=roots, drop=("seccomp", "landlock")).ok
    name = f"\0corral-test-{os.getpid()}".encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(name)
        server.listen(1)
        scoped = run_confined(_connect_abstract, name, roots=roots, drop=("seccomp",))
        assert scoped.errno == errno.EPERM, scoped
        control = run_confined(_connect_abstract, name, roots=roots, drop=("seccomp", "landlock"))
        assert control.ok, control

