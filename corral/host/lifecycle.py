"""A sandbox's lifecycle: calls in flight, and a close that waits for them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class Lifecycle:
    """Counts running calls; close() refuses new ones and waits for the rest."""

    def __init__(self) -> None:
        self._state = threading.Condition()
        self._running = 0
        self.closed = False

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """One call in flight; refused once the sandbox is closed."""
        with self._state:
            if self.closed:
                raise RuntimeError("this Sandbox is closed")
            self._running += 1
        try:
            yield
        finally:
            with self._state:
                self._running -= 1
                self._state.notify_all()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """A call inside the host's approve() callback does not hold close() up
        (the callback may itself wait on the host that is closing); if the
        sandbox was closed meanwhile, the call ends with RuntimeError."""
        with self._state:
            self._running -= 1
            self._state.notify_all()
        try:
            yield
        finally:
            with self._state:
                self._running += 1
                closed = self.closed
        if closed:
            raise RuntimeError("this Sandbox was closed while the call awaited approval")

    def shut(self) -> bool:
        """Refuse new calls and wait for running ones; False if already closed."""
        with self._state:
            if self.closed:
                return False
            self.closed = True
            self._state.wait_for(lambda: self._running == 0)
        return True
