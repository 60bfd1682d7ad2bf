"""The audit chain against a compromised worker, run in a really confined child
(tests/helpers/confined.py): the key outside every root is out of its reach; a log the
operator left inside a root (the policy keeps tools off it, a compromised worker
is not bound by the policy) can be changed, and the chain tells; an flock it
holds forever makes the host report the log unusable instead of hanging."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

import pytest

import corral.audit
from corral.audit import Audit, AuditError
from corral.audit_verify import log_set, verify
from tests.helpers.confined import ConfinedChild, run_confined

KEY = b"k" * 32


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _rewrite_record(path: str) -> int:
    """Edit the second record in place (what a worker that can write the log does)."""
    with open(path, "rb") as file:
        lines = file.read().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"ok":true', b'"ok":false')
    with open(path, "wb") as file:
        file.write(b"".join(lines))
    return len(lines)


def _append(path: str, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


def _hold_lock(path: str, seconds: float) -> None:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    time.sleep(seconds)


@pytest.fixture
def keyed(tmp_path: Path, workspace: Path) -> tuple[Path, Path]:
    """(a log inside the workspace, a key outside it)."""
    key = tmp_path / "audit.key"
    key.write_bytes(KEY)
    key.chmod(0o600)
    return workspace / "audit.jsonl", key


def records(log: Path, key: Path, count: int) -> None:
    with Audit(log, key_file=key) as audit:
        for n in range(count):
            audit.record(tool="read_file", ok=True, path=f"f{n}")


def test_a_worker_cannot_read_the_key(keyed: tuple[Path, Path], workspace: Path) -> None:
    _, key = keyed
    outcome = run_confined(_read, str(key), roots=[(str(workspace), "rw")])
    # not there at all in its mount namespace, or refused by Landlock without one
    assert not outcome.ok and outcome.errno in (errno.ENOENT, errno.EACCES), outcome


def test_a_record_a_worker_rewrites_is_named(keyed: tuple[Path, Path], workspace: Path) -> None:
    log, key = keyed
    records(log, key, 4)
    outcome = run_confined(_rewrite_record, str(log), roots=[(str(workspace), "rw")])
    assert outcome.ok and outcome.value == 4, outcome
    verdict = verify(log_set(str(log)), KEY)
    assert verdict.broken is not None and verdict.broken.startswith(f"{log}:3: ")
    records(log, key, 1)  # the host goes on; the break stays visible
    assert verify(log_set(str(log)), KEY).broken == verdict.broken


def test_a_forged_line_a_worker_appends_is_not_a_record(
    keyed: tuple[Path, Path], workspace: Path,
) -> None:
    log, key = keyed
    records(log, key, 2)
    # a record-shaped line with a prev the worker cannot compute without the key
    forged = b'{"tool":"write_file","ok":true,"prev":"hmac-sha256:' + b"0" * 64 + b'"}\n'
    outcome = run_confined(_append, str(log), forged, roots=[(str(workspace), "rw")])
    assert outcome.ok, outcome
    records(log, key, 1)
    verdict = verify(log_set(str(log)), KEY)
    assert verdict.broken is not None and verdict.broken.startswith(f"{log}:3: ")
    # a half line is closed by the host and named by its next record, never counted
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:2]))
    outcome = run_confined(_append, str(log), b'{"tool":"forged"', roots=[(str(workspace), "rw")])
    records(log, key, 1)
    verdict = verify(log_set(str(log)), KEY)
    assert verdict.ok and verdict.records == 3 and "half-written" in verdict.notes[0]


def test_a_lock_a_worker_holds_fails_the_record_instead_of_hanging(
    keyed: tuple[Path, Path], workspace: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log, key = keyed
    records(log, key, 1)
    monkeypatch.setattr(corral.audit, "LOCK_WAIT_S", 0.3)
    child = ConfinedChild(_hold_lock, str(log), 5.0, roots=[(str(workspace), "rw")])
    child.ready()
    with Audit(log, key_file=key) as audit:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until the child has taken the lock
            probe = os.open(log, os.O_RDONLY)
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(probe, fcntl.LOCK_UN)
            except BlockingIOError:
                break
            finally:
                os.close(probe)
            time.sleep(0.01)
        with pytest.raises(AuditError, match="has held its lock"):
            audit.record(tool="read_file", ok=True)
    os.kill(child.pid, 9)
    with pytest.raises(ChildProcessError, match="signal 9"):
        child.outcome()  # reaped
    assert verify(log_set(str(log)), KEY).records == 1
