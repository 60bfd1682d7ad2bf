"""confine() as a whole: the layers it reports, what /proc shows of a live
confined child, inherited fds, rlimits, failing closed, and the kernel probe."""

from __future__ import annotations

import errno
import os
import resource
import threading
from pathlib import Path

import pytest

from corral.config import Limits
from corral.sandbox import probe
from corral.sandbox.confine import MAX_OPEN_FILES, ConfinementError, confine, rlimits
from tests.helpers.confined import ConfinedChild, run_confined

KERNEL = probe.probe()
pytestmark = pytest.mark.skipif(
    not (KERNEL["landlock_abi"] and KERNEL["seccomp"]), reason="needs Landlock and seccomp"
)


@pytest.fixture
def roots(workspace: Path) -> list[tuple[str, str]]:
    return [(str(workspace), "rw")]


def test_probe_reports_what_this_kernel_offers() -> None:
    assert set(KERNEL) == {"landlock_abi", "seccomp", "openat2", "no_new_privs",
                           "mount_namespace"}
    assert KERNEL["landlock_abi"] >= 1
    assert KERNEL["openat2"] is True
    assert KERNEL["no_new_privs"] is True


def test_every_layer_the_kernel_offers_is_applied(roots) -> None:
    outcome = run_confined(probe.observed, roots=roots)
    assert outcome.layers == {
        "landlock_abi": KERNEL["landlock_abi"], "seccomp": True, "no_new_privs": True,
        "rlimits": True, "mount_namespace": KERNEL["mount_namespace"],
    }
    # from the inside, /proc is out of reach: the child asks prctl and probes Landlock
    assert outcome.value == {
        "no_new_privs": True, "seccomp": True, "seccomp_filters": None, "landlock": True,
    }


def test_proc_status_of_a_live_confined_child(roots) -> None:
    go_read, go_write = os.pipe()
    try:
        child = ConfinedChild(os.read, go_read, 1, roots=roots, keep_fds=[go_read])
        child.ready()
        with open(f"/proc/{child.pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status)
        assert fields["NoNewPrivs"].strip() == "1"
        assert fields["Seccomp"].strip() == "2"
        assert probe.observed(child.pid) == {
            "no_new_privs": True, "seccomp": True, "seccomp_filters": 1,
        }
        os.write(go_write, b"x")
        assert child.outcome().value == b"x"
    finally:
        os.close(go_read)
        os.close(go_write)


def test_this_process_is_not_confined() -> None:
    assert probe.observed()["landlock"] is False
    assert probe.observed(os.getpid())["seccomp"] is False


def _fd_state(fds: list[int]) -> list[str]:
    states = []
    for fd in fds:
        try:
            os.fstat(fd)
            states.append("open")
        except OSError as exc:
            states.append(errno.errorcode[exc.errno])
    return [*states, os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")]


def test_only_kept_fds_survive_and_stdio_is_dev_null(roots, workspace: Path) -> None:
    kept = os.open(workspace / "hello.txt", os.O_RDONLY)
    stray = os.open(workspace / "hello.txt", os.O_RDONLY)
    try:
        outcome = run_confined(_fd_state, [kept, stray], roots=roots, keep_fds=[kept])
    finally:
        os.close(kept)
        os.close(stray)
    assert outcome.value == ["open", "EBADF", "/dev/null", "/dev/null"]


def _limits() -> dict[int, tuple[int, int]]:
    return {which: resource.getrlimit(which) for which in (
        resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE, resource.RLIMIT_AS, resource.RLIMIT_CORE)}


def test_rlimits_are_set_and_cannot_be_raised(roots) -> None:
    limits = Limits()
    got = run_confined(_limits, roots=roots, limits=limits).value
    assert got == {which: (value, value) for which, value in rlimits(limits).items()}
    assert got[resource.RLIMIT_NOFILE] == (MAX_OPEN_FILES, MAX_OPEN_FILES)
    assert got[resource.RLIMIT_CORE] == (0, 0)


def _write_past(path: str, size: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        return os.write(fd, b"x" * size)
    finally:
        os.close(fd)


def test_a_write_past_max_file_bytes_fails_with_efbig_and_the_worker_survives(
    roots, workspace: Path
) -> None:
    limits = Limits(max_file_bytes=64 * 1024)
    path = str(workspace / "big.bin")
    at_limit = run_confined(_write_past, path, 64 * 1024, roots=roots, limits=limits)
    assert at_limit.value == 64 * 1024
    os.unlink(path)
    past = run_confined(_write_past, path, 64 * 1024 + 1, roots=roots, limits=limits)
    assert past.value == 64 * 1024  # the kernel writes what fits: a short write
    again = run_confined(_write_past, path, 1, roots=roots, limits=limits)
    assert again.value == 1  # rewrites at offset 0, within the limit
    # SIGXFSZ would kill the child here (ChildProcessError) were it not ignored
    appended = run_confined(_append, path, roots=roots, limits=limits)
    assert appended.errno == errno.EFBIG, appended


def _append(path: str) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        return os.write(fd, b"y")
    finally:
        os.close(fd)


def test_a_missing_root_fails_closed(tmp_path: Path) -> None:
    outcome = run_confined(os.getpid, roots=[(str(tmp_path / "missing"), "rw")])
    assert outcome.error == "ConfinementError", outcome
    assert "missing" in outcome.message  # the first layer that needs it names it


@pytest.mark.parametrize(
    ("root", "message"), [(("relative/dir", "rw"), "absolute"), (("/tmp", "rwx"), "mode")]
)
def test_bad_roots_fail_closed(root: tuple[str, str], message: str) -> None:
    outcome = run_confined(os.getpid, roots=[root])
    assert outcome.error == "ConfinementError" and message in outcome.message, outcome


def _confine_with_a_thread_running(root: str) -> str:
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        confine([(root, "rw")], keep_fds=[], limits=Limits())
    except ConfinementError as exc:
        return str(exc)
    finally:
        release.set()
        thread.join()
    return "confined"


def test_a_second_thread_fails_closed(workspace: Path) -> None:
    # Landlock and no_new_privs would bind this thread only: the other would stay free
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            message = _confine_with_a_thread_running(str(workspace))
            code = 0 if "single-threaded" in message else 1
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
