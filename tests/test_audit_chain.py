"""The audit chain on the real file system: every record's `prev` vouches for the
line before it, so `corral audit verify` names the first line an edit, deletion,
reordering, insertion, truncation or lost rotated file broke; one chain under
many writers (threads, processes, rotation); a crash mid-line is recovered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.audit import Audit, AuditError, Chain, read_key
from corral.audit_verify import Verdict, log_set, verify
from tests.helpers.audit_writers import write_in_threads

KEY = b"k" * 32


def write_log(path: Path, count: int, **options: object) -> None:
    with Audit(path, **options) as audit:  # type: ignore[arg-type]
        for n in range(count):
            audit.record(tool="read_file", ok=True, path=f"file{n}.txt", bytes=n)


def check(path: Path, key: bytes | None = None, **options: object) -> Verdict:
    return verify(log_set(str(path)), key, **options)  # type: ignore[arg-type]


def broken_line(verdict: Verdict) -> str:
    """FILE:LINE of the first broken line, FILE by name."""
    assert verdict.broken is not None, verdict
    where = verdict.broken.split(": ", 1)[0]
    return f"{os.path.basename(where.rsplit(':', 1)[0])}:{where.rsplit(':', 1)[1]}"


def key_file(tmp_path: Path, key: bytes = KEY, name: str = "audit.key") -> Path:
    path = tmp_path / name
    path.write_bytes(key)
    path.chmod(0o600)
    return path


def test_each_record_chains_the_line_before_it(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 3)
    lines = log.read_bytes().splitlines()
    chain = Chain()
    prevs = [json.loads(line)["prev"] for line in lines]
    assert prevs == [chain.genesis, chain.digest(lines[0]), chain.digest(lines[1])]
    verdict = check(log)
    assert verdict.ok and verdict.records == 3 and verdict.head == chain.digest(lines[2])


def edit(lines: list[bytes]) -> list[bytes]:
    lines[3] = lines[3].replace(b'"ok":true', b'"ok":false')
    return lines


def delete(lines: list[bytes]) -> list[bytes]:
    return lines[:3] + lines[4:]


def reorder(lines: list[bytes]) -> list[bytes]:
    return [*lines[:3], lines[4], lines[3], *lines[5:]]


def insert(lines: list[bytes]) -> list[bytes]:
    return [*lines[:3], lines[1], *lines[3:]]  # a copy of an earlier record


def insert_chained(lines: list[bytes]) -> list[bytes]:
    # a forged record that chains from line 3 correctly: the old line 4 no longer does
    forged = lines[1].replace(b"file1", b"forged").replace(
        json.loads(lines[1])["prev"].encode(), Chain().digest(lines[2]).encode())
    return [*lines[:3], forged, *lines[3:]]


def delete_first(lines: list[bytes]) -> list[bytes]:
    return lines[1:]


@pytest.mark.parametrize(("tamper", "line"), [
    (edit, 5),          # line 4 edited: line 5 no longer vouches for it
    (delete, 4),        # line 4 gone: the old line 5, now line 4, does not match line 3
    (reorder, 4),
    (insert, 4),
    (insert_chained, 5),  # the inserted line 4 chains from 3; the old line 4 does not
    (delete_first, 1),  # the first record is not the start of a chain
])
def test_tampering_breaks_the_chain_at_the_right_line(tmp_path: Path, tamper, line) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 8)
    assert check(log).ok
    log.write_bytes(b"\n".join(tamper(log.read_bytes().splitlines())) + b"\n")
    verdict = check(log)
    assert not verdict.ok and broken_line(verdict) == f"log.jsonl:{line}", verdict.broken


def test_truncation_at_the_end_is_found_against_a_head_kept_elsewhere(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 6)
    head = check(log).head
    write_log(log, 2)  # the log grows: an older head is still in the chain
    assert check(log, head=head).ok
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:4]))  # the last four records removed
    assert check(log).ok  # the file alone cannot tell
    verdict = check(log, head=head)
    assert not verdict.ok and "no record has the head" in (verdict.broken or "")


def test_rotation_carries_the_chain_across_files(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 30, max_bytes=1200)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) > 3 and names[0] == "log.jsonl"
    assert all(p.stat().st_size <= 1200 for p in tmp_path.iterdir())
    assert all(p.stat().st_size > 1200 - 300 for p in tmp_path.iterdir() if p != log)
    verdict = check(log)
    assert verdict.ok and verdict.records == 30
    # the newest rotated file's last line is what the live file's first record chains
    newest = log_set(str(log))[-2]
    last = Path(newest).read_bytes().splitlines()[-1]
    assert json.loads(log.read_bytes().splitlines()[0])["prev"] == Chain().digest(last)
    # a rotated file alone verifies from its own first record
    assert verify([newest], continues=True).ok


def test_a_missing_or_swapped_rotated_file_breaks_the_set(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 40, max_bytes=1200)
    files = [Path(name) for name in log_set(str(log))]
    assert len(files) >= 5  # .1 .2 .3 .4 ... and the live file
    one, two, three = files[:3]

    def swap(a: Path, b: Path) -> None:
        os.rename(a, tmp_path / "aside")
        os.rename(b, a)
        os.rename(tmp_path / "aside", b)

    swap(two, three)
    assert broken_line(check(log)) == "log.jsonl.2:1"
    swap(two, three)
    assert check(log).ok
    os.rename(three, tmp_path / "gone")  # a middle file lost
    assert broken_line(check(log)) == "log.jsonl.4:1"
    os.rename(tmp_path / "gone", three)
    one.unlink()  # the oldest file gone (deleted after it was shipped, say)
    assert broken_line(check(log)) == "log.jsonl.2:1"
    assert "not the start of a chain" in (check(log).broken or "")
    assert check(log, continues=True).ok


def test_a_crash_mid_line_verifies_up_to_the_last_record_and_the_chain_goes_on(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 3)
    whole = log.read_bytes()
    with log.open("ab") as file:  # what a host killed inside write() leaves
        file.write(b'{"time":"2026-11-25T00:00:00.000+00:00","tool":"wri')
    verdict = check(log)
    assert verdict.ok and verdict.records == 3 and "half-written" in verdict.notes[0]
    write_log(log, 2)  # the host restarts: the next writer finds the torn tail
    data = log.read_bytes()
    assert data.startswith(whole)
    lines = data.splitlines()
    assert lines[3].startswith(b'{"time":"2026-11-25T00:00:00.000+00:00","tool":"wri')
    after = json.loads(lines[4])
    assert after["torn"]["bytes"] == len(lines[3])
    assert after["prev"] == Chain().digest(lines[2])  # chained from the last whole line
    verdict = check(log)
    assert verdict.ok and verdict.records == 5, verdict
    # the torn line is vouched for: changing it breaks the chain
    log.write_bytes(data.replace(b'"tool":"wri\n', b'"tool":"wro\n'))
    assert broken_line(check(log)) == "log.jsonl:4"


def test_a_torn_first_line_continues_the_rotated_file(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 10, max_bytes=1200)
    before = len(log_set(str(log)))
    log.write_bytes(b'{"ti')  # the live file holds only a torn line
    write_log(log, 1, max_bytes=1200)
    assert len(log_set(str(log))) == before  # a torn file is closed before it rotates
    assert check(log).ok


def test_hmac_chain(tmp_path: Path) -> None:
    keyed, plain = tmp_path / "keyed.jsonl", tmp_path / "plain.jsonl"
    write_log(keyed, 4, key_file=key_file(tmp_path))
    write_log(plain, 4)
    assert json.loads(keyed.read_text().splitlines()[0])["prev"].startswith("hmac-sha256:")
    assert check(keyed, KEY).ok
    assert broken_line(check(keyed, b"x" * 32)) == "keyed.jsonl:1"  # a wrong key
    assert "pass the key" in (check(keyed).broken or "")  # no key
    # a chain made without the key (anyone can compute SHA-256) fails under the key
    assert "not made with this key" in (check(plain, KEY).broken or "")
    lines = keyed.read_bytes().splitlines()
    lines[2] = lines[2].replace(b"file2", b"forged")
    keyed.write_bytes(b"\n".join(lines) + b"\n")
    assert broken_line(check(keyed, KEY)) == "keyed.jsonl:4"


@pytest.mark.parametrize("problem", ["group", "symlink", "short", "missing"])
def test_a_key_file_others_could_read_or_swap_is_refused(tmp_path: Path, problem: str) -> None:
    path = key_file(tmp_path, name="real.key")
    if problem == "group":
        path.chmod(0o640)
    elif problem == "symlink":
        (tmp_path / "link.key").symlink_to(path)
        path = tmp_path / "link.key"
    elif problem == "short":
        path.write_bytes(b"short")
    else:
        path = tmp_path / "missing.key"
    with pytest.raises(AuditError, match="key file"):
        Audit(tmp_path / "log.jsonl", key_file=path)
    with pytest.raises(AuditError):
        read_key(path)


def test_a_key_file_inside_a_root_is_refused(tmp_path: Path, workspace: Path) -> None:
    from corral import Sandbox
    from corral.config import AuditOptions

    inside = key_file(workspace, name=".audit.key")
    options = AuditOptions(str(tmp_path / "log.jsonl"), key_file=str(inside))
    with pytest.raises(ValueError, match="lies inside the root"):
        Sandbox(workspace, audit=options)
    outside = key_file(tmp_path)
    with Sandbox(workspace, audit=AuditOptions(str(tmp_path / "log.jsonl"),
                                               key_file=str(outside))) as sandbox:
        sandbox.call("write_file", {"path": "a.txt", "content": "x"})
    verdict = check(tmp_path / "log.jsonl", KEY)
    assert verdict.ok and verdict.records == 1


WRITER = """
import os, sys, time
sys.path.insert(0, sys.argv[4])
from pathlib import Path
from tests.helpers.audit_writers import write_in_threads
log = Path(sys.argv[1])
(log.parent / f"ready{os.getpid()}").touch()
while not (log.parent / "go").exists():  # every writer starts at once
    time.sleep(0.001)
write_in_threads(log, int(sys.argv[2]), int(sys.argv[3]), 4000)
"""


def test_many_writers_in_threads_and_processes_keep_one_chain(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "log.jsonl"
    log.parent.mkdir()
    root = str(Path(__file__).resolve().parent.parent)
    processes = [subprocess.Popen([sys.executable, "-c", WRITER, str(log), "3", "100", root])
                 for _ in range(4)]
    while len(list(log.parent.glob("ready*"))) < len(processes):
        assert all(process.poll() is None for process in processes)
        time.sleep(0.01)
    (log.parent / "go").touch()
    write_in_threads(log, 6, 100, 4000)
    for process in processes:
        assert process.wait(timeout=120) == 0
    verdict = check(log)
    assert verdict.ok, verdict.broken
    assert verdict.records == 6 * 100 + 4 * 3 * 100
    paths = [json.loads(line)["path"] for name in log_set(str(log))
             for line in Path(name).read_bytes().splitlines()]
    assert len(set(paths)) == verdict.records
    assert len(log_set(str(log))) > 5  # rotated many times under contention


def test_a_last_line_no_record_could_be_is_refused_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import corral.audit

    monkeypatch.setattr(corral.audit, "MAX_LINE_BYTES", 100_000)
    log = tmp_path / "log.jsonl"
    write_log(log, 1)
    with log.open("ab") as file:
        file.write(b"x" * 300_000)
    with Audit(log) as audit, pytest.raises(AuditError, match="last line is over"):
        audit.record(tool="read_file", ok=True)


FORGED = json.dumps({"time": "2026-11-25T00:00:00.000+00:00", "tool": "write_file",
                     "path": "forged", "ok": True}, separators=(",", ":")).encode()


@pytest.mark.parametrize("forged", [FORGED, b" " + FORGED, FORGED + b'{"ti', b"[1]"])
def test_a_whole_record_appended_without_prev_or_newline_is_not_vouched_for(
    tmp_path: Path, forged: bytes,
) -> None:
    """Someone who can append but has no key appends a record without prev and
    without a newline (padded, or with a half line after it): verify calls it
    what it is, and no writer names it as a crash's half line (which would vouch
    for it under the key). No part of a record short of its end holds JSON."""
    log, key = tmp_path / "log.jsonl", key_file(tmp_path)
    write_log(log, 3, key_file=key)
    with log.open("ab") as file:
        file.write(forged)
    data = log.read_bytes()
    verdict = check(log, KEY)
    assert broken_line(verdict) == "log.jsonl:4" and "appended by something other" in (
        verdict.broken or "")
    with pytest.raises(AuditError, match="JSON without a newline"):
        write_log(log, 1, key_file=key)
    assert log.read_bytes() == data  # nothing written after it, nothing lost before it
    # with a newline of its own it is a line without prev
    log.write_bytes(data + b"\n")
    assert broken_line(check(log, KEY)) == "log.jsonl:4"
    assert "not a record (no prev)" in (check(log, KEY).broken or "")


def test_a_log_where_a_writer_named_an_appended_record_as_torn_is_broken(
    tmp_path: Path,
) -> None:
    """What a writer before this check made of such a record: closed it and named
    it as torn under the key. The log is broken there, not ok."""
    log = tmp_path / "log.jsonl"
    write_log(log, 2, key_file=key_file(tmp_path))
    chain = Chain(KEY)
    forged = b'{"tool":"write_file","path":"forged","ok":true}'
    last = log.read_bytes().splitlines()[-1]
    closing = json.dumps({"time": "2026-11-25T00:00:01.000+00:00", "tool": "stat_file",
                          "ok": True, "torn": {"bytes": len(forged),
                                               "sha256": chain.sha256(forged)},
                          "prev": chain.digest(last)}, separators=(",", ":")).encode()
    log.write_bytes(log.read_bytes() + forged + b"\n" + closing + b"\n")
    assert broken_line(check(log, KEY)) == "log.jsonl:3"
    # a crash's real half line (no JSON) named so still verifies
    half = forged[:-7]
    closing = closing.replace(str(len(forged)).encode(), str(len(half)).encode(), 1).replace(
        chain.sha256(forged).encode(), chain.sha256(half).encode())
    lines = log.read_bytes().splitlines()
    log.write_bytes(b"\n".join([*lines[:2], half, closing]) + b"\n")
    assert check(log, KEY).ok


def test_a_line_nested_too_deep_to_read_is_not_a_record(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 1)
    with log.open("ab") as file:
        file.write(b"[" * 100_000 + b"\n")
    assert broken_line(check(log)) == "log.jsonl:2"
