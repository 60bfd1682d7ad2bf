"""`corral audit verify [PATH]`: `ok N records` and the head (exit 0), the first
broken line (exit 1), misuse (exit 2); the config's [audit] keys end to end."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from corral.audit import Audit
from corral.faces.cli import main

KEY = b"s" * 32


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_log(path: Path, count: int, **options: object) -> None:
    with Audit(path, **options) as audit:  # type: ignore[arg-type]
        for n in range(count):
            audit.record(tool="stat_file", ok=True, path=f"f{n}")


def test_ok_prints_the_count_and_the_head(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 5)
    code, out, err = run(capsys, "audit", "verify", str(log))
    lines = out.splitlines()
    assert code == 0 and lines[0] == "ok 5 records" and err == ""
    assert lines[1].startswith("head sha256:") and len(lines) == 2
    head = lines[1].split()[1]
    write_log(log, 1)
    assert run(capsys, "audit", "verify", str(log), "--head", head)[0] == 0
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:3]))
    code, out, _ = run(capsys, "audit", "verify", str(log), "--head", head)
    assert code == 1 and out.startswith(f"broken: {log}: no record has the head {head}")


def test_broken_names_the_first_broken_line(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 5)
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([*lines[:2], *lines[3:]]))
    code, out, _ = run(capsys, "audit", "verify", str(log))
    assert code == 1
    assert out.startswith(f"broken: {log}:3: prev does not match the line before ({log}:2)")


def test_a_rotated_set_and_one_rotated_file(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 20, max_bytes=1000)
    assert run(capsys, "audit", "verify", str(log))[1].startswith("ok 20 records")
    code, out, _ = run(capsys, "audit", "verify", f"{log}.2")
    assert code == 1 and "not the start of a chain" in out  # it continues .1
    code, out, _ = run(capsys, "audit", "verify", f"{log}.2", "--continues")
    assert code == 0 and out.startswith("ok ")


def test_a_torn_tail_is_a_note_on_stderr(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 2)
    with log.open("ab") as file:
        file.write(b'{"time":')
    code, out, err = run(capsys, "audit", "verify", str(log))
    assert code == 0 and out.startswith("ok 2 records")
    assert err == f"corral: {log}:3: a half-written last line (8 bytes, a crash mid-write?) " \
        "is not a record; not checked\n"


@pytest.mark.parametrize("problem", ["missing log", "open key", "no path"])
def test_misuse_is_one_error_line_and_exit_2(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             problem: str) -> None:
    log, key = tmp_path / "log.jsonl", tmp_path / "audit.key"
    write_log(log, 1)
    key.write_bytes(KEY)
    key.chmod(0o644)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.chdir(tmp_path)
    argv = {"missing log": [str(tmp_path / "nope.jsonl")], "open key": [str(log), "--key",
            str(key)], "no path": []}[problem]
    code, out, err = run(capsys, "audit", "verify", *argv)
    assert code == 2 and out == "" and err.startswith("corral: error: ") and err.count("\n") == 1
    assert {"missing log": "no such audit log", "open key": "readable by group or others",
            "no path": "no audit log"}[problem] in err


def test_the_config_keys_end_to_end(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    workspace: Path) -> None:
    """[audit] path, key_file and max_bytes: calls made under the config are chained
    under the key and rotated; verify finds the log and key in the same config."""
    key = tmp_path / "audit.key"
    key.write_bytes(KEY)
    key.chmod(0o600)
    config = tmp_path / "corral.toml"
    config.write_text(f'[workspace]\nroot = "{workspace}"\n[audit]\npath = "logs/audit.jsonl"\n'
                      f'key_file = "{key}"\nmax_bytes = 1000\n')
    (tmp_path / "logs").mkdir()
    for n in range(4):
        assert run(capsys, "call", "--config", str(config), "--json", "write_file",
                   f'{{"path": "f{n}.txt", "content": "x"}}')[0] == 0
    assert (tmp_path / "logs" / "audit.jsonl.1").exists()
    code, out, _ = run(capsys, "audit", "verify", "--config", str(config))
    assert code == 0 and out.startswith("ok 4 records\nhead hmac-sha256:")
    code, out, _ = run(capsys, "audit", "verify", str(tmp_path / "logs" / "audit.jsonl"))
    assert code == 1 and "pass the key file" in out  # a PATH given: no key from the config


def test_the_command_line_entry_point(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 3)
    done = subprocess.run([sys.executable, "-m", "corral", "audit", "verify", str(log)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("ok 3 records\n")
    log.write_bytes(log.read_bytes().replace(b'"path":"f1"', b'"path":"f9"'))
    done = subprocess.run([sys.executable, "-m", "corral", "audit", "verify", str(log)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout.startswith(f"broken: {log}:3: ")


@pytest.mark.parametrize(("audit", "key", "message"), [
    ('key_file = "{key}"', "[audit] key_file", "set without [audit] path"),
    ("max_bytes = 1000", "[audit] max_bytes", "set without [audit] path"),
    ('path = "log.jsonl"\nkey_file = "{inside}"', "[audit] key_file", "lies inside the root"),
])
def test_a_config_whose_audit_keys_cannot_work_is_refused(
    tmp_path: Path, workspace: Path, audit: str, key: str, message: str,
) -> None:
    from corral.config import ConfigError, load_config

    config = tmp_path / "corral.toml"
    text = audit.format(key=tmp_path / "audit.key", inside=workspace / "audit.key")
    config.write_text(f'[workspace]\nroot = "{workspace}"\n[audit]\n{text}\n')
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert caught.value.key == key and message in str(caught.value)


def test_a_live_log_verifies_while_writers_append_and_rotate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """verify lists PATH.1 ... PATH.N and PATH: a rotation between the listing and
    the live file once made it call an intact log broken (a file missing). The set
    is listed under the writers' lock. (scripts/race_audit.py --verify runs this
    longer, against writer processes.)"""
    log = tmp_path / "log.jsonl"
    write_log(log, 1)
    stop = threading.Event()

    def write() -> None:
        with Audit(log, max_bytes=4096) as audit:
            n = 0
            while not stop.is_set():
                audit.record(tool="stat_file", ok=True, path=f"{threading.get_ident()}/{n}")
                n += 1

    writers = [threading.Thread(target=write) for _ in range(4)]
    for writer in writers:
        writer.start()
    answers = []
    deadline = time.monotonic() + 120  # a safety net: a loaded machine rotates slower
    try:
        # 25 verifies at least, and on until the writers rotated 25 times meanwhile
        while len(answers) < 25 or (len(list(tmp_path.glob("log.jsonl.*"))) <= 25
                                    and time.monotonic() < deadline):
            code, out, err = run(capsys, "audit", "verify", str(log))
            answers.append((code, out.splitlines()[0], err))
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    assert len(list(tmp_path.glob("log.jsonl.*"))) > 25  # it rotated throughout
    broken = [answer for answer in answers if answer[0] != 0]
    assert not broken, f"{len(broken)} of {len(answers)}: {broken[0]}"
    assert all(err == "" for _, _, err in answers)  # nor a half line seen mid-write


def test_a_lock_held_too_long_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hung writer holds the lock: verify gives up after the wait (exit 2), as the
    writers do, instead of hanging a cron job."""
    import fcntl

    from corral import audit_verify

    monkeypatch.setattr(audit_verify, "LOCK_WAIT_S", 0.2)
    log = tmp_path / "log.jsonl"
    write_log(log, 2)
    with log.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, out, err = run(capsys, "audit", "verify", str(log))
    assert code == 2 and out == "" and "held the log's lock" in err
    assert run(capsys, "audit", "verify", str(log))[0] == 0
