"""Sandbox / AsyncSandbox: the public face (a recipe over the sandbox layer).

`_BaseSandbox` holds what both share: settings, roots, tools, the audit log it
may own, history, confinement and lifecycle. A call is a `CallFlow` (flow.py);
`Sandbox` drives it with blocking calls, `AsyncSandbox` with awaits, and the
line and HTTP faces drive it themselves through `Sandbox.run`.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import stat
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from msgspec.structs import replace

from corral.audit import Audit
from corral.calls.messages import Answer, CallRequest, HistoryRequest, error_answer
from corral.calls.waiting import PLAIN, WaitPolicy
from corral.config import (
    AuditOptions,
    Config,
    ConfigError,
    HistoryOptions,
    Limits,
    QuotaOptions,
    Remedy,
    SandboxOptions,
    load_config,
    resolve_roots,
)
from corral.errors import CorralError
from corral.history.host import History
from corral.history.location import StoreInsideRoot, check_location, default_base
from corral.history.relink import remake_links, remake_snapshot_links
from corral.host.checkpoints import Around, Checkpoints
from corral.host.flow import NO_ONE_TO_ASK, Approval, CallFlow, CallPlan, NoApprover, adrive, drive
from corral.host.grants import Grants
from corral.host.ledger import FORCE_HINT, Ledger
from corral.host.lifecycle import Lifecycle
from corral.host.quota import Quotas, QuotaUsage
from corral.observe import Observer
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker, Executor
from corral.tools.formats import FORMATS, strict_schema
from corral.tools.registry import TOOLS
from corral.trust import narrowed

__all__ = [
    "FORCE_HINT", "NO_ONE_TO_ASK", "Approval", "Approver", "AsyncSandbox", "NoApprover", "Sandbox",
]

HISTORY_OFF = "history is off for this sandbox ([history] enabled = false)"
# the tools whose records the history may hold: a record no call named (history.sweep)
# of any other tool is refused
RECORDING_TOOLS = frozenset([*(name for name, tool in TOOLS.items() if tool.writes),
                             "undo", "rewind"])
log = logging.getLogger("corral")
_warned: set[str] = set()  # workspaces whose default-store warning this process logged
_warned_lock = threading.Lock()


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the directory at `path`; None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def default_store_inside(options: HistoryOptions, roots: Sequence[str]) -> str | None:
    """Why history is off when the *default* store lies inside a root (a home folder
    as the workspace holds ~/.local/state): a first run works, without history,
    rather than fail. None otherwise; a store the operator named inside a root
    stays a ConfigError (History refuses it)."""
    if not options.enabled or options.path is not None:
        return None
    try:
        check_location(None, list(roots))
    except StoreInsideRoot:
        return (
            f"history is off: the default history store {os.path.realpath(default_base())} "
            "lies inside a root of this sandbox, where tools could reach it; to record "
            "changes, set [history] path to a directory outside every root in a config "
            "passed with --config (Python: history=HistoryOptions(path=...))"
        )
    return None


def check_history_path(options: HistoryOptions, roots: Sequence[str]) -> None:
    """ConfigError if the store the operator named would lie inside a root, before
    anything starts (the default store there turns history off instead:
    default_store_inside). The fix must come from the operator, never from the
    workspace's own corral.toml."""
    if options.enabled and options.path is not None:
        try:
            check_location(options.path, list(roots))
        except StoreInsideRoot as inside:
            raise _inside_root(inside) from None


def _inside_root(inside: StoreInsideRoot) -> ConfigError:
    """The history's refusal of a store inside a root, said as the config error it is."""
    return ConfigError(
        f"{inside}; set [history] path to a directory outside every root, or [history] "
        "enabled = false", key="[history] path",
        remedy=Remedy("operator", ("[history] path", "[history] enabled")),
    )

def probe() -> dict[str, Any]:
    """The confinement layers this kernel offers (`corral doctor` sets them beside
    what a worker got: Sandbox.confinement). Imported when asked: the probe's
    modules (Landlock, seccomp) are the zygote's, ~20 ms the host need not load."""
    from corral.sandbox.probe import probe as kernel

    return kernel()


def mount_namespace_refusal() -> str | None:
    """Why a worker can have no mount namespace here, as the kernel said it; None
    if it can (for `corral doctor`)."""
    from corral.sandbox.probe import mount_namespace_refusal as refusal

    return refusal()


Approver = Callable[[dict[str, Any]], Any]  # the approve callback, asked at each Approve step
# What starts a sandbox's executor: a private pool (Broker), or a lane of a shared one.
StartExecutor = Callable[..., Executor]
S = TypeVar("S", bound="_BaseSandbox")
T = TypeVar("T")


def _warn_once(workspace: str, why: str) -> None:
    with _warned_lock:
        if workspace in _warned:
            return
        _warned.add(workspace)
    log.warning("corral: %s", why)


def _start_executor(
    roots: Sequence[RootSpec], limits: Limits, policy: Policy, options: SandboxOptions,
    history: str | None = None, observer: Observer | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> Executor:
    """The one place that decides where tools run: confined workers, never the host."""
    return Broker(roots, limits, policy, options, history, observer=observer,
                  meanwhile=meanwhile)


def _open_audit(audit: str | os.PathLike[str] | Audit | AuditOptions | None,
                roots: Sequence[str]) -> tuple[Audit | None, bool]:
    """(the audit log, whether this sandbox owns it and closes it). Its key must lie
    outside every root: a worker may read anything in one."""
    if audit is None:
        return None, False
    if isinstance(audit, Audit):
        opened, owned = audit, False
    elif isinstance(audit, AuditOptions):
        if audit.path is None:
            return None, False
        opened = Audit(audit.path, key_file=audit.key_file, max_bytes=audit.max_bytes)
        owned = True
    else:
        opened, owned = Audit(audit), True
    key = opened.key_file  # a real path
    real_roots = [os.path.realpath(root) for root in roots]
    inside = next((r for r in real_roots if key and os.path.commonpath((key, r)) == r), None)
    if inside is not None:
        if owned:
            opened.close()
        raise ValueError(f"the audit key file {key} lies inside the root {inside}, where a "
                         "worker could read it; keep [audit] key_file outside every root")
    return opened, owned


class _BaseSandbox:
    """Settings, roots, tools, confinement and lifecycle (see Sandbox's docstring)."""

    # What starts the executor, and the corral.toml already trusted or applied:
    # from_config and corral.Pool set them on the instance before __init__ (_made).
    _start: StartExecutor = staticmethod(_start_executor)
    _trusted: str | None = None

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        policy: Policy | None = None,
        limits: Limits | None = None,
        workers: int | None = None,
        approve: Approver | None = None,
        audit: str | os.PathLike[str] | Audit | AuditOptions | None = None,
        allowed_paths: Sequence[RootSpec] = (),
        options: SandboxOptions | None = None,
        history: HistoryOptions | None = None,
        quota: QuotaOptions | None = None,
        quota_usage: QuotaUsage | None = None,
        observer: Observer | None = None,
    ) -> None:
        policy = policy if policy is not None else Policy()
        options = options if options is not None else SandboxOptions()
        if workers is not None:
            options = dataclasses.replace(options, workers=workers)
        real, others = resolve_roots(workspace, allowed_paths, read_only=policy.read_only)
        # The arguments are the operator's; the workspace's own corral.toml may only
        # narrow them (ConfigError before anything starts), as on the command line.
        config = narrowed(Config(
            real, others, policy, limits if limits is not None else Limits(), options,
            quota=quota if quota is not None else QuotaOptions(),
        ), self._trusted)
        self._limits, self._options, self._roots = config.limits, config.sandbox, config.roots
        # the directory at the workspace's path now, which this sandbox serves for good
        self._workspace_id = _identity(self._roots[0].path)
        self._quota = config.quota
        # Counted in the host, where no worker reaches; shared if the host shares the usage.
        self._quotas = Quotas(
            config.quota, quota_usage if quota_usage is not None else QuotaUsage(), self._limits,
            [root.path for root in self._roots],
        ) if config.quota.bounded else None
        self._approve = approve
        self._observer = observer
        self._audit, self._owns_audit = _open_audit(audit, [r.path for r in self._roots])
        self._policy = config.policy
        if self._audit is not None:  # no tool may rewrite the log of what tools did
            self._policy = self._policy.protecting(os.path.realpath(self._audit.path))
        self._lifecycle = Lifecycle()
        history = history if history is not None else HistoryOptions()
        root_paths = [r.path for r in self._roots]
        self._history_off = default_store_inside(history, root_paths)
        if self._history_off is not None:
            _warn_once(real, self._history_off)
            history = dataclasses.replace(history, enabled=False)
        elif not history.enabled:
            self._history_off = HISTORY_OFF
        try:
            self._history = History(
                history, real, root_paths,
                writable=[r.path for r in self._roots if r.mode == "rw"],
            ) if history.enabled else None
        except StoreInsideRoot as inside:
            self._close_logs()
            raise _inside_root(inside) from None
        except CorralError as error:  # the history store cannot be used
            self._close_logs()
            raise ValueError(error.message) from None
        self._checkpoints = _checkpoints(history, self._history, self._roots, self._policy,
                                         self._limits.timeout_s)
        self._grants = Grants(self._policy, self._roots)
        self._ledger = Ledger(self._policy, self._audit, self._history, self._grants)
        # What a call's steps need of the sandbox is fixed from here on, so the plans
        # (by can_ask and raw) are made once, not one per call.
        self._plans = {
            (can_ask, raw): CallPlan(
                self._policy, self._roots[0].path, can_ask, self._ledger.seen_for, raw,
                self._quotas, grants=self._grants, decided=self._ledger.approval,
                observer=self._observer,
            )
            for can_ask in (False, True) for raw in (False, True)
        }
        store = self._history
        try:
            self._executor = self._start(
                self._roots, self._limits, self._policy, self._options,
                history=store.work_path if store is not None else None, observer=observer,
                meanwhile=store.meanwhile if store is not None else None,
            )
            self._settle()
        except BaseException:
            self._close_logs()
            raise

    @classmethod
    def _made(cls: type[S], start: StartExecutor, trusted: str | None,
              arguments: dict[str, Any]) -> S:
        """A sandbox whose executor `start` makes (corral.Pool's lanes); `trusted`: a
        corral.toml the operator named, or one already applied."""
        sandbox = cls.__new__(cls)
        sandbox._start, sandbox._trusted = start, trusted
        sandbox.__init__(**arguments)  # type: ignore[misc]
        return sandbox

    @classmethod
    def from_config(cls: type[S], path: str | os.PathLike[str] | Config, **kwargs: Any) -> S:
        """A sandbox as corral.toml describes it; keyword arguments win over the file.
        The file is the operator's and trusted wherever it lies; the workspace's
        own corral.toml, if it is another file, narrows it. A Config (e.g.
        corral.trust.operator_config's, with that file applied) is taken as it is."""
        return cls._made(_start_executor, *_config_arguments(path, kwargs))

    # -- what a call is -------------------------------------------------------------

    def tools(self, format: str | None = None, strict: bool = False) -> list[dict[str, Any]]:
        """Specs of the tools the policy lets a model see: corral's own shape, or with
        `format` ("mcp", "openai", "openai-responses", "anthropic") the shape that
        provider takes, as `corral tools --format F [--strict]` prints it. `strict`:
        schemas for strict tool calling. No I/O, so AsyncSandbox's is not awaited."""
        if format is not None and format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
        specs = [
            tool.spec() for tool in TOOLS.values()
            if self._policy.tool_mode(tool.name, writes=tool.writes) != "deny"
        ]
        if format is not None:
            return [FORMATS[format](spec, strict) for spec in specs]
        if strict:
            for spec in specs:
                spec["input_schema"] = strict_schema(spec["input_schema"])
        return specs

    def flow(
        self, tool: Any, arguments: Any = None, *, within: Sequence[str] | None = None,
        can_ask: bool | None = None, raw: bool = False,
    ) -> CallFlow:
        """One call as steps to drive (flow.CallFlow); `call` drives it for you.
        can_ask: whether the driver can answer Approve steps (default: this
        sandbox has an approve callback); if not, a supervised call fails
        approval_required without asking. raw: for a driver that writes the result
        out as JSON: a large text read's `text` and `result["content"]` may come
        back as JSON text (msgspec.Raw, which msgspec writes out as it is), passed
        on from the worker without being decoded and encoded again."""
        arguments = {} if arguments is None else arguments
        plan = self._plans[
            self._approve is not None if can_ask is None else bool(can_ask), bool(raw)]
        started = time.monotonic()
        call = object()
        if self._history is not None:
            self._history.calling(call)
        return CallFlow(
            plan.steps(tool, arguments, within),
            lambda answer: self._finish(answer, arguments, started, call),
        )

    # -- remembered approvals ------------------------------------------------------

    def approvals(self) -> list[dict[str, Any]]:
        """The grants remembered approvals made, oldest first: {"id", "tool", "root"
        (None for a rule grant), "path" (root-relative, resolved) or "rule" (None:
        what the tool's mode or the default action supervises), "created", "uses"}.
        No I/O, so AsyncSandbox's is not awaited."""
        return self._grants.listed()

    def forget(self, grant_id: str | None = None) -> int:
        """Drop the grant `grant_id`, or every grant: how many were dropped (0: no
        such grant). A call already on its way may still go through by it."""
        return self._grants.forget(grant_id)

    def _finish(self, answer: Answer, arguments: Any, started: float,
                call: object) -> dict[str, Any]:
        """The call's result (Ledger.finish), its end told to the observer."""
        result = self._ledger.finish(answer, arguments, started)
        if self._history is not None:
            self._history.answered(call)
        if self._observer is not None:
            code = answer.error["code"] if answer.error else "ok"
            self._observer.on_call(answer.tool, code, time.monotonic() - started)
        return result

    # -- history -----------------------------------------------------------------

    def _history_store(self) -> History:
        """The store; checkpoint() without one is the host's mistake, so it raises."""
        if self._history is None:
            raise CorralError(
                "tool_disabled", f"checkpoint needs history, but {self._history_off}.")
        return self._history

    def _restoring(self, op: str, **fields: Any) -> HistoryRequest | Answer:
        """The worker request for undo/rewind, or, with history off, the error answer
        a disabled tool gives."""
        if self._history is None:
            return error_answer(op, CorralError(
                "tool_disabled",
                f"nothing to {op}: {self._history_off}, so no change was recorded."))
        self._settle()  # a crash's records first: they may be the newest
        return HistoryRequest(op, **fields)

    def _settle(self) -> None:
        """Make the history agree with the tree: a worker settles the records of writers
        killed mid-call (a host's, whose workers may outlive it by a moment, or a
        worker the pool lost), then the host commits what is done; then a
        whole-workspace rewind a killed host left part-way is finished
        (Checkpoints.settle). Run as the sandbox opens, before any call. Blocks on
        a worker only when there is such a record, which is rare."""
        self._settle_records()
        if self._checkpoints is not None:
            since = time.time()
            finished = self._checkpoints.settle(self._executor.submit, self._around)
            if finished is not None:  # its records committed, and an audit line for it
                self._ledger.history_result(*finished, since)

    @property
    def _around(self) -> Around:
        return Around(self._settle_records, self._relinked, self._snapshot_linked)

    def _settle_records(self) -> None:
        if self._history is None:
            return
        if dead := self._history.dead_writers():
            self._executor.submit(HistoryRequest("settle", pids=tuple(dead)))
        self._history.sweep(dead, RECORDING_TOOLS)

    def _relinked(self, answer: Answer) -> Answer:
        """An undo's or a rewind's answer with the deleted links it asked for made
        again by the host (a worker cannot make a link: history/relink.py)."""
        if self._history is None or not answer.ok or not isinstance(answer.result, dict):
            return answer
        result = dict(answer.result)
        made = remake_links(self._history.work_path, result, answer.tool, self._roots,
                            self._policy)
        meta = replace(answer.meta, history_ids=(*answer.meta.history_ids, *made))
        return answer._replace(result=result, meta=meta)

    def _snapshot_linked(self, answer: Answer, checkpoint: str) -> Answer:
        """A forced snapshot rewind's answer with the snapshot's symlinks that were
        removed behind corral's back made again by the host (history/relink.py)."""
        if (self._history is None or self._checkpoints is None or not answer.ok
                or not isinstance(answer.result, dict)):
            return answer
        result = dict(answer.result)
        skipped = [skip.get("path") for skip in result.get("skipped") or []
                   if isinstance(skip, dict) and skip.get("reason") == "link"]
        links = self._checkpoints.links_of(checkpoint, skipped)
        made = remake_snapshot_links(self._history.work_path, result, self._roots[0].path,
                                     links, self._roots, self._policy)
        meta = replace(answer.meta, history_ids=(*answer.meta.history_ids, *made))
        return answer._replace(result=result, meta=meta)

    def _checkpoint(self, label: str | None) -> str:
        with self._lifecycle.active():
            store = self._history_store()
            if self._checkpoints is None:
                return store.checkpoint(label)
            return self._checkpoints.checkpoint(self._executor.submit, label)

    def _diff(self, checkpoint: str) -> dict[str, list[dict[str, str]]]:
        with self._lifecycle.active():
            self._history_store()
            if self._checkpoints is None:
                raise CorralError("tool_disabled", "diff needs snapshots of a writable "
                                  "workspace ([history] snapshots = true).")
            self._settle()
            return self._checkpoints.diff(self._executor.submit, checkpoint)

    def _snapshot_rewind(self, checkpoint: str, force: bool) -> dict[str, Any] | None:
        """A rewind to a checkpoint that has a snapshot (None: it has none)."""
        if self._checkpoints is None or not self._checkpoints.has(checkpoint):
            return None
        with self._lifecycle.active():
            self._settle()
            since = time.time()
            try:
                answer = self._checkpoints.rewind(self._executor.submit, checkpoint, force,
                                                  self._around)
            except CorralError as error:
                answer = error_answer("rewind", error)
            return self._ledger.history_result(answer, checkpoint, since)

    def _entries(self, path: str | None, limit: int) -> list[dict[str, Any]]:
        with self._lifecycle.active():
            self._settle()
            return [] if self._history is None else self._history.entries(path, limit)

    # -- settings ---------------------------------------------------------------

    @property
    def confinement(self) -> dict[str, Any]:
        return self._executor.confinement

    @property
    def roots(self) -> tuple[RootSpec, ...]:
        return self._roots

    @property
    def history_off(self) -> str | None:
        """None while changes are recorded; else why history is off."""
        return self._history_off

    @property
    def last_snapshot(self) -> dict[str, Any] | None:
        """What this sandbox's last checkpoint snapshot held and cost: {"checkpoint",
        "entries", "walked", "read_bytes" (file bytes its worker read), "stored_bytes"
        (new in the store)}; None before one (or without snapshots)."""
        return None if self._checkpoints is None else self._checkpoints.last

    @property
    def history_path(self) -> str | None:
        """The directory of the workspace's history store; None while history is off."""
        return None if self._history is None else self._history.path

    def pids(self) -> dict[str, Any]:
        """The zygote's and the workers' pids, now: {"zygote": pid, "workers": [pid, ...]}."""
        return self._executor.pids()

    def wake(self) -> None:
        """A call is about to come (a face has read a request off the wire): the idle
        worker it will run on, if it has gone to sleep, is woken now, so its wake-up
        overlaps the host's parsing of the request. Only ever a matter of speed; a
        no-op on a closed sandbox, in a shared pool, or with `[sandbox] spin = false`."""
        self._executor.wake()

    def stats(self) -> dict[str, int]:
        """This sandbox's share of its pool now: {"workers": alive, "idle_workers",
        "busy_workers": running a call, "queued_calls": waiting for a worker}."""
        return self._executor.stats()

    @property
    def policy(self) -> Policy:
        """The policy in effect (with the protected audit log and config added)."""
        return self._policy

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def quota(self) -> QuotaOptions:
        """The quotas in effect (the workspace's corral.toml may have lowered them)."""
        return self._quota

    def _workspace_replaced(self) -> bool:
        """Whether another directory is at the workspace's path now (this sandbox's
        was removed or moved, and one made there since): a face that serves a
        configured path, not a directory, opens a new sandbox for it, as a restart
        would. One stat; False while nothing (or no directory) is there."""
        now = _identity(self._roots[0].path)
        return now is not None and now != self._workspace_id

    # -- lifecycle ----------------------------------------------------------------

    def stop_calls(self) -> None:
        """End the calls in flight at once (a ^C to a server): their workers are
        killed and each ends with worker_crashed; close() then waits for none."""
        self._executor.stop_calls()

    def _close(self) -> None:
        if self._lifecycle.shut():
            try:
                self._executor.close()
            finally:
                self._close_logs()

    def _close_logs(self) -> None:
        if self._owns_audit and self._audit is not None:
            self._audit.close()
        checkpoints: Checkpoints | None = getattr(self, "_checkpoints", None)
        if checkpoints is not None:
            checkpoints.close()
        history: History | None = getattr(self, "_history", None)  # unset if it failed
        if history is not None:
            history.close()


class Sandbox(_BaseSandbox):
    """File tools confined to a workspace. Thread-safe; close it (or use `with`).

    `approve(request) -> bool | Approval` is asked before a supervised call (a
    tool in mode "supervised", or a path a "supervised" rule matches) acts, once
    its paths are resolved: {"tool", "arguments", "paths" (as given), "resolved"
    (absolute), "rules" (None: the tool's mode), "targets" ([{"root", "path"
    (root-relative, resolved), "given", "rule", "shown" (one line to show),
    "size" (None: no such file)}]), "diff" (a change's, bounded; else None)},
    strings escaped (control characters, backslashes). `Approval(True,
    remember="path"|"rule")` also grants the tool those paths, or that rule's,
    for the sandbox's life (`approvals()`, `forget()`). A call that touches
    several paths (move, copy) may ask more than once; a path that resolves
    differently when the call runs is asked about again. No callback:
    approval_required; a refusal: approval_denied.
    `allowed_paths` (RootSpec list) and `options` (SandboxOptions) come from
    corral.toml with `from_config`; they may be given here too.
    `quota` (QuotaOptions: [quota]) bounds calls, bytes written and files created
    in a sliding window; a call over it fails quota_exceeded with retry_after_s.
    Sandboxes given the same `quota_usage` (corral.QuotaUsage) share its
    counters, as a tenant's sessions do; by default each has its own.
    `observer` (corral.observe.Observer) hears of its calls, approvals and the
    deaths of its workers.
    """

    def call(
        self, tool: str, arguments: dict[str, Any] | None = None, *,
        within: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Run one tool; a failure comes back as {"ok": false, "error": ...}.
        `within` (absolute paths) narrows this call: a path that resolves outside
        every one of them fails `path_denied`. The roots stay the outer bound."""
        return self.run(self.flow(tool, arguments, within=within))

    def run(
        self, flow: CallFlow, *, approve: Approver | None = None, wait: WaitPolicy = PLAIN,
    ) -> dict[str, Any]:
        """Drive `flow` to its result: its requests run in confined workers (waiting
        as `wait` says), its Approve steps go to `approve` (default: the sandbox's
        callback), which may raise NoApprover when nobody can be asked."""
        ask = approve if approve is not None else self._approve

        def approved(request: dict[str, Any]) -> Approval | bool | NoApprover:
            if ask is None:  # a flow made with can_ask=True but nothing to ask
                return NoApprover()
            with self._lifecycle.waiting():
                try:
                    return _decision(ask(request))
                except NoApprover as nobody:
                    return nobody

        with self._lifecycle.active():
            return drive(flow, lambda request: self._executor.submit(request, wait), approved)

    def submit(self, request: CallRequest, wait: WaitPolicy = PLAIN) -> Answer:
        """Run one Submit step's request in a confined worker, for a host that steps
        a CallFlow itself (`run` does this for you)."""
        with self._lifecycle.active():
            return self._executor.submit(request, wait)

    # -- history: nothing lost ----------------------------------------------------

    def checkpoint(self, label: str | None = None) -> str:
        """Mark the tree's state now; returns the id rewind() takes back to it."""
        return self._checkpoint(label)

    def history(self, path: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Recorded changes (and checkpoints, without a path), newest first;
        [] with history off (nothing is recorded)."""
        return self._entries(path, limit)

    def undo(self, path: str, *, force: bool = False) -> dict[str, Any]:
        """Revert the last recorded change of `path` (in a confined worker)."""
        return self._restore(self._restoring("undo", path=path, force=force), path)

    def rewind(self, checkpoint: str, *, force: bool = False) -> dict[str, Any]:
        """Every path changed since `checkpoint` back to its state then; with a
        snapshot, changes by others too (a conflict unless `force`)."""
        whole = self._snapshot_rewind(checkpoint, force)
        if whole is not None:
            return whole
        return self._restore(self._restoring("rewind", to=checkpoint, force=force), checkpoint)

    def diff(self, checkpoint: str) -> dict[str, list[dict[str, str]]]:
        """What changed since the snapshot `checkpoint`: {"changed", "added",
        "removed"}, each [{"path", "by": "corral" | "other"}]."""
        return self._diff(checkpoint)

    def _restore(self, request: HistoryRequest | Answer, target: str) -> dict[str, Any]:
        with self._lifecycle.active():
            since = time.time()  # what it records is checked to be no older
            answer = request if isinstance(request, Answer) else self._executor.submit(request)
            return self._ledger.history_result(self._relinked(answer), target, since)

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSandbox(_BaseSandbox):
    """The same surface with `await sb.call(...)`; calls run concurrently. The
    approve callback may be a coroutine function."""

    async def call(
        self, tool: str, arguments: dict[str, Any] | None = None, *,
        within: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        return await self.run(self.flow(tool, arguments, within=within))

    async def run(
        self, flow: CallFlow, *, approve: Approver | None = None, wait: WaitPolicy = PLAIN,
    ) -> dict[str, Any]:
        """Sandbox.run with awaits; cancelling the awaiting task cancels the call."""
        ask = approve if approve is not None else self._approve

        async def approved(request: dict[str, Any]) -> Approval | bool | NoApprover:
            if ask is None:
                return NoApprover()
            with self._lifecycle.waiting():
                try:
                    answer = ask(request)
                    if inspect.isawaitable(answer):
                        answer = await answer
                    return _decision(answer)
                except NoApprover as nobody:
                    return nobody

        def submit(request: CallRequest) -> Awaitable[Answer]:
            return self._executor.asubmit(request, wait)

        with self._lifecycle.active():
            return await adrive(flow, submit, approved)

    async def submit(self, request: CallRequest, wait: WaitPolicy = PLAIN) -> Answer:
        """Sandbox.submit with an await."""
        with self._lifecycle.active():
            return await self._executor.asubmit(request, wait)

    async def checkpoint(self, label: str | None = None) -> str:
        return await _to_thread(self._checkpoint, label)

    async def history(self, path: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return await _to_thread(self._entries, path, limit)

    async def undo(self, path: str, *, force: bool = False) -> dict[str, Any]:
        return await self._restore(self._restoring("undo", path=path, force=force), path)

    async def rewind(self, checkpoint: str, *, force: bool = False) -> dict[str, Any]:
        whole = await _to_thread(self._snapshot_rewind, checkpoint, force)
        if whole is not None:
            return whole
        return await self._restore(
            self._restoring("rewind", to=checkpoint, force=force), checkpoint)

    async def diff(self, checkpoint: str) -> dict[str, list[dict[str, str]]]:
        return await _to_thread(self._diff, checkpoint)

    async def _restore(self, request: HistoryRequest | Answer, target: str) -> dict[str, Any]:
        with self._lifecycle.active():
            since = time.time()
            answer = request if isinstance(request, Answer) else (
                await self._executor.asubmit(request))
            answer = await _to_thread(self._relinked, answer)
            return self._ledger.history_result(answer, target, since)

    async def aclose(self) -> None:
        # Waiting for running calls blocks; do it off the event loop they run on.
        await _to_thread(self._close)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _checkpoints(options: HistoryOptions, history: History | None,
                 roots: Sequence[RootSpec], policy: Policy,
                 timeout_s: float) -> Checkpoints | None:
    """Whole-workspace snapshots, where checkpoints take them: history on and
    `snapshots`, and a workspace root this sandbox may write."""
    if history is None or not options.snapshots or history.work_path is None or (
            roots[0].mode != "rw" or policy.read_only):
        return None
    # a third of the timeout for copies: the walk's stat of the tree comes on top
    return Checkpoints(history, roots[0].path, (*policy.ignore, *options.snapshot_ignore),
                       budget_s=timeout_s / 3, watch=options.snapshot_watch)


def _config_arguments(
    path: str | os.PathLike[str] | Config, overrides: dict[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """(the corral.toml already trusted or applied, Sandbox's arguments)."""
    config = path if isinstance(path, Config) else load_config(path)
    arguments: dict[str, Any] = {
        "workspace": config.workspace,
        "policy": config.policy,
        "limits": config.limits,
        "options": config.sandbox,
        "allowed_paths": config.allowed_paths,
        "audit": AuditOptions(config.audit_path, config.audit_key_file, config.audit_max_bytes)
        if config.audit_path else None,
        "history": config.history,
        "quota": config.quota,
    }
    arguments.update(overrides)
    return config.narrowed_by or config.source, arguments


def _decision(reply: Any) -> Approval | bool:
    """An approve callback's reply, which must be a bool or an Approval: a truthy
    anything else (input()'s "n", say) must not approve."""
    if not isinstance(reply, bool | Approval):
        raise TypeError(
            f"approve() must return a bool or a corral.Approval, not {type(reply).__name__}")
    return reply


async def _to_thread(fn: Callable[..., T], *args: Any) -> T:
    """asyncio.to_thread, imported here: asyncio is a fifth of what a blocking
    Sandbox (`corral call`) would import, and whoever awaits has loaded it already."""
    import asyncio

    return await asyncio.to_thread(fn, *args)
