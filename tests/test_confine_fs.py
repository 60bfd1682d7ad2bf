"""What corral.fs needs still works inside a confined child: the raw file
operations, and a Root round trip with either resolver."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from corral.errors import CorralError
from corral.fs import Root
from corral.sandbox import probe
from tests.helpers.confined import run_confined

pytestmark = pytest.mark.skipif(probe.probe()["landlock_abi"] < 1, reason="no Landlock")
MAX_FILE = 1 << 20


def _raw_operations(ws: str) -> dict[str, object]:
    dir_fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    done: dict[str, object] = {}
    with open(os.path.join(ws, "hello.txt"), "rb") as handle:
        done["read"] = handle.read()
        done["readlink"] = os.readlink(f"/proc/self/fd/{handle.fileno()}")
        fcntl.flock(handle, fcntl.LOCK_EX)
        fcntl.flock(handle, fcntl.LOCK_UN)
    os.mkdir("sub", dir_fd=dir_fd)
    # atomic write: temp file, old mode onto the temp fd, fsync, rename over
    fd = os.open("sub/.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                 dir_fd=dir_fd)
    os.write(fd, b"new\n")
    os.fchmod(fd, 0o644)
    os.ftruncate(fd, 4)
    os.fsync(fd)
    os.close(fd)
    os.rename("sub/.tmp", "hello.txt", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # REFER
    done["mode"] = os.stat("hello.txt", dir_fd=dir_fd).st_mode & 0o777
    done["listing"] = sorted(os.listdir(ws))
    os.unlink("hello.txt", dir_fd=dir_fd)
    os.rmdir("sub", dir_fd=dir_fd)
    done["left"] = os.listdir(ws)
    os.close(dir_fd)
    return done


def test_raw_file_operations(workspace: Path) -> None:
    outcome = run_confined(_raw_operations, str(workspace), roots=[(str(workspace), "rw")])
    assert outcome.value == {
        "read": b"hello\nworld\n", "readlink": str(workspace / "hello.txt"),
        "mode": 0o644, "listing": ["hello.txt", "sub"], "left": [],
    }


def _round_trip(root: Root) -> dict[str, object]:
    done: dict[str, object] = {}
    done["created"] = root.write_atomic("a/b/c.txt", b"one\n").created
    done["rewritten"] = root.write_atomic("a/b/c.txt", b"two\n").created
    done["read"] = root.read_bytes("a/b/c.txt", max_file_bytes=MAX_FILE)
    done["size"] = root.append("a/b/c.txt", b"three\n", max_file_bytes=MAX_FILE)
    done["mkdir"] = root.mkdir("d")
    root.rename("a/b/c.txt", root, "d/c.txt")
    info = root.info("d/c.txt")
    done["info"] = (info.type, info.size) if info else None
    done["walk"] = [entry.path for entry in root.walk(".")]
    root.unlink("d/c.txt")
    done["gone"] = root.info("d/c.txt")
    try:
        root.read_bytes("../outside/secret.txt", max_file_bytes=MAX_FILE)
    except CorralError as exc:
        done["escape"] = exc.code
    return done


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_a_root_round_trip_through_inherited_fds(workspace: Path, resolver: str) -> None:
    root = Root(str(workspace), mode="rw", resolver=resolver)
    try:
        # the root's fd names the directory: the Landlock rule goes on it, not its path
        outcome = run_confined(_round_trip, root, roots=[root], keep_fds=[root.fd])
    finally:
        root.close()
    assert outcome.value == {
        "created": True, "rewritten": False, "read": b"two\n", "size": 10, "mkdir": True,
        "info": ("file", 10), "walk": ["a", "a/b", "d", "d/c.txt", "hello.txt"], "gone": None,
        "escape": "outside_workspace",
    }, outcome


def test_a_read_only_root_reads_but_refuses_changes(workspace: Path) -> None:
    root = Root(str(workspace), mode="ro")

    def read_then_write() -> tuple[bytes, str]:
        data = root.read_bytes("hello.txt", max_file_bytes=MAX_FILE)
        try:
            root.write_atomic("hello.txt", b"changed")
        except CorralError as exc:
            return data, exc.code
        return data, "written"

    try:
        outcome = run_confined(read_then_write, roots=[root], keep_fds=[root.fd])
    finally:
        root.close()
    assert outcome.value == (b"hello\nworld\n", "read_only")


def test_landlock_holds_behind_a_root_that_would_write(workspace: Path) -> None:
    root = Root(str(workspace), mode="rw")  # the fs layer would write; the kernel says no

    def write() -> str:
        try:
            root.write_atomic("hello.txt", b"changed")
        except CorralError as exc:
            return exc.code
        return "written"

    try:
        outcome = run_confined(write, roots=[(str(workspace), "ro")], keep_fds=[root.fd])
    finally:
        root.close()
    assert outcome.value == "path_denied", outcome
    assert (workspace / "hello.txt").read_text() == "hello\nworld\n"
    assert [p.name for p in workspace.iterdir()] == ["hello.txt"]  # no temp file left
