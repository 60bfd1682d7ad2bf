"""Run `corral` with a pseudo-terminal on one side, as a person at a terminal does."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

CORRAL = [sys.executable, "-m", "corral"]
TIMEOUT = 60


def read_all(fd: int) -> bytes:
    """Everything the other end of a pty wrote; EIO once it has closed (Linux)."""
    chunks = []
    deadline = time.monotonic() + TIMEOUT
    while True:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError("the command still holds the terminal open")
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def on_terminal_stdout(*argv: str, command: list[str] = CORRAL) -> tuple[int, str, str]:
    """Run with stdout on a pty (a person's terminal), stdin and stderr not."""
    master, slave = os.openpty()
    with subprocess.Popen(
        [*command, *argv], stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE
    ) as proc:
        os.close(slave)
        out = read_all(master)
        err = proc.stderr.read()  # type: ignore[union-attr]
        code = proc.wait(TIMEOUT)
    os.close(master)
    return code, out.decode().replace("\r\n", "\n"), err.decode()


def on_terminal_stdin(
    *argv: str, typed: bytes, command: list[str] = CORRAL
) -> tuple[int, str, str]:
    """Run with stdin on a pty where a person types `typed`; stdout, stderr piped."""
    master, slave = os.openpty()
    with subprocess.Popen(
        [*command, *argv], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        os.close(slave)
        os.write(master, typed)
        out, err = proc.communicate(timeout=TIMEOUT)
    os.close(master)
    return proc.returncode, out.decode(), err.decode()
