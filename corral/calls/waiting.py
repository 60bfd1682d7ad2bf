"""How a caller's thread waits for its call: one explicit policy, made by the face
that knows the caller and passed down the call path (flow -> broker -> CallPath ->
Worker.exchange), instead of state the lower layers would look up.

- spin: poll (yielding the CPU) up to ANSWER_SPIN_S for the answer before sleeping.
  A stat or small read answers within it, and a thread woken from sleep costs ~3x
  its own work. Only a sandbox's lone call spins (concurrent ones would take
  the GIL from each other), and `[sandbox] spin = false` turns it off everywhere.
- on_slow: told once when the answer has not started within SLOW_CALL_S, and
  before the call waits on anything else slow (the client's answer to an approval
  or a roots/list): a line server runs a lone call on its reading thread and,
  told, hands reading to another thread (stdio.LineServer).
- cancel: the caller may give up (an HTTP client that went away, a cancelled
  asyncio task): a queued call leaves the queue, a running one loses its worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

# A lone call's thread polls this long for the answer before it sleeps.
ANSWER_SPIN_S = 150e-6
# After an answer (or a poke) a worker polls for the next request this long before it
# sleeps in a blocking read: a woken worker runs its call 2-3x slower than a running
# one (cold CPU, wake-up), and an agent's next call often comes within it. It yields
# the CPU while it polls, so it never holds a core that something else wants. The
# host pokes only a worker idle longer than this: one that sleeps.
NEXT_REQUEST_SPIN_S = 500e-6
# A call not answered within this long is slow: `on_slow` hears of it once.
SLOW_CALL_S = 0.001


class _Killable(Protocol):
    def kill(self) -> None: ...


class _Waiter(Protocol):
    ready: threading.Condition


class Cancel:
    """A caller's handle to give up on its call: a queued call leaves the queue
    and never runs; a running one has its worker killed (as a timeout does). The
    shared pool (sandbox/hub.py) ties it to the call's ticket, then its worker,
    under the pool's lock."""

    def __init__(self) -> None:
        self.cancelled = False
        self.lock: threading.RLock | None = None  # the pool's, once the call is queued
        self.ticket: _Waiter | None = None
        self.worker: _Killable | None = None

    def cancel(self) -> None:
        lock = self.lock
        if lock is None:
            self.cancelled = True
            return
        with lock:
            self.cancelled = True
            if self.worker is not None:
                self.worker.kill()
            elif self.ticket is not None:
                self.ticket.ready.notify()

    def attach(self, worker: _Killable) -> None:
        """The call runs on `worker` now: a cancel kills it (at once if the call was
        cancelled while its worker was being found). Called once queued (lock set)."""
        assert self.lock is not None
        with self.lock:
            self.worker = worker
            if self.cancelled:
                worker.kill()

    def detach(self) -> None:
        """The call is done with its worker: a late cancel kills nothing."""
        lock = self.lock
        if lock is None:  # never queued where a cancel could reach its worker
            return
        with lock:
            self.worker = None


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class WaitPolicy:
    """How one call waits (see the module docstring)."""

    spin: bool = True
    on_slow: Callable[[], None] = _nothing
    cancel: Cancel | None = None

    @property
    def notifies(self) -> bool:
        """Someone wants to hear that the call turned slow."""
        return self.on_slow is not _nothing

    def quiet(self) -> WaitPolicy:
        """The same without the cancel handle: what a call's cleanup waits with
        (a cleanup after a cancelled call must still run)."""
        return WaitPolicy(self.spin, self.on_slow)


PLAIN = WaitPolicy()  # a blocking caller with nobody to tell: Sandbox.call
