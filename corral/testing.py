"""What a test may look at inside a sandbox, read-only: the host's view of its
history store, the broker that runs its calls, that broker's supply of workers and
its start-up sweep. Not for programs: a sandbox's API is `corral.Sandbox`. A test
reaches the internals only through these functions, so that moving an internal
changes this module, not the tests (docs/development.md, "Tests")."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.api import _BaseSandbox
    from corral.history.host import History
    from corral.sandbox.broker import Broker, SandboxSupply
    from corral.sandbox.handles import Worker


def history(sandbox: _BaseSandbox) -> History:
    """The host's view of the sandbox's history store: its `path`, the `work_path`
    its workers write records in, the records it `refused` and why."""
    found = sandbox._history
    if found is None:
        raise ValueError("this sandbox keeps no history")
    return found


def history_usage(sandbox: _BaseSandbox) -> int:
    """The bytes the sandbox's history store holds, as its host counts them."""
    return history(sandbox)._usage


def broker(sandbox: _BaseSandbox) -> Broker:
    """The one executor that runs the sandbox's calls in its workers."""
    return sandbox._executor  # type: ignore[return-value]  # api types it as the Executor protocol


def supply(of: Broker) -> SandboxSupply:
    """The broker's workers: a private sandbox's WorkerSet, or its lane of a shared
    pool."""
    return of._supply


def idle_workers(of: Broker) -> Sequence[Worker]:
    """The idle workers of a private sandbox's set, as a live view (it changes as
    calls take and give back workers)."""
    return of._supply._idle  # type: ignore[attr-defined]


def workers(of: Broker) -> Collection[Worker]:
    """Every worker of a private sandbox's set, as a live view."""
    return of._supply._workers  # type: ignore[attr-defined]


def sweep(of: Broker) -> Future[int] | None:
    """The broker's start-up sweep of stale temp files (how many it removed): a
    shared pool's lane starts it at once, a private set after its first call
    (None until then)."""
    return of._sweep
