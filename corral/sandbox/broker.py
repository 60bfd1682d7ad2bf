"""The broker: the executor api.py dispatches through. Every tool runs in a
confined worker; the host only frames requests and results and never opens a
workspace path itself. `Executor` is the interface; `Broker` is the one
implementation, over a private WorkerSet or, given a hub, a lane of a shared
pool. `Sandbox` holds one and never knows which.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from corral.calls.control import SandboxSetup
from corral.calls.messages import Answer, CallRequest, HistoryRequest
from corral.calls.waiting import PLAIN, Cancel, WaitPolicy
from corral.config import Limits, SandboxOptions
from corral.config_keys import LAYERS
from corral.errors import SandboxError
from corral.observe import Observer
from corral.policy import Policy, RootSpec
from corral.sandbox.call_path import CallPath, Supply
from corral.sandbox.handles import ZygoteHandle
from corral.sandbox.worker_set import WorkerSet

if TYPE_CHECKING:  # a private sandbox (`corral call`'s) never loads the shared pool's code
    from corral.sandbox.hub import Hub

Submittable = CallRequest | HistoryRequest


class SandboxSupply(Supply, Protocol):
    """A supply as the broker holds it (a WorkerSet or a hub.Lane): what its call
    path takes workers from, plus its start, its sweep, its counts and its close."""

    zygote: ZygoteHandle
    confinement: dict[str, Any]

    def start(self) -> None:
        """Have a worker confined, so `confinement` is known (SandboxError if none can be)."""

    def close(self) -> None:
        """Kill every worker (a call in flight ends with worker_crashed) and reap them."""

    def sweep_temps(self) -> int:
        """Remove the temp files of writers that died unseen (supplies.sweep_on), on a
        worker the supply finds for it; returns how many were removed."""

    def pids(self) -> list[int]:
        """The pids of the supply's live workers."""

    def stats(self) -> dict[str, int]:
        """{"workers", "idle_workers", "busy_workers", "queued_calls"} now."""


class Executor(Protocol):
    """Where a sandbox's calls run."""

    def submit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer: ...

    async def asubmit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer: ...

    def wake(self) -> None: ...

    def stop_calls(self) -> None: ...

    def close(self) -> None: ...

    @property
    def confinement(self) -> dict[str, Any]: ...

    def pids(self) -> dict[str, Any]: ...

    def stats(self) -> dict[str, int]: ...


class Broker:
    """Starts a sandbox's supply of workers (a private zygote and WorkerSet, or a
    lane of `hub`: no process of its own until a call needs one); refuses to start
    without the required layers."""

    def __init__(
        self, roots: Sequence[RootSpec], limits: Limits, policy: Policy, options: SandboxOptions,
        history: str | None = None, hub: Hub | None = None, observer: Observer | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """history: the workspace's history store directory (None: history off);
        observer: hears of the deaths of its workers; meanwhile: the host's work done
        while a worker runs a request (CallPath)."""
        check_known(options.require)
        setup = SandboxSetup.of(roots, limits, policy, options, history)
        supply: SandboxSupply = (
            WorkerSet(ZygoteHandle(setup), options, limits, observer) if hub is None
            else hub.open_lane(setup, observer)
        )
        try:
            supply.start()
            self._confinement = summarise(supply.confinement)
            check_required(self._confinement, options.require)
        except BaseException:
            supply.close()
            raise
        self._supply = supply
        self._calls = CallPath(supply, options, limits, meanwhile)
        self._ids = itertools.count(1)
        self._owner = os.getpid()
        # asubmit's threads: one per worker, since no more calls can run at once
        # (made as calls need them).
        self._threads = ThreadPoolExecutor(options.workers, thread_name_prefix="corral-call")
        # Temp files a killed host's workers left go in the background: the walk costs
        # ~4 us an entry, and no call need wait for it; close() waits. A private set
        # sweeps once its first call is answered, on that call's worker (idle again),
        # or at close if no call came: a one-shot call (`corral call`) so forks and
        # confines no worker for it. A shared pool's sweeps start at once, on its few
        # threads, each on a worker of its lane taken as a call takes one.
        self._sweep_lock = threading.Lock()
        self._sweep: Future[int] | None = (
            None if hub is None else hub.sweeps.submit(supply.sweep_temps)
        )

    def submit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer:
        """Run one request in a worker; a worker's failure is an error answer."""
        if os.getpid() != self._owner:
            # A forked copy would talk over the same sockets as its parent.
            raise SandboxError("A sandbox cannot be used in a process forked after it started.")
        try:
            return self._calls.call(request.numbered(next(self._ids)), wait)
        finally:
            if self._sweep is None:  # an unlocked look: _start_sweep looks again
                self._start_sweep()

    def _start_sweep(self) -> None:
        with self._sweep_lock:
            if self._sweep is None:
                self._sweep = _on_thread(self._supply.sweep_temps)

    def wake(self) -> None:
        """A request is arriving: wake the worker it will run on if that one sleeps."""
        self._calls.wake()

    async def asubmit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer:
        """submit() on a broker thread, so the event loop never blocks on a worker.
        Cancelling the awaiting task cancels the call where its supply allows: a
        shared pool's queued call never runs, a running one loses its worker; a
        private sandbox's call runs to its end."""
        # here, not at the top: asyncio is a fifth of what `corral call` would import,
        # and whoever awaits this has loaded it already
        import asyncio

        cancel = Cancel()
        future = asyncio.get_running_loop().run_in_executor(
            self._threads, self.submit, request, WaitPolicy(wait.spin, wait.on_slow, cancel)
        )
        try:
            return await future
        except asyncio.CancelledError:
            cancel.cancel()
            raise

    def stop_calls(self) -> None:
        """Kill every worker now: each call in flight ends with worker_crashed, and
        none starts (close() then finds nothing running)."""
        self._supply.close()

    def close(self) -> None:
        """Stop the workers (and a private zygote); nothing of the sandbox outlives this."""
        self._threads.shutdown(wait=True)
        with self._sweep_lock:
            sweep = self._sweep
            if sweep is None:  # no call came: sweep now, on the idle worker
                self._sweep = _done(self._supply.sweep_temps())
            elif not sweep.cancel():  # a pool's, not begun: never needed; begun: let it end
                sweep.result()
        self._supply.close()

    @property
    def confinement(self) -> dict[str, Any]:
        return dict(self._confinement)

    def pids(self) -> dict[str, Any]:
        """The zygote's and the workers' pids (for doctor and tests)."""
        return {"zygote": self._supply.zygote.pid, "workers": self._supply.pids()}

    def stats(self) -> dict[str, int]:
        return self._supply.stats()


def _on_thread(work: Callable[[], int]) -> Future[int]:
    """`work` on a daemon thread of its own (an exit need not wait for it), as a
    Future already running: close() always lets it finish."""
    future: Future[int] = Future()
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="corral-sweep", daemon=True).start()
    return future


def _done(result: int) -> Future[int]:
    future: Future[int] = Future()
    future.set_result(result)
    return future


def summarise(layers: dict[str, Any]) -> dict[str, Any]:
    """A worker's report plus `level`: "full" when every layer is active. The mount
    namespace is reported beside them but left out of `level`: it needs root or
    unprivileged user namespaces, which many distributions restrict, and `level`
    describes the layers every supported kernel offers (`require` can demand it)."""
    report: dict[str, Any] = {
        "landlock_abi": int(layers.get("landlock_abi") or 0),
        "seccomp": bool(layers.get("seccomp")),
        "no_new_privs": bool(layers.get("no_new_privs")),
        "openat2": bool(layers.get("openat2")),
        "rlimits": bool(layers.get("rlimits")),
        "mount_namespace": bool(layers.get("mount_namespace")),
    }
    active = [on for name, on in _active(report).items() if name != "mount_namespace"]
    report["level"] = "full" if all(active) else "partial" if any(active) else "none"
    return report


def check_known(require: Sequence[str]) -> None:
    """SandboxError naming every layer in `require` that corral does not know."""
    unknown = [name for name in require if name not in LAYERS]
    if unknown:
        raise SandboxError(
            f"The sandbox refuses to start: unknown layer(s) {', '.join(unknown)} in require; "
            f"known: {', '.join(LAYERS)}."
        )


def check_required(report: dict[str, Any], require: Sequence[str]) -> None:
    """SandboxError naming every required layer that is not active."""
    active = _active(report)
    missing = [name for name in require if not active[name]]
    if missing:
        raise SandboxError(
            f"The sandbox refuses to start: required layer(s) {', '.join(missing)} "
            "not active on this kernel."
        )


def _active(report: dict[str, Any]) -> dict[str, bool]:
    return {
        name: report["landlock_abi"] > 0 if name == "landlock" else report[name]
        for name in LAYERS
    }
