"""The one call path: checkout -> exchange -> check in (give back, or recycle)
or replace, whatever supplies the workers (Supply): a private sandbox's
WorkerSet (worker_set.py) or a lane of a shared pool (hub.Lane). A worker's
failure (timeout, crash, a wrong answer) becomes the call's error answer.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from corral.calls.messages import (
    Answer,
    CallRequest,
    CleanupRequest,
    HistoryRequest,
    Malformed,
    Removed,
    error_answer,
)
from corral.calls.waiting import PLAIN, Cancel, WaitPolicy
from corral.config import Limits, SandboxOptions
from corral.errors import SandboxError
from corral.fs import READ_ONLY_FS
from corral.sandbox.answers import answer_limits
from corral.sandbox.handles import Worker, WorkerLost, WorkerMisbehaved, describe_exit
from corral.sandbox.protocol import FrameTooLarge, ProtocolError, encode

# RSS is read every this many calls: psutil costs ~50 us a read, a tenth of a small call,
# and RLIMIT_AS bounds what a worker can grow to in between.
RSS_CHECK_EVERY = 8
# A cleanup is tried this many times: its own worker may be killed too (OOM, operator).
CLEANUP_ATTEMPTS = 3

# A call's crash and a worker's recycling, for an operator (supplies.py logs the rest).
log = logging.getLogger("corral.workers")
T = TypeVar("T")

Runnable = CallRequest | HistoryRequest | CleanupRequest  # what run() sends a worker


class CallFailed(Exception):
    """A call the worker could not answer (timeout, crash, halted sandbox): its code
    and message become the call's error answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class Supply(Protocol):
    """Where a call path gets its workers: a WorkerSet of its own (a private
    sandbox) or a hub.Lane (a sandbox of a shared pool); only what CallPath asks
    of it (the broker asks more: broker.SandboxSupply). Its state is guarded by
    one lock, the supply's own or its hub's; the call path holds none."""

    def take(self, cancel: Cancel | None) -> Worker:
        """A live worker for one call, in the call's turn; SandboxError if none will
        come (halted, closed, or the caller cancelled)."""

    def give_back(self, worker: Worker) -> None:
        """A worker whose call went well: idle again, or to the next call waiting."""

    def lost(self, worker: Worker) -> int | None:
        """A worker that must not serve again (it crashed, timed out, misbehaved or
        is recycled): kill it, reap it, return its exit code; the supply makes up
        for it (at once, or when a call needs one)."""

    def died(self, code: int | None) -> None:
        """A worker ended with exit `code` of something the host did not do: tell the
        sandbox's observer (supplies.note_death), unless the supply's close killed it."""

    def closing(self) -> bool:
        """The supply was closed: its workers were killed by its close, not lost."""

    def sole(self) -> bool:
        """No other call holds a worker now (an unlocked guess: a wrong one costs speed)."""

    def wake(self) -> None:
        """A call is on its way: Worker.wake the idle worker it will take, if any."""

class CallPath:
    """The one call path: checkout (Supply.take) -> exchange -> check in (give back,
    or recycle) or replace (Supply.lost). Failures of the worker become error answers."""

    def __init__(self, supply: Supply, options: SandboxOptions, limits: Limits,
                 meanwhile: Callable[[], None] | None = None) -> None:
        """meanwhile: what the host does while a worker runs each request (the
        history's commits of earlier calls: History.meanwhile)."""
        self.supply = supply
        self.meanwhile = meanwhile
        self.options = options
        self.limits = limits
        # What a tool's answer can need under these limits (answers.py): a bigger
        # one, or one of more values, is a misbehaving worker's, refused undecoded.
        size, self.answer_values = answer_limits(limits)
        self.answer_bytes = min(size, options.max_frame_bytes)

    def wake(self) -> None:
        """A call is on its way (its first bytes came in): wake the worker it will
        take if that one sleeps. Only where workers poll for requests (spin)."""
        if self.options.spin:
            self.supply.wake()

    def call(self, request: CallRequest | HistoryRequest, wait: WaitPolicy = PLAIN) -> Answer:
        """Run one call on a worker; failures of the worker become error answers."""
        try:
            return self.run(request, lambda wire: Answer.from_wire(wire, request), wait)
        except CallFailed as failed:
            return error_answer(request.tool, failed.code, failed.message, id=request.id)

    def run(self, request: Runnable, parse: Callable[[dict[str, Any]], T], wait: WaitPolicy) -> T:
        """`request` on a worker, its answer frame made into a T by `parse`
        (messages.*.from_wire: Malformed loses the worker); CallFailed otherwise."""
        limit = self.options.max_frame_bytes
        try:
            frame = encode(request.to_wire(), limit)
        except ProtocolError as exc:
            why = "too_large" if isinstance(exc, FrameTooLarge) else "invalid_arguments"
            raise CallFailed(why, f"The request cannot be sent: {exc}.") from None
        try:
            worker = self.supply.take(wait.cancel)
        except SandboxError as exc:
            raise CallFailed("worker_crashed", str(exc)) from None
        timeout = self.limits.timeout_s
        tool = request.tool
        try:
            # only a lone call spins: concurrent ones would take the GIL from each other
            spin = wait.spin and self.options.spin and self.supply.sole()
            try:
                wire = worker.exchange(
                    frame, time.monotonic() + timeout, self.answer_bytes, wait, spin,
                    self.answer_values, isinstance(request, CallRequest) and request.raw,
                    self.meanwhile,
                )
                if wire.get("id") != request.id:
                    raise WorkerMisbehaved("it answered another request")
                answer = parse(wire)
            except Malformed as exc:
                raise WorkerMisbehaved(f"it sent {exc}") from None
            except (WorkerLost, TimeoutError):
                raise
            except Exception as exc:
                # reading its answer failed as nothing foresaw: the worker's state is
                # unknown, and a worker neither replaced nor checked in would jam the supply
                raise WorkerMisbehaved(
                    f"its answer could not be read ({type(exc).__name__}: {exc})"
                ) from exc
            finally:
                if wait.cancel is not None:
                    wait.cancel.detach()  # the call is over: a late cancel kills nothing
        except TimeoutError:
            self.supply.lost(worker)
            self.clean_after(worker.pid, request, wait)
            raise CallFailed(
                "timeout",
                f"{tool} did not finish within the {timeout:g} second limit; "
                "its worker was stopped.",
            ) from None
        except WorkerLost as exc:
            code = self.supply.lost(worker)
            if self.supply.closing():  # killed by the sandbox's close (^C to a server)
                raise CallFailed("worker_crashed", f"The sandbox was closed while {tool} "
                                 "ran; its worker was stopped.") from None
            cancelled = wait.cancel is not None and wait.cancel.cancelled  # killed by us
            if not cancelled and not isinstance(exc, WorkerMisbehaved):
                self.supply.died(code)
            self.clean_after(worker.pid, request, wait)
            raise CallFailed("worker_crashed", _crashed(worker.pid, tool, code, exc)) from None
        self.checkin(worker, _read_only_fs(answer))
        return answer

    def checkin(self, worker: Worker, stale: bool = False) -> None:
        """Back to the supply, or recycled (max calls, RSS cap, a view of the file
        system that may be out of date) without failing anyone."""
        worker.calls += 1
        worker.idle_since, worker.poked = time.monotonic(), False
        if stale:
            why = "after a read-only file system refused a change"
        elif worker.calls >= worker.max_calls:
            why = f"after {worker.calls} calls"
        elif worker.calls % RSS_CHECK_EVERY == 0 and (
            (rss := worker.rss_mb()) > self.options.max_worker_rss_mb
        ):
            why = f"at {rss:.0f} MiB of RSS"
        else:
            self.supply.give_back(worker)
            return
        code = self.supply.lost(worker)
        log.info("corral: worker %d recycled %s: %s", worker.pid, why, describe_exit(code, "gone"))

    def clean_after(self, pid: int, request: Runnable, wait: WaitPolicy) -> None:
        """Have a live worker remove the temp files a killed one may have left. A
        cleanup whose own worker dies is tried again (it writes nothing itself);
        it runs even when its call was cancelled."""
        if not isinstance(request, CallRequest | HistoryRequest):
            return
        cleanup = CleanupRequest.after(pid, request)
        for _ in range(CLEANUP_ATTEMPTS):
            try:
                self.run(cleanup, lambda wire: Removed.from_wire(wire, cleanup), wait.quiet())
                return
            except CallFailed:
                continue


def _read_only_fs(answer: object) -> bool:
    """Whether a file system refused a change as read-only (EROFS). The worker's
    mounts were copied when it was forked (a bind keeps the flags it was made
    with): one forked while the file system was read-only keeps refusing after
    it is remounted read-write, so it is recycled and the next call gets a fresh
    view. A worker that fakes the answer only has itself replaced."""
    error = answer.error if isinstance(answer, Answer) else None
    return (isinstance(error, dict) and error.get("code") == "read_only"
            and READ_ONLY_FS in str(error.get("message")))


def _crashed(pid: int, tool: str, code: int | None, exc: WorkerLost) -> str:
    """The error message of a call whose worker was lost, and its log line."""
    if code == -signal.SIGSYS:
        # the seccomp profile kills a worker only for a call corral never makes
        log.error(
            "corral: worker %d running %s was killed by SIGSYS: it attempted a system "
            "call the seccomp profile forbids outright (a compromised worker?); it was "
            "replaced", pid, tool, extra={"pid": pid, "tool": tool, "signal": "SIGSYS"},
        )
        what = "was killed by SIGSYS: it attempted a system call the sandbox forbids"
    else:
        what = (
            f"sent an invalid answer ({exc})" if isinstance(exc, WorkerMisbehaved)
            else f"stopped unexpectedly ({describe_exit(code, str(exc))})"
        )
        log.warning("corral: worker %d running %s %s; it was replaced", pid, tool, what,
                    extra={"pid": pid, "tool": tool})
    return f"The worker running {tool} {what}; the pool replaced it."
