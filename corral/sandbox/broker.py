"""The broker: the executor api.py dispatches through. Every tool runs in a
confined worker; the host only frames requests and results and never opens a
workspace path itself. `Executor` is the interface (Broker here, a shared pool's
hub.PooledBroker); `Sandbox` holds one and never knows which.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from corral.config import LAYERS, Limits, SandboxOptions
from corral.policy import Policy, RootSpec
from corral.sandbox.messages import Answer, CallRequest, HistoryRequest
from corral.sandbox.pool import Pool, SandboxError, ZygoteHandle
from corral.sandbox.waiting import PLAIN, WaitPolicy

Submittable = CallRequest | HistoryRequest


class Executor(Protocol):
    """Where a sandbox's calls run."""

    def submit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer: ...

    async def asubmit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer: ...

    def close(self) -> None: ...

    @property
    def confinement(self) -> dict[str, Any]: ...


class Broker:
    """Starts the zygote and the pool; refuses to start without the required layers."""

    _sweeper: threading.Thread | None = None  # the start-up sweep (a private pool's only)

    def __init__(
        self, roots: Sequence[RootSpec], limits: Limits, policy: Policy, options: SandboxOptions,
        history: str | None = None,
    ) -> None:
        """history: the workspace's history store directory (None: history off)."""
        check_known(options.require)
        config = {
            "roots": [[spec.path, spec.mode] for spec in roots],
            "limits": dataclasses.asdict(limits),
            "policy": policy.to_dict(),
            "options": dataclasses.asdict(options),
            "host_pid": os.getpid(),
            "history": history,
            # The death signal follows the thread that forked, not the process: only
            # the main thread lives as long as the host. Elsewhere the zygote relies
            # on its control channel ending, which happens however the host dies.
            "pdeathsig": threading.current_thread() is threading.main_thread(),
        }
        self._zygote = ZygoteHandle(config)
        self._pool = Pool(self._zygote, options, limits)
        try:
            self._pool.start()
            self._confinement = summarise(self._pool.confinement)
            check_required(self._confinement, options.require)
        except BaseException:
            self._pool.close()
            raise
        self._ids = itertools.count(1)
        self._owner = os.getpid()
        # asubmit's threads: one per worker, since no more calls can run at once.
        self._threads = ThreadPoolExecutor(options.workers, thread_name_prefix="corral-call")
        self._start_sweep()

    def _start_sweep(self) -> None:
        """Temp files a killed host's workers left go in the background: the walk costs
        ~4 us an entry, and the first calls need not wait for it; close() waits."""
        self._sweeper = threading.Thread(
            target=self._pool.sweep_temps, name="corral-sweep", daemon=True
        )
        self._sweeper.start()

    def submit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer:
        """Run one request in a worker; a worker's failure is an error answer."""
        if os.getpid() != self._owner:
            # A forked copy would talk over the same sockets as its parent.
            raise SandboxError("A sandbox cannot be used in a process forked after it started.")
        return self._pool.call(request.numbered(next(self._ids)), wait)

    async def asubmit(self, request: Submittable, wait: WaitPolicy = PLAIN) -> Answer:
        """submit() on a broker thread, so the event loop never blocks on a worker
        (a private pool's call runs to its end; a shared pool's can be cancelled:
        hub.PooledBroker)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, self.submit, request, wait
        )

    def close(self) -> None:
        """Stop the workers and the zygote; nothing of the sandbox outlives this."""
        self._threads.shutdown(wait=True)
        if self._sweeper is not None:  # so every start's sweep finishes (a timeout bounds it)
            self._sweeper.join()
        self._pool.close()

    @property
    def confinement(self) -> dict[str, Any]:
        return dict(self._confinement)

    def pids(self) -> dict[str, Any]:
        """The zygote's and the workers' pids (for doctor and tests)."""
        return {"zygote": self._zygote.pid, "workers": self._pool.pids()}


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
