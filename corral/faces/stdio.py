"""Newline-delimited JSON over stdin/stdout, shared by the MCP and JSON-lines servers.

`protocol_streams` takes fd 1 for the protocol and points fd 1 at stderr, so a
stray print (ours, a library's, or a child process that inherited fd 1) lands
on stderr instead of corrupting the stream the client parses.

`LineServer` runs the read loop and the concurrent calls.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from corral import jsonfast
from corral.calls.messages import host_bug_answer
from corral.calls.waiting import WaitPolicy

# The server's own lines (faces/logs.py formats them); named here, not imported from
# there, so that `corral call`, which imports this module, loads no more than logging.
log = logging.getLogger("corral.serve")

# Largest message read: a 1 MiB write as JSON-escaped base64 fits many times over,
# while a client that never sends a newline cannot grow the host without bound.
MAX_LINE_BYTES = 16 * 1024 * 1024
PIPE_BYTES = 1 << 20  # see widen_pipe
# Reading threads after hand-offs: one runs the inline job that handed off (only one
# runs at a time: a job runs inline only when no other is running), one reads on.
READER_THREADS = 2


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):  # 1e400: JSON text, but no double holds it (it would echo as Infinity)
        raise ValueError(f"the number {text[:40]} is too large")
    return number


# Python's json reads NaN, Infinity and -Infinity by default; JSON has no such numbers.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def _std_decode(line: bytes) -> Any:
    text = line.decode(json.detect_encoding(line), "surrogatepass")  # as json.loads does
    return _DECODER.decode(text)


def widen_pipe(fd: int) -> None:
    """A pipe holds 64 KiB by default: a 1 MiB read's answer (or write's request) then
    crosses it in ~35 turns, each one waiting for the other process to be scheduled.
    1 MiB (Linux's default pipe-max-size) needs 3. Not a pipe, or not allowed: as is."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """The protocol's input and output; fd 1 now writes to stderr."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    for stream in (sys.stdin, out):
        widen_pipe(stream.fileno())
    return sys.stdin.buffer, out


def read_lines(
    stream: BinaryIO, arrived: Callable[[], None] | None = None
) -> Iterator[bytes | None]:
    """Each non-blank line without its newline; None for a line over MAX_LINE_BYTES
    (its bytes are skipped up to the next newline). arrived: called as soon as a
    line's first bytes are in (a buffered stream's peek), before the rest is read
    and parsed: the server wakes the worker that will run it (Sandbox.wake)."""
    peek = getattr(stream, "peek", None) if arrived is not None else None
    while True:
        if arrived is not None:
            if peek is not None and not peek(1):
                return
            arrived()
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


LARGE_LINE_BYTES = 64 * 1024


class LineWriter:
    """Writes one JSON value per line; safe to call from many threads."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, message: Any) -> None:
        # ValueError for NaN and Infinity: not JSON, a strict client's parser would
        # fail on the whole line
        data = jsonfast.dumps(message, for_client=True)
        # a large line goes out as it is and its newline after it: joining them copies it
        parts = (data, b"\n") if len(data) > LARGE_LINE_BYTES else (data + b"\n",)
        with self._lock:
            try:
                for part in parts:
                    self._stream.write(part)
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                pass  # the client is gone (or the stream closed): nobody left to tell


def parse_line(line: bytes) -> Any:
    """The JSON value on a line; ValueError for anything that is not JSON (bad
    UTF-8, nesting deep enough to exhaust the parser's recursion)."""
    try:
        return jsonfast.loads(line, _std_decode)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def guarded_call(tool: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`call()` (a Sandbox call of `tool`), with a host-side bug reported to the
    client (and stderr) as an `io_error` result instead of a request that never
    gets an answer."""
    try:
        return call()
    except Exception as exc:
        log.exception("corral: internal error in a call of %s", tool)
        return host_bug_answer(tool, exc).public()


Job = Callable[[WaitPolicy], None]  # a call to run; the server says how it waits


class _InlineRun:
    """The on_slow of a job the reading thread runs itself: the first call hands
    reading to another thread (the job is about to wait on something slow)."""

    def __init__(self, read_on: Callable[[], object]) -> None:
        self._read_on = read_on
        self.handed_off = False

    def __call__(self) -> None:
        if not self.handed_off:
            self.handed_off = True
            self._read_on()


class LineServer:
    """Reads lines on the calling thread; runs jobs on up to `max_jobs` threads.

    `handle(line)` answers a quick message itself and returns None, or returns a
    job (a call to run). The inline policy, the same for every line face: a job
    that arrives while no other job runs is run by the reading thread itself,
    saving the hand-off to a pool thread (~50 us of a ~400 us call here); its
    WaitPolicy's `on_slow` hands reading to a pool thread, which the job calls
    before it waits on anything slow (a worker that does not answer within
    waiting.SLOW_CALL_S), so replies and cancellations are still read
    meanwhile. `spawn(job)` runs a job on a pool thread (a call an answer let
    go on). Any other job runs on a pool thread
    while reading goes on; beyond `max_jobs` running there (plus the inline
    one), jobs queue. (Handing
    reading to a pool thread for every call, leader/follower, measured no faster:
    the follower's wake-up competes with the call.)
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
        self._stopped = False
        self._at_end: Callable[[], None] = lambda: None
        self._done = threading.Event()  # the last reader met the end of the input
        self._pool: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._running = 0  # jobs running or queued
        self._count = threading.Lock()

    def run(self, at_end: Callable[[], None] = lambda: None) -> None:
        """Serve until the input ends or `stop()`; then call `at_end` and wait for
        every job to finish."""
        self._at_end = at_end
        pool = ThreadPoolExecutor(self._max_jobs, thread_name_prefix="corral-call")
        readers = ThreadPoolExecutor(READER_THREADS, thread_name_prefix="corral-read")
        self._pool, self._readers = pool, readers
        try:
            self._read()
            self._done.wait()
        except BaseException:
            # Interrupted (^C): leave now. A reader may be blocked on the input for good
            # and a job on a worker that does not answer: the caller closes the sandbox,
            # which ends the jobs' calls, and the program exits without joining threads.
            for executor in (pool, readers):
                executor.shutdown(wait=False, cancel_futures=True)
            raise
        for executor in (pool, readers):
            executor.shutdown()

    def _read(self) -> None:
        """Read and dispatch lines until the end, or until an inline job hands off."""
        assert self._pool is not None
        handed_off = False
        try:
            for line in self._lines:
                job = _guarded(self._handle, line)
                if self._stopped:
                    break
                if job is None:
                    continue
                with self._count:
                    alone = self._running == 0
                    self._running += 1
                if alone:
                    handed_off = self._run_inline(job)
                    if handed_off:
                        return  # a pool thread reads on
                else:
                    self._pool.submit(self._run, job, WaitPolicy())
        except OSError:
            # unreadable input (EIO, ...) ends the session like EOF
            log.exception("corral: error: cannot read the input")
        finally:
            if not handed_off:
                self._at_end()
                self._done.set()

    def _run_inline(self, job: Job) -> bool:
        """Run `job` on this (the reading) thread; True if it handed reading off."""
        assert self._readers is not None
        inline = _InlineRun(functools.partial(self._readers.submit, self._read))
        self._run(job, WaitPolicy(on_slow=inline))
        return inline.handed_off

    def _run(self, job: Job, wait: WaitPolicy) -> None:
        try:
            _guarded(job, wait)
        finally:
            with self._count:
                self._running -= 1

    def spawn(self, job: Job) -> None:
        """Run `job` on a pool thread (a call the answer to a question let go on)."""
        assert self._pool is not None
        with self._count:
            self._running += 1
        self._pool.submit(self._run, job, WaitPolicy())

    def stop(self) -> None:
        """Read no further (called from `handle`)."""
        self._stopped = True


def _guarded(function: Callable[..., Any], *args: Any) -> Any:
    """A host-side bug in one message or job is reported on stderr; it must not take
    down the thread that serves the rest (the server would hang, not fail)."""
    try:
        return function(*args)
    except Exception:
        log.exception("corral: internal error")
        return None
