"""corral.Pool: many sandboxes, one hardened pool of workers.

    with Pool(max_workers=64, idle_timeout_s=30.0) as pool:
        sb = pool.sandbox("/srv/ws/a")            # a Sandbox
        asb = pool.async_sandbox("/srv/ws/b")     # an AsyncSandbox

One zygote serves every sandbox of the pool; each sandbox's workers are forked
from it when a call needs one, confined to that sandbox's roots only, and exit
after idle_timeout_s idle. The scheduling lives in corral/sandbox/hub.py.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import threading
import weakref
from typing import Any, TypeVar

from corral.api import AsyncSandbox, Sandbox, _BaseSandbox, _config_arguments
from corral.config import Config
from corral.observe import Observer
from corral.sandbox.broker import Broker
from corral.sandbox.hub import Hub

S = TypeVar("S", bound=_BaseSandbox)

DEFAULT_MAX_WORKERS = 64
DEFAULT_IDLE_TIMEOUT_S = 30.0
log = logging.getLogger("corral")


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit, as Go's runtime
    does at start; the soft limit now. Each open sandbox holds a few fds in the
    host (its roots' directories, its history store's), so the usual soft limit
    of 1,024 would stop a pool at a few hundred sandboxes; the hard limit is the
    one an operator sets (LimitNOFILE=). corral never uses select(), the one
    interface that breaks on an fd above 1,023; a worker sets its own limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as exc:  # a sandbox (seccomp, a container) may refuse it
        log.warning("corral: could not raise the open files limit from %d to %d: %s",
                    soft, hard, exc)
        return soft
    return hard


class Pool:
    """A shared pool of confined workers for many sandboxes. Thread-safe; close
    it (or use `with`): closing closes every sandbox made from it."""

    def __init__(
        self, max_workers: int = DEFAULT_MAX_WORKERS,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, observer: Observer | None = None,
    ) -> None:
        """observer: every sandbox's made from this pool that names none of its own.
        Raises the process's soft limit of open files to its hard limit."""
        self._hub = Hub(max_workers, idle_timeout_s)
        raise_open_files_limit()
        self._observer = observer
        self._start = functools.partial(Broker, hub=self._hub)
        self._lock = threading.Lock()
        # closed ones drop out
        self._sandboxes: weakref.WeakSet[_BaseSandbox] = weakref.WeakSet()

    def sandbox(self, workspace: str | os.PathLike[str], **kwargs: Any) -> Sandbox:
        """A Sandbox served by this pool; Sandbox's keyword arguments. `workers`
        caps how many of the pool's workers it may hold at once (default 2)."""
        arguments = {"workspace": workspace, **self._defaults(kwargs)}
        return self._add(Sandbox._made(self._start, None, arguments))

    def _defaults(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A sandbox's keyword arguments, with the pool's observer unless it names one."""
        return {"observer": self._observer, **kwargs}

    def _add(self, sandbox: S) -> S:
        with self._lock:
            self._sandboxes.add(sandbox)
        return sandbox

    def async_sandbox(self, workspace: str | os.PathLike[str], **kwargs: Any) -> AsyncSandbox:
        """An AsyncSandbox served by this pool; cancelling an awaited call cancels it."""
        arguments = {"workspace": workspace, **self._defaults(kwargs)}
        return self._add(AsyncSandbox._made(self._start, None, arguments))

    def sandbox_from_config(
        self, path: str | os.PathLike[str] | Config, **kwargs: Any
    ) -> Sandbox:
        """A Sandbox as corral.toml describes it (or a Config, as Sandbox.from_config
        takes it); keyword arguments win over the file."""
        made = Sandbox._made(self._start, *_config_arguments(path, self._defaults(kwargs)))
        return self._add(made)

    def async_sandbox_from_config(
        self, path: str | os.PathLike[str] | Config, **kwargs: Any
    ) -> AsyncSandbox:
        made = AsyncSandbox._made(self._start, *_config_arguments(path, self._defaults(kwargs)))
        return self._add(made)

    def stats(self) -> dict[str, int]:
        """{"sandboxes": open, "workers": alive, "idle_workers": alive and idle,
        "busy_workers": running a call, "queued_calls": waiting for a worker}."""
        return self._hub.stats()

    def close(self) -> None:
        """Close every sandbox (waiting for its running calls), then the zygote."""
        with self._lock:
            sandboxes = list(self._sandboxes)
        for sandbox in sandboxes:
            sandbox._close()
        self._hub.close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
