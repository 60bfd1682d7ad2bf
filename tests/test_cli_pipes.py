"""What a person meets at the shell: a command piped into `head`, an empty history,
and where the workspace comes from with --config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli_helpers import run

REPO = Path(__file__).resolve().parent.parent


def test_a_reader_that_stops_early_is_no_error(ws: Path) -> None:
    """`corral tools ... | head`: the pipe closes before the specs are written, and
    the command exits 0 without a 'Broken pipe' line."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    done = subprocess.run(
        [sys.executable, "-m", "corral", "tools", "--format", "openai", "--strict",
         "--workspace", str(ws)],
        stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    os.close(write_end)
    assert done.returncode == 0, done.stderr
    assert "Broken pipe" not in done.stderr


def test_an_empty_history_says_so(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "history", "--workspace", str(ws))
    assert (code, out) == (0, "No recorded changes.\n")
    code, out, _ = run(capsys, "history", "a\x1b[2Jb.txt", "--workspace", str(ws))
    assert code == 0 and out.startswith("No recorded changes of a") and "\x1b" not in out


def test_the_workspace_default_names_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(capsys, "call", "--help")
    help_text = " ".join(capsys.readouterr().out.split())
    assert "or with --config that config's [workspace] root" in help_text


def closed(
    stream: str, ws: Path, *words: str, given: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`corral WORDS` run with `stream` closed, as `<&-`, `>&-` or `2>&-`."""
    fd = {"stdin": 0, "stdout": 1, "stderr": 2}[stream]
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {fd}>&-', "sh", sys.executable, "-m", "corral", *words,
         "--workspace", str(ws)],
        input=given, capture_output=True, text=True,
        timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.parametrize("words", [
    ("call", "read_file", '{"path": "hello.txt"}'), ("tools",), ("serve",), ("serve", "--jsonl"),
])
def test_a_closed_stdout_is_one_line_and_exit_2(ws: Path, words: tuple[str, ...]) -> None:
    done = closed("stdout", ws, *words)
    assert done.returncode == 2
    assert done.stderr == ("corral: error: standard output is closed: there is nowhere to "
                           "write the result\n")


@pytest.mark.parametrize("words", [("call", "read_file", "-"), ("serve",), ("serve", "--jsonl")])
def test_a_closed_stdin_is_one_line_and_exit_2_for_what_reads_it(
    ws: Path, words: tuple[str, ...],
) -> None:
    done = closed("stdin", ws, *words)
    assert done.returncode == 2
    assert done.stderr == "corral: error: standard input is closed: there is nothing to read\n"


def test_a_call_that_reads_no_stdin_runs_with_it_closed(ws: Path) -> None:
    (ws / "hello.txt").write_text("hi\n")
    done = closed("stdin", ws, "call", "read_file", '{"path": "hello.txt"}')
    assert done.returncode == 0, done.stderr
    assert '"ok": true' in done.stdout


def test_a_server_without_stderr_keeps_its_fds_to_itself(ws: Path) -> None:
    """fd 2 closed: the program puts /dev/null there first. Else the first fd it
    opens, the zygote template's channel, lands on 2, and a stdio server, which
    points fd 1 at fd 2 (its protocol has a copy of stdout), hands every stray
    write to the template."""
    process = subprocess.Popen(
        ["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-m", "corral", "serve",
         "--jsonl", "--workspace", str(ws)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write('{"id": 1, "tool": "list_allowed_directories"}\n')
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["ok"]
        fds = [os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in (1, 2)]
    finally:
        process.communicate(timeout=60)
    assert fds == [os.devnull, os.devnull]
    assert process.returncode == 0


def test_an_http_server_needs_no_stdout(ws: Path, tmp_path: Path) -> None:
    """It writes nothing there: a closed stdout is no reason to refuse it (it fails
    later, here on the tenants file it is not given)."""
    done = closed("stdout", ws, "serve", "--http", "127.0.0.1:0")
    assert "standard output is closed" not in done.stderr
