"""Observer: what a host may watch of a sandbox's calls, without corral knowing
how it is counted (the HTTP face's Prometheus endpoint is one such host).

Every method is a no-op here; a subclass overrides what it counts. They run on
the thread that made the event, inside the call's path: keep them to a few
increments (no I/O, no blocking), and never raise.
"""

from __future__ import annotations

# Approval outcomes on_approval reports: a person (the approve callback) was
# asked, and said yes or no. A call let through by a remembered grant, without
# asking, is "remembered".
APPROVAL_OUTCOMES = ("asked", "granted", "denied", "remembered")


class Observer:
    """Hears of a sandbox's calls, approvals and the deaths of its workers."""

    def on_call(self, tool: str, code: str, seconds: float) -> None:
        """A call ended: its tool as the caller named it, its error code ("ok" for
        success), and how long it took from start to result (a supervised call's
        wait for its approval included)."""

    def on_worker_death(self, signal: str) -> None:
        """A worker died of something the host did not do (found by the call it ran,
        by the next call that took it idle, or by the pool's reaper of idle
        workers): the signal's name ("SIGSYS": it attempted a system
        call the seccomp profile forbids; "SIGKILL", "SIGSEGV", ...), "exit" if it
        exited on its own, "unknown" if how is not known."""

    def on_approval(self, outcome: str) -> None:
        """One of APPROVAL_OUTCOMES."""
