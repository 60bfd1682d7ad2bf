"""Test helper, not production: run a function in a freshly forked child that
confined itself with corral.sandbox.confine.confine, and bring back its result,
exception and errno. A restriction cannot be undone, so every test forks.

`drop` removes layers in the child for control experiments ("would this test
fail without the layer?"): "landlock", "seccomp", "capabilities", "mount_namespace". Nothing else
is faked.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from corral.config import Limits
from corral.sandbox import confine as confine_module

DEFAULT_TIMEOUT = 10.0  # seconds; a child that hangs is killed, the test fails
_HEADER = struct.Struct("<I")
_LAYER_STEPS = {
    "landlock": "_apply_landlock",
    "seccomp": "_apply_seccomp",
    "capabilities": "_drop_capabilities",
    "mount_namespace": "_enter_mount_namespace",
}


@dataclass
class Outcome:
    """What the child's function returned or raised, and the layers it ran under."""

    layers: dict[str, Any] | None = None
    value: Any = None
    error: str | None = None  # the exception's type name
    errno: int | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


class ConfinedChild:
    """A forked, confined child running `fn(*args)`; `ready()` returns once it is
    confined, `outcome()` waits for the function's result."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        roots: Sequence[Any],
        limits: Limits | None = None,
        keep_fds: Iterable[int] = (),
        drop: Iterable[str] = (),
    ) -> None:
        read_end, write_end = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - runs in the child
            os.close(read_end)
            _child(write_end, fn, args, roots, limits or Limits(), [*keep_fds], set(drop))
        os.close(write_end)
        self._fd = read_end
        self._layers: dict[str, Any] | None = None
        self._done = False

    def ready(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """The layers confine() returned; RuntimeError if confinement failed."""
        if self._layers is None:
            kind, payload = self._receive(timeout)
            if kind != "layers":
                self._reap()
                raise RuntimeError(f"confinement failed in the child: {payload}")
            self._layers = payload
        return self._layers

    def outcome(self, timeout: float = DEFAULT_TIMEOUT) -> Outcome:
        """The function's result; a failed confine() comes back as the error."""
        try:
            if self._layers is None:
                kind, payload = self._receive(timeout)
                if kind != "layers":
                    return Outcome(error=payload[0], message=payload[1])
                self._layers = payload
            kind, payload = self._receive(timeout)
        finally:
            self._reap()
        result = Outcome(layers=self._layers)
        if kind == "value":
            result.value = payload
        else:
            result.error, result.errno, result.message = payload
        return result

    def _receive(self, timeout: float) -> tuple[str, Any]:
        header = self._read_exactly(_HEADER.size, timeout)
        return pickle.loads(self._read_exactly(_HEADER.unpack(header)[0], timeout))

    def _read_exactly(self, size: int, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        data = b""
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                os.kill(self.pid, signal.SIGKILL)
                raise TimeoutError(f"confined child {self.pid} did not answer in {timeout}s")
            chunk = os.read(self._fd, size - len(data))
            if not chunk:
                raise ChildProcessError(f"confined child died: {self._reap()}")
            data += chunk
        return data

    def _reap(self) -> str:
        if self._done:
            return "reaped"
        self._done = True
        os.close(self._fd)
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit status {os.waitstatus_to_exitcode(status)}"


def run_confined(fn: Callable[..., Any], *args: Any, **options: Any) -> Outcome:
    """Fork, confine, run fn(*args) in the child; the outcome (options: ConfinedChild's)."""
    return ConfinedChild(fn, *args, **options).outcome()


def _child(
    fd: int, fn: Callable[..., Any], args: tuple[Any, ...], roots: Sequence[Any],
    limits: Limits, keep_fds: list[int], drop: set[str],
) -> None:  # pragma: no cover - runs in the child
    try:
        for layer in drop:
            setattr(confine_module, _LAYER_STEPS[layer], lambda *_: None)
        try:
            layers = confine_module.confine(roots, keep_fds=[fd, *keep_fds], limits=limits)
        except BaseException as exc:
            _send(fd, ("confine_error", (type(exc).__name__, str(exc))))
            return
        _send(fd, ("layers", layers))
        try:
            _send(fd, ("value", fn(*args)))
        except BaseException as exc:
            _send(fd, ("error", (type(exc).__name__, getattr(exc, "errno", None), str(exc))))
    finally:
        os._exit(0)


def _send(fd: int, message: tuple[str, Any]) -> None:  # pragma: no cover - in the child
    try:
        body = pickle.dumps(message)
    except Exception:
        body = pickle.dumps((message[0], repr(message[1])))
    view = memoryview(_HEADER.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view):]
