"""A worker: a child the zygote forked. It confines itself, reports which
layers the kernel gave it, then answers request frames until its socket
closes. Every import it will ever need happens here, at module load, in the
zygote: after Landlock, a lazy import fails.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import posixpath
import select
import signal
import socket
import stat
import time
import unicodedata  # noqa: F401 - re imports it lazily to compile \N{name} escapes (grep)
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from corral._prctl import set_parent_death_signal
from corral.calls.control import SandboxSetup
from corral.calls.messages import (
    Answer,
    BootReport,
    CallRequest,
    CleanupRequest,
    FindTemps,
    HistoryRequest,
    Meta,
    Removed,
    RemoveTemps,
    TempList,
    ToWorker,
    error_answer,
    request_from_wire,
)
from corral.calls.waiting import NEXT_REQUEST_SPIN_S
from corral.config import Limits, SandboxOptions
from corral.errors import CorralError
from corral.fs import Root, Roots, temp_owner
from corral.history import recover, restore
from corral.history.store import Store
from corral.policy import Policy
from corral.sandbox import snapshot_walk
from corral.sandbox.confine import confine
from corral.sandbox.protocol import (
    CONTROL_FRAME_BYTES,
    EXIT_BAD_FRAME,
    EXIT_CONFINE_FAILED,
    EXIT_ORPHANED,
    MAX_ROOTS,
    POKED,
    FrameTooLarge,
    ProtocolError,
    encode,
    read_sole_frame,
    recv_frame_with_fds,
    send_bytes,
)
from corral.tool_table import TABLE
from corral.tools.base import Context
from corral.tools.encodings import preload
from corral.tools.registry import TOOLS, execute

# find_temps looks at this many entries per root at most: ~4 us each, so a sweep of a
# huge tree stays within a second or so (a temp past that many stays where it is).
SWEEP_MAX_ENTRIES = 250_000


class Setup(NamedTuple):
    """What every worker serves with; built once in the zygote from its SandboxSetup."""

    roots: Roots
    limits: Limits
    policy: Policy
    options: SandboxOptions
    context: Context
    store: Store | None  # this workspace's history store, None: history off or nothing to write

    @classmethod
    def open(cls, sandbox: SandboxSetup, policy: Policy) -> Setup:
        """Open the root fds (workers inherit them) and the history store."""
        durable = _durable(sandbox.options)
        opened = [
            Root(spec.path, mode=spec.mode, resolver=sandbox.options.resolver, durable=durable)
            for spec in sandbox.roots
        ]
        return cls._build(sandbox, opened, policy)

    @classmethod
    def adopt(cls, sandbox: SandboxSetup, fds: list[int]) -> Setup:
        """The same from root fds the host opened and sent (a shared pool's worker
        gets them with its setup), and the policy built of the setup's JSON text.
        Takes the fds: they are closed on failure, and by close() afterwards."""
        opened: list[Root] = []
        try:
            if len(fds) != len(sandbox.roots) or not fds:
                raise ValueError(f"{len(sandbox.roots)} roots came with {len(fds)} fds")
            # said here, plainly: confine() would refuse one later, by accident of its steps
            if not all(stat.S_ISDIR(os.fstat(fd).st_mode) for fd in fds):
                raise ValueError("a root fd that is not a directory came with it")
            durable = _durable(sandbox.options)
            for spec, fd in zip(sandbox.roots, fds, strict=True):
                opened.append(Root.from_fd(
                    fd, spec.path, mode=spec.mode, resolver=sandbox.options.resolver,
                    durable=durable,
                ))
            return cls._build(sandbox, opened, built_policy(sandbox))
        except BaseException:
            for fd in fds[len(opened):]:
                os.close(fd)
            for root in opened:
                root.close()
            raise

    @classmethod
    def _build(cls, sandbox: SandboxSetup, opened: list[Root], policy: Policy) -> Setup:
        roots = Roots(opened[0], opened[1:])
        writable = [root.path for root in opened if root.mode == "rw"]
        store = Store.open(sandbox.history, writable) if sandbox.history else None
        context = Context(roots, sandbox.limits, policy, history=store)
        return cls(roots, sandbox.limits, policy, sandbox.options, context, store)

    def confined_dirs(self) -> list[Any]:
        """What Landlock lets the worker reach: the roots, its work directory of the
        history store, and the kept directories of the roots it writes (read only:
        the records and copies of their changes, which only the host writes); not
        the store itself, nor what other sandboxes keep."""
        dirs: list[Any] = list(self.roots.all())
        if self.store is not None:
            dirs += [StoreDir(fd, mode="ro") for fd in (self.store.kept or {}).values()]
            dirs.append(StoreDir(self.store.fd))
        return dirs

    def close(self) -> None:
        """Close the root fds (the zygote's copies, once a worker has its own)."""
        for root in self.roots.all():
            root.close()
        if self.store is not None:
            self.store.close()


@dataclass(frozen=True)
class StoreDir:
    """A store directory as confine() sees a root: its fd, and its rights (mode
    "store": a work directory's, "ro": the records')."""

    fd: int
    path: str = ""
    mode: str = "store"


def _durable(options: SandboxOptions) -> bool:
    return options.durability != "none"


def built_policy(sandbox: SandboxSetup) -> Policy:
    """The policy of a setup, which crosses as JSON text (calls/control.py)."""
    return Policy.from_dict(json.loads(sandbox.policy))


def run(fd: int, setup: Setup | None, zygote_pid: int) -> int:
    """Confine this process, report the layers on `fd`, then serve; returns the exit
    code. `setup` None: a shared pool's worker, whose setup comes first on `fd`."""
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != zygote_pid:
        return EXIT_ORPHANED
    if setup is None:
        try:
            setup = receive_setup(fd)
        except Exception as exc:  # Malformed, or fds that do not match its roots
            send_bytes(fd, encode(BootReport(confine_error=f"its setup was refused: {exc}")
                                  .to_wire(), CONTROL_FRAME_BYTES))
            return EXIT_CONFINE_FAILED
        if setup is None:
            return 0  # the host closed the socket before it sent one
    try:
        preload(setup.policy.fallback_encodings)  # a confined worker cannot import a codec
        dirs = setup.confined_dirs()
        layers = confine(dirs, keep_fds=[fd, *(d.fd for d in dirs)], limits=setup.limits)
    except Exception as exc:
        _send(fd, BootReport(confine_error=f"{type(exc).__name__}: {exc}"), setup)
        return EXIT_CONFINE_FAILED
    layers["openat2"] = setup.roots.workspace.resolver == "openat2"
    # the roots it holds, so the host can check a worker serves the sandbox it asked for
    roots = tuple((root.path, root.mode) for root in setup.roots.all())
    _send(fd, BootReport(layers, os.getpid(), roots), setup)
    return serve(fd, setup)


def receive_setup(fd: int) -> Setup | None:
    """A shared pool's worker's setup, sent by the host on the worker's own socket with
    the root fds attached, and its policy built here: the zygote that forked this
    worker never sees it, so no worker inherits another sandbox's roots or rules.
    None at end of stream."""
    sock = socket.socket(fileno=fd)
    try:
        wire, fds = recv_frame_with_fds(sock, CONTROL_FRAME_BYTES, MAX_ROOTS)
    finally:
        sock.detach()  # the fd stays the worker's
    if wire is None:
        return None
    try:
        sandbox = SandboxSetup.from_wire(wire)
    except BaseException:
        for received in fds:
            os.close(received)
        raise
    return Setup.adopt(sandbox, fds)


def serve(fd: int, setup: Setup) -> int:
    """Answer frames until the broker closes the socket. A poke (the host saw a
    request coming) only wakes it: it polls for the request as after an answer,
    then sleeps again if none came."""
    # Everything the zygote loaded lives as long as the worker: the collector need not
    # walk it (a full collection over the preloaded modules is a latency spike, and
    # touching their headers copies shared pages into this process).
    gc.freeze()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        if setup.options.spin:
            _spin_for_request(poller)
        try:
            wire = read_sole_frame(fd, setup.options.max_frame_bytes, pokes=True)
        except ProtocolError:
            return EXIT_BAD_FRAME
        if wire is None:
            return 0
        if wire is POKED:
            continue
        request = request_from_wire(wire)
        _send(fd, answer(request, setup), setup, request)


def _spin_for_request(poller: select.poll) -> None:
    """Poll (yielding) until a request is readable or NEXT_REQUEST_SPIN_S passes; the
    caller's blocking read then takes it, or sleeps until it comes, as without this."""
    end = time.perf_counter() + NEXT_REQUEST_SPIN_S
    while not poller.poll(0) and time.perf_counter() < end:
        os.sched_yield()


def answer(request: ToWorker, setup: Setup) -> Answer | Removed | TempList:
    """One request's answer; the registry never raises (it gives each call its own
    Context)."""
    match request:
        case CallRequest():
            called = execute(setup.context, request)
            _say_if_a_root_was_removed(called, setup)
            return called
        case CleanupRequest():
            return Removed(request.id, clean_after(request, setup))
        case RemoveTemps():
            return Removed(request.id, remove_temps(request.temps, setup))
        case FindTemps():
            return TempList(request.id, find_temps(setup))
        case HistoryRequest():
            return history(request, setup)


def _say_if_a_root_was_removed(called: Answer, setup: Setup) -> None:
    """A not_found that comes from a root directory deleted under the running sandbox
    says so: "no such file or directory" alone sends an agent looking for the wrong
    thing, and one replaced (removed and made again) is not the sandbox's any more.
    (The workers keep the deleted directory open: nothing lands anywhere.)"""
    files = (called.result or {}).get("files") or []  # read_multiple_files
    errors = [
        error for error in [called.error, *(f.get("error") for f in files)]
        if isinstance(error, dict) and error.get("code") == "not_found"
    ]
    if not errors:
        return
    gone = [root for root in setup.roots.all() if os.fstat(root.fd).st_nlink == 0]
    if not gone:
        return
    what = (
        "the workspace directory" if gone[0] is setup.roots.workspace
        else f"the allowed directory {gone[0].given_path}"
    )
    for error in errors:
        error["message"] = (
            f"{error['message'].rstrip('.')}; {what} was removed while the sandbox was "
            "running (a directory made at its path since is another one, which only a new "
            "sandbox serves)."
        )


def clean_after(crash: CleanupRequest, setup: Setup) -> int:
    """Recover after a killed worker: settle its records, then remove the temp files
    it left in the directories its writing call aimed at. Best effort: returns how
    many temp files went."""
    tool = TOOLS.get(crash.tool) if isinstance(crash.tool, str) else None
    names = TABLE[tool.name].cleanup_arguments if tool is not None and tool.writes else ()
    beside = [path for name in names if isinstance(path := crash.arguments.get(name), str)]
    return _recover(setup, [crash.pid], beside=beside).removed


def find_temps(setup: Setup) -> tuple[tuple[int, str, int], ...]:
    """Every temp file in the writable roots: (root index, path, pid of its writer)."""
    found: list[tuple[int, str, int]] = []
    for index, root in enumerate(setup.roots.all()):
        if root.mode != "rw":
            continue
        with contextlib.suppress(CorralError):
            for count, entry in enumerate(root.walk("."), 1):
                if count > SWEEP_MAX_ENTRIES:
                    break
                pid = temp_owner(posixpath.basename(entry.path))
                if pid is not None and entry.type == "file":
                    found.append((index, entry.path, pid))
    return tuple(found)


def remove_temps(temps: tuple[tuple[int, str], ...], setup: Setup) -> int:
    """Recover after writers that died unseen: settle their records, then remove
    the named temp files ((root index, path) pairs); any other name is left alone.
    Best effort: returns how many."""
    owners = {temp_owner(posixpath.basename(path)) for _, path in temps}
    dead = sorted(pid for pid in owners if pid is not None)
    return _recover(setup, dead, temps=temps).removed


def _recover(setup: Setup, dead: list[int], *, beside: Sequence[str] = (),
             temps: Sequence[tuple[int, str]] = ()) -> recover.Recovered:
    return recover.recover(setup.roots, setup.store, setup.policy,
                           setup.limits.max_file_bytes, dead, beside=beside, temps=temps)


def history(request: HistoryRequest, setup: Setup) -> Answer:
    """undo, rewind or settle: an answer, never an exception."""
    op, tool = request.op, request.tool
    try:
        if setup.policy.read_only or not any(r.mode == "rw" for r in setup.roots.all()):
            raise CorralError("read_only", f"this sandbox is read-only: nothing to {op}.")
        if setup.store is None:
            raise CorralError("invalid_arguments", "history is not enabled for this sandbox.")
        if op == "settle":
            result: dict[str, Any] = {"settled": _recover(setup, list(request.pids)).settled}
        elif op == "undo" and request.path is not None:
            result = restore.undo(setup.roots, setup.store, setup.policy, setup.limits,
                                  request.path, request.force)
        elif op == "rewind" and request.to is not None:
            result = restore.rewind(setup.roots, setup.store, setup.policy, setup.limits,
                                    request.to, request.force)
        elif op in snapshot_walk.OPS:
            result = snapshot_walk.run(op, request.to, setup.roots, setup.store, setup.policy,
                                       setup.limits.max_file_bytes)
        else:
            raise CorralError("invalid_arguments", f"unknown history operation {op!r}.")
    except CorralError as error:
        return error_answer(tool, error, id=request.id)
    except Exception as error:  # the worker must answer every request
        why = os.strerror(error.errno) if isinstance(error, OSError) and error.errno else (
            type(error).__name__)
        return error_answer(tool, "io_error", f"{op} failed: {why}.", id=request.id)
    finally:
        if setup.store is not None:
            setup.store.release()
    # the records it made, for the host to promote (a rewind's checkpoint first, its
    # closing record last: not one of the changes its answer lists)
    made = [result["checkpoint"]] if "checkpoint" in result else []
    closing = list(result.pop("closing", ()))
    meta = Meta(history_ids=tuple(made + list(result.get("records", ())) + closing))
    return Answer(True, tool, result, "", meta=meta, id=request.id)


def _send(
    fd: int, message: Answer | Removed | TempList | BootReport, setup: Setup,
    request: ToWorker | None = None,
) -> None:
    limit = setup.options.max_frame_bytes
    try:
        frame = encode(message.to_wire(), limit, finite=True)  # its floats are stat times
    except ProtocolError as exc:
        frame = encode(_unsendable(request, exc).to_wire(), limit)
    send_bytes(fd, frame)


def _unsendable(request: ToWorker | None, exc: ProtocolError) -> Answer:
    """A result that cannot travel becomes an error result, not a dead worker."""
    code = "too_large" if isinstance(exc, FrameTooLarge) else "io_error"
    tool = request.tool if isinstance(request, CallRequest | HistoryRequest) else None
    return error_answer(tool, code, f"The result cannot be returned: {exc}.",
                        id=0 if request is None else request.id)
