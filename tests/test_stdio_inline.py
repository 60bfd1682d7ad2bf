"""LineServer's inline jobs: run on the reading thread, which reads on elsewhere
once the job hands off (so a job waiting on a later line cannot stall the input)."""

from __future__ import annotations

import fcntl
import os
import socket
import threading
from collections.abc import Callable, Iterator

from corral.calls.waiting import WaitPolicy
from corral.faces import stdio
from corral.sandbox import handles


def serve(lines: Iterator[bytes], handle: Callable) -> list[bool]:
    server = stdio.LineServer(lines, handle, max_jobs=2)
    ended: list[bool] = []
    serving = threading.Thread(target=server.run, args=(lambda: ended.append(True),), daemon=True)
    serving.start()
    serving.join(30)
    assert not serving.is_alive()
    return ended


def test_inline_job_runs_on_the_reading_thread() -> None:
    """A job that arrives while no other job runs is run by the reading thread."""
    threads: list[int] = []

    def handle(line: bytes | None) -> stdio.Job:
        return lambda wait: threads.append(threading.get_ident())

    reader: list[int] = []

    def lines() -> Iterator[bytes]:
        reader.append(threading.get_ident())
        yield from [b"a", b"b", b"c"]

    assert serve(lines(), handle) == [True]
    assert threads == reader * 3


def test_inline_job_that_hands_off_lets_reading_go_on() -> None:
    """The inline job waits for a line read after it: only its on_slow (the hand-off)
    makes that possible. A second on_slow from the same job, and the on_slow of a
    job running on a pool thread, do nothing."""
    later = threading.Event()
    waited: list[bool] = []

    def blocked(wait: WaitPolicy) -> None:
        wait.on_slow()
        wait.on_slow()
        waited.append(later.wait(10))

    def handle(line: bytes | None) -> stdio.Job | None:
        if line == b"later":
            later.set()
            return None
        if line == b"pool":
            return lambda wait: wait.on_slow()
        return blocked

    assert serve(iter([b"wait", b"pool", b"later"]), handle) == [True]
    assert waited == [True]


def test_inline_job_without_hand_off_holds_reading() -> None:
    """Without a hand-off, the next line is read only after the inline job ends
    (what makes hand-off necessary: it can fail)."""
    order: list[str] = []

    def handle(line: bytes | None) -> stdio.Job | None:
        if line == b"next":
            order.append("read next")
            return None
        return lambda wait: order.append("job done")

    assert serve(iter([b"job", b"next"]), handle) == [True]
    assert order == ["job done", "read next"]


def test_slow_call_hook_hears_only_of_a_late_answer() -> None:
    """The pool tells the wait policy's on_slow when no answer started within
    SLOW_CALL_S; a failing hook does not fail the call."""
    heard: list[bool] = []

    def hook() -> None:
        heard.append(True)
        raise RuntimeError("a hook that fails")

    ours, theirs = socket.socketpair()
    with ours, theirs:
        handles._tell_if_slow(ours.fileno(), hook)  # nothing to read: slow
        theirs.send(b"x")
        handles._tell_if_slow(ours.fileno(), hook)  # an answer is there: not slow
    assert heard == [True]


def test_protocol_pipes_are_widened_to_a_mebibyte() -> None:
    """A 1 MiB answer crosses the client's pipe in 3 turns instead of ~35."""
    read_end, write_end = os.pipe()
    try:
        assert fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ) == 64 * 1024
        stdio.widen_pipe(write_end)
        with open("/proc/sys/fs/pipe-max-size") as limit:
            expected = min(stdio.PIPE_BYTES, int(limit.read()))
        assert fcntl.fcntl(read_end, fcntl.F_GETPIPE_SZ) == expected
        with open(os.devnull, "rb") as not_a_pipe:
            stdio.widen_pipe(not_a_pipe.fileno())  # left as is, no error
    finally:
        os.close(read_end)
        os.close(write_end)
