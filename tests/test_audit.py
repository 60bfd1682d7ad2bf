"""The audit log on the real file system: one JSON line per record, only named
metadata, append-only, thread-safe, and failures reported, never dropped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

from corral.audit import FIELDS, Audit, AuditError


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_line_per_record_with_every_field_in_order(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    with Audit(log) as audit:
        audit.record(tool="read_file", ok=True, path="a.txt", resolved="a.txt", root="/w",
                     decision="allow", bytes=12, duration_ms=0.5)
        audit.record(tool="write_file", ok=False, error="path_denied", path="notes.txt",
                     resolved=".env", root="/w", decision="deny", rule="block-dotenv")
    first, second = lines(log)
    assert list(first) == ["time", *FIELDS[:-1], "prev"]
    assert first["bytes"] == 12 and first["ok"] is True and first["error"] is None
    assert second["resolved"] == ".env" and second["rule"] == "block-dotenv"
    assert datetime.fromisoformat(first["time"]).utcoffset().total_seconds() == 0


def test_touched_fills_the_path_fields_and_lists_several(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    touched = [
        {"path": "a", "root": "/w", "resolved": "a", "decision": "allow", "rule": None,
         "content": "never logged"},
        {"path": "/d/b", "root": "/d", "resolved": "b", "decision": "allow", "rule": None},
    ]
    with Audit(log) as audit:
        audit.record(tool="copy_file", ok=True, touched=touched, bytes=3)
        audit.record(tool="read_file", ok=True, touched=touched[:1])
    many, one = lines(log)
    assert (many["path"], many["root"], many["resolved"]) == ("a", "/w", "a")
    assert [t["path"] for t in many["touched"]] == ["a", "/d/b"]
    assert "content" not in json.dumps(many["touched"])
    assert "touched" not in one and one["path"] == "a"


@pytest.mark.parametrize(
    "fields",
    [
        {"tool": "read_file", "ok": True, "content": "secret"},
        {"tool": "read_file"},
        {"ok": True},
        {"tool": "read_file", "ok": True, "path": ["a", "b"]},
        {"tool": "read_file", "ok": True, "touched": [{"path": b"bytes"}]},
    ],
)
def test_anything_but_named_scalar_fields_is_refused(tmp_path: Path, fields: dict) -> None:
    log = tmp_path / "audit.jsonl"
    with Audit(log) as audit, pytest.raises(TypeError):
        audit.record(**fields)
    assert log.read_text() == ""


def test_appends_to_an_existing_log(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_text('{"earlier": 1}\n')
    with Audit(log) as audit:
        audit.record(tool="stat_file", ok=True)
    assert [next(iter(r)) for r in lines(log)] == ["earlier", "time"]


def test_new_log_is_private(tmp_path: Path) -> None:
    with Audit(tmp_path / "audit.jsonl"):
        pass
    assert (tmp_path / "audit.jsonl").stat().st_mode & 0o077 == 0


def test_concurrent_records_never_interleave(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    per_thread, threads = 200, 8
    with Audit(log) as audit:
        def work(n: int) -> None:
            for i in range(per_thread):
                audit.record(tool="grep", ok=True, path=f"t{n}/{i}/" + "x" * 500)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    records = lines(log)
    assert len(records) == per_thread * threads
    assert len({r["path"] for r in records}) == per_thread * threads


def test_writes_follow_the_opened_file_not_the_path(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    with Audit(log) as audit:
        audit.record(tool="read_file", ok=True)
        os.rename(log, tmp_path / "moved.jsonl")
        log.write_text("")  # an agent replacing the path cannot redirect the host
        audit.record(tool="read_file", ok=True)
    assert log.read_text() == ""
    assert len(lines(tmp_path / "moved.jsonl")) == 2


def test_symlink_at_the_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_text("original\n")
    (tmp_path / "audit.jsonl").symlink_to(target)
    with pytest.raises(AuditError, match=r"cannot open audit log .*audit\.jsonl"):
        Audit(tmp_path / "audit.jsonl")
    assert target.read_text() == "original\n"


def test_fifo_at_the_path_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "audit.jsonl")
    with pytest.raises(AuditError, match=r"cannot open audit log"):
        Audit(tmp_path / "audit.jsonl")
    reader = os.open(tmp_path / "audit.jsonl", os.O_RDONLY | os.O_NONBLOCK)
    try:  # with a reader the open succeeds: the type check refuses it
        with pytest.raises(AuditError, match=r"not a regular file"):
            Audit(tmp_path / "audit.jsonl")
    finally:
        os.close(reader)


@pytest.mark.parametrize("name", ["missing-dir/audit.jsonl", "."])
def test_unopenable_path_fails_at_once(tmp_path: Path, name: str) -> None:
    with pytest.raises(AuditError, match="cannot open audit log"):
        Audit(tmp_path / name)


def test_closed_log_reports_instead_of_dropping(tmp_path: Path) -> None:
    audit = Audit(tmp_path / "audit.jsonl")
    audit.close()
    audit.close()  # idempotent
    with pytest.raises(AuditError, match="closed"):
        audit.record(tool="read_file", ok=True)


FULL_DISK = """
import resource, signal, sys
from corral.audit import Audit, AuditError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
audit = Audit(sys.argv[1])
audit.record(tool="read_file", ok=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
try:
    audit.record(tool="read_file", ok=True)
except AuditError as exc:
    print(exc)
"""


def test_a_write_the_kernel_refuses_raises_audit_error(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(log)], capture_output=True,
                          text=True, check=True, timeout=60)
    assert done.stdout.startswith(f"cannot write audit log {log}: File too large"), done
    assert len(lines(log)) == 1


def test_hostile_paths_stay_on_one_line(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    hostile = 'a\n{"tool":"forged"}\r\udcff\u2028b'
    with Audit(log) as audit:
        audit.record(tool="read_file", ok=False, path=hostile, error="not_found")
    raw = log.read_bytes()
    assert raw.count(b"\n") == 1 and b"\r" not in raw
    (record,) = lines(log)
    assert record["path"] == hostile and record["tool"] == "read_file"


def test_the_audit_records_the_fields_a_tool_reports_of_each_path() -> None:
    """One list: what a worker reports of a touched path is what the log records."""
    from corral.audit import TOUCHED_FIELDS
    from corral.calls.messages import Touched

    assert Touched.__struct_fields__ == TOUCHED_FIELDS
