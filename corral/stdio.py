"""Newline-delimited JSON over stdin/stdout, shared by the MCP and JSON-lines servers.

`protocol_streams` takes fd 1 for the protocol and points fd 1 at stderr, so a
stray print (ours, a library's, or a child process that inherited fd 1) lands
on stderr instead of corrupting the stream the client parses.

`LineServer` runs the read loop and the concurrent calls (leader/follower).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from queue import SimpleQueue
from typing import Any, BinaryIO

# Largest message read: a 1 MiB write as JSON-escaped base64 fits many times over,
# while a client that never sends a newline cannot grow the host without bound.
MAX_LINE_BYTES = 16 * 1024 * 1024


def protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """The protocol's input and output; fd 1 now writes to stderr."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return sys.stdin.buffer, out


def read_lines(stream: BinaryIO) -> Iterator[bytes | None]:
    """Each non-blank line without its newline; None for a line over MAX_LINE_BYTES
    (its bytes are skipped up to the next newline)."""
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield None
            continue
        line = line.strip()
        if line:
            yield line


class LineWriter:
    """Writes one JSON value per line; safe to call from many threads."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, message: Any) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            try:
                self._stream.write(data)
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                pass  # the client is gone (or the stream closed): nobody left to tell


def parse_line(line: bytes) -> Any:
    """The JSON value on a line; ValueError for anything that is not JSON (bad
    UTF-8, nesting deep enough to exhaust the parser's recursion)."""
    try:
        return json.loads(line)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def guarded_call(
    call: Callable[[str, dict[str, Any]], dict[str, Any]], tool: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """`Sandbox.call`, with a host-side bug reported to the client (and stderr)
    as an `io_error` result instead of a request that never gets an answer."""
    try:
        return call(tool, arguments)
    except Exception as exc:
        traceback.print_exc()
        message = f"internal error in the corral host: {type(exc).__name__}: {exc}"
        return {"ok": False, "tool": tool, "error": {"code": "io_error", "message": message}}


Job = Callable[[], None]


class LineServer:
    """Reads lines on one thread at a time and runs up to `max_jobs` jobs at once.

    `handle(line)` answers a quick message itself and returns None, or returns a
    job (a call to run). Leader/follower: the thread that read the line hands
    reading to another thread and runs the job itself, so the call never waits
    for a thread to wake up (that happens while it runs). With `max_jobs` jobs
    running, further jobs queue and run as jobs finish, while reading goes on:
    replies and cancellations still arrive. Threads are daemons and reused, so
    an interrupted server does not wait for a reader blocked on its input.
    """

    def __init__(
        self,
        lines: Iterator[bytes | None],
        handle: Callable[[bytes | None], Job | None],
        max_jobs: int,
    ) -> None:
        self._lines = lines
        self._handle = handle
        self._max_jobs = max_jobs
        self._state = threading.Condition()
        self._running = 0
        self._backlog: deque[Job] = deque()
        self._idle: list[SimpleQueue[Job]] = []
        self._ended = threading.Event()
        self._stopped = False
        self._at_end: Callable[[], None] = lambda: None

    def run(self, at_end: Callable[[], None] = lambda: None) -> None:
        """Serve until the input ends or `stop()`; then call `at_end` and wait for
        every job to finish."""
        self._at_end = at_end
        self._lead()
        self._ended.wait()
        with self._state:
            self._state.wait_for(lambda: self._running == 0)

    def stop(self) -> None:
        """Read no further (called from `handle`, on the reading thread)."""
        self._stopped = True

    def _lead(self) -> None:
        try:
            for line in self._lines:
                job = _guarded(self._handle, line)
                if self._stopped:
                    break
                if job is not None and self._hand_off(job):
                    return
        except OSError:
            traceback.print_exc()  # unreadable input (EIO, ...) ends the session like EOF
        self._at_end()
        self._ended.set()

    def _hand_off(self, job: Job) -> bool:
        """Run `job` on this thread after starting the next reader (True), or queue it
        when every job slot is taken (False: this thread keeps reading)."""
        with self._state:
            if self._running >= self._max_jobs:
                self._backlog.append(job)
                return False
            self._running += 1
        self._spawn(self._lead)
        self._work(job)
        return True

    def _work(self, job: Job | None) -> None:
        while job is not None:
            _guarded(job)
            with self._state:
                job = self._backlog.popleft() if self._backlog else None
                if job is None:
                    self._running -= 1
                    self._state.notify_all()

    def _spawn(self, task: Job) -> None:
        with self._state:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = SimpleQueue()
            threading.Thread(target=self._thread, args=(inbox,), daemon=True).start()
        inbox.put(task)

    def _thread(self, inbox: SimpleQueue[Job]) -> None:
        while True:
            inbox.get()()
            with self._state:
                self._idle.append(inbox)


def _guarded(function: Callable[..., Any], *args: Any) -> Any:
    """A host-side bug in one message or job is reported on stderr; it must not take
    down the thread that serves the rest (the server would hang, not fail)."""
    try:
        return function(*args)
    except Exception:
        traceback.print_exc()
        return None
