"""Sandbox / AsyncSandbox: the public face (a recipe over the sandbox layer).

As in httpx, one core holds every step that does no I/O: tool lookup, tool
modes, argument validation, the approval flow, audit records and stripping
the worker's meta. The core is written as a generator that yields what it
needs done ("submit" a request to the executor, "approve" a request with the
host's callback) and receives the answer, so `Sandbox` and `AsyncSandbox`
only drive it, one with plain calls and one with awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import os
import posixpath
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

from corral.audit import Audit
from corral.config import Config, HistoryOptions, Limits, SandboxOptions, load_config, resolve_roots
from corral.errors import CorralError
from corral.history.host import History
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker
from corral.tools.access import (
    TOOL_MODE_RULE,  # audit rule of a call its tool's mode decided
    approval_key,
)
from corral.tools.registry import TOOLS, error_result, lookup, shown_name, validate
from corral.tools.render import escaped
from corral.trust import narrowed

MAX_APPROVAL_ROUNDS = 4  # asks per call: move/copy name two paths, each may need a yes
PATH_ARGUMENTS = ("path", "source", "destination")  # argument names that hold one path
READ_ONLY_RULE = "read-only"  # audit rule of a writer refused because the sandbox is read_only
NO_ONE_TO_ASK = " and nothing here can ask for it"  # approval_required: no approve callback
# undo/rewind left a conflict alone: the Python spelling, which the CLI replaces with its own
FORCE_HINT = "Pass force=True to restore a conflicting path anyway."
# read_before_write: the tools whose results tell which version a session read or wrote,
# and the writers that need one
SESSION_TOOLS = ("read_file", "read_multiple_files", "write_file", "edit_file")
SESSION_WRITERS = ("write_file", "edit_file", "append_file")
HISTORY_OFF = "history is off for this sandbox ([history] enabled = false)"

Approve = Callable[[dict[str, Any]], Any]
Step = tuple[str, dict[str, Any]]  # ("submit" | "approve", payload)
Flow = Generator[Step, Any, dict[str, Any]]


class NoApprover(Exception):
    """Raised by an approve callback when nobody can answer this request (an MCP
    client that cannot be asked): the call fails `approval_required`, as it does
    with no callback at all; `hint` says what would let someone be asked."""

    def __init__(self, hint: str = "") -> None:
        super().__init__(hint)
        self.hint = hint


def _start_executor(
    roots: Sequence[RootSpec], limits: Limits, policy: Policy, options: SandboxOptions,
    history: str | None = None,
) -> Any:
    """The one place that decides where tools run: confined workers, never the host."""
    return Broker(roots, limits, policy, options, history)


def _paths(arguments: dict[str, Any]) -> list[str]:
    """The paths a call names, normalised lexically (for an approval prompt)."""
    named = [arguments[key] for key in PATH_ARGUMENTS if isinstance(arguments.get(key), str)]
    named += [p for p in arguments.get("paths") or () if isinstance(p, str)]
    return [posixpath.normpath(p) for p in named]


def _target(need: dict[str, Any], workspace: str) -> dict[str, Any]:
    """One path needing approval, as approve() sees it (see _Core._request)."""
    root, path, given = need["root"], need["resolved"], need["path"]
    absolute = posixpath.join(root, path) if path != "." else root
    shown = path if root == workspace else absolute
    if posixpath.normpath(given) not in (path, absolute):
        shown += f" (given as {given})"  # tpl/../deploy.yml through a symlink, say
    return {
        "root": escaped(root), "path": escaped(path), "given": escaped(given),
        "rule": need.get("rule") or None, "shown": escaped(shown),
    }


class _Core:
    """Everything a call does except running the tool and asking the host."""

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        policy: Policy | None,
        limits: Limits | None,
        workers: int | None,
        approve: Approve | None,
        audit: str | os.PathLike[str] | Audit | None,
        allowed_paths: Sequence[RootSpec],
        options: SandboxOptions | None,
        history: HistoryOptions | None,
        trusted: str | None = None,
    ) -> None:
        policy = policy if policy is not None else Policy()
        options = options if options is not None else SandboxOptions()
        if workers is not None:
            options = dataclasses.replace(options, workers=workers)
        real, others = resolve_roots(workspace, allowed_paths, read_only=policy.read_only)
        # The arguments are the operator's; the workspace's own corral.toml may only
        # narrow them (ConfigError before anything starts), as on the command line.
        config = narrowed(Config(
            real, others, policy, limits if limits is not None else Limits(), options
        ), trusted)
        self.policy, self.limits, self.options = config.policy, config.limits, config.sandbox
        self.roots = config.roots
        self.approve = approve
        self._owns_audit = audit is not None and not isinstance(audit, Audit)
        self.audit = Audit(audit) if self._owns_audit else audit  # type: ignore[arg-type]
        if self.audit is not None:  # no tool may rewrite the log of what tools did
            self.policy = self.policy.protecting(os.path.realpath(self.audit.path))
        self._state = threading.Condition()
        self._running = 0
        self.closed = False
        history = history if history is not None else HistoryOptions()
        self.history = History(history, real, [r.path for r in self.roots]) if (
            history.enabled) else None
        # read_before_write: "root\0resolved" -> the version this session read or wrote
        self.seen: dict[str, str] = {}
        self._seen_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------

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

    def close_audit(self) -> None:
        if self._owns_audit and self.audit is not None:
            self.audit.close()
        if self.history is not None:
            self.history.close()

    # -- history -------------------------------------------------------------

    def history_store(self) -> History:
        """The store; checkpoint() without one is the host's mistake, so it raises."""
        if self.history is None:
            raise CorralError("tool_disabled", f"checkpoint needs history, but {HISTORY_OFF}.")
        return self.history

    def history_request(self, op: str, **fields: Any) -> dict[str, Any]:
        return {"history": op, "tool": op if op in ("undo", "rewind") else "history", **fields}

    def restoring(self, op: str, **fields: Any) -> dict[str, Any] | None:
        """The worker request for undo/rewind, or None with history off."""
        return self.history_request(op, **fields) if self.history is not None else None

    @staticmethod
    def history_off(op: str) -> dict[str, Any]:
        """undo/rewind with history off: an error result, as a disabled tool gives."""
        return error_result(op, CorralError(
            "tool_disabled", f"nothing to {op}: {HISTORY_OFF}, so no change was recorded."))

    def history_result(self, response: dict[str, Any], target: str) -> dict[str, Any]:
        """The worker's undo/rewind answer in the contract's shape, with its text;
        one audit line for it (path: the path undone or the id rewound to)."""
        response.pop("meta", None)
        if self.audit is not None:
            error = response.get("error") or {}
            self.audit.record(tool=response["tool"], ok=bool(response.get("ok")),
                              error=error.get("code"), path=target)
        if not response.get("ok") or "result" not in response:
            return response
        result = response["result"]
        lines = [f"Restored {path}." for path in result["restored"]]
        reasons = result.get("reasons") or {}
        lines += [f"Left {path} alone: {reasons.get(path, 'it changed since')}"
                  + ("" if reasons.get(path, "").endswith(".") else ".")
                  for path in result["conflicts"]]
        if result["conflicts"]:
            lines.append(FORCE_HINT)
        if "checkpoint" in result:
            lines.append(f"Checkpoint {result['checkpoint']} holds the state before this rewind.")
        response["text"] = "\n".join(lines) or "Nothing to restore."
        return response

    # -- the pure steps ----------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        return [
            tool.spec()
            for tool in TOOLS.values()
            if self.policy.tool_mode(tool.name, writes=tool.writes) != "deny"
        ]

    def flow(self, name: Any, arguments: Any, within: Sequence[str] | None = None) -> Flow:
        started = time.monotonic()
        response = yield from self._run(name, {} if arguments is None else arguments, within)
        return self._finish(response, arguments, started)

    def _run(self, name: Any, arguments: Any, within: Sequence[str] | None) -> Flow:
        try:
            tool = lookup(name)
            mode = self.policy.tool_mode(tool.name, writes=tool.writes)
            if mode == "deny":
                why = self.policy.disabled_reason(tool.name, writes=tool.writes)
                raise CorralError("tool_disabled", why)
            args = validate(tool, arguments)
        except CorralError as error:
            return error_result(shown_name(name), error)
        if mode == "supervised" and self.approve is None:
            return (yield from self._ask(
                {"tool": tool.name}, f"the tool {tool.name} needs approval",
                fix=f'; set {tool.name} = "allow" in [tools] to run it without asking',
            ))
        # A supervised tool, or a path a supervised rule matches: the worker resolves
        # each path, stops before acting and names what needs a yes; the host asks
        # about those resolved paths and sends the call again with them approved.
        approved: list[str] = []
        response: dict[str, Any] = {}
        for _ in range(MAX_APPROVAL_ROUNDS):
            request = {"tool": tool.name, "arguments": args, "approved": approved}
            if within is not None:
                request["within"] = list(within)
            seen = self.request_seen(tool.name)
            if seen is not None:
                request["seen"] = seen
            response = yield "submit", request
            needed = [
                need for need in response.get("meta", {}).get("needs_approval") or ()
                if need["key"] not in approved
            ]
            if not needed or self.approve is None:
                return response
            ask = self._request(tool.name, args, needed)
            rule = next((need["rule"] for need in needed if need.get("rule")), None)
            why = f" (rule {rule!r})" if rule else ""
            shown = ", ".join(target["shown"] for target in ask["targets"])
            # said only when the callback cannot ask anyone (NoApprover)
            fix = "" if rule else (f'; or set {tool.name} = "allow" in [tools] of the '
                                   "operator's config to run it without asking")
            refusal = yield from self._ask(ask, f"{shown} needs approval{why}", rule, fix)
            if refusal is not None:
                return {**refusal, "meta": response.get("meta", {})}
            approved += [need["key"] for need in needed]
        return response

    def _request(
        self, tool: str, args: dict[str, Any], needed: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """What approve() is asked (the keys are documented API): every path as
        resolved in the worker, root-relative, with its root, as the caller spelled
        it and a one-line `shown` form; control characters escaped throughout."""
        targets = [_target(need, self.roots[0].path) for need in needed]
        return {
            "tool": tool, "arguments": args,
            "paths": [target["given"] for target in targets],
            "resolved": [
                escaped(posixpath.join(need["root"], need["resolved"])) for need in needed
            ],
            "rules": [target["rule"] for target in targets],
            "targets": targets,
        }

    def _ask(
        self, ask: dict[str, Any], what: str, rule: str | None = None, fix: str = ""
    ) -> Generator[Step, Any, dict[str, Any] | None]:
        """None if the host approved; else the error result to return (naming the
        path rule that asked for the approval, if one did)."""
        if self.approve is None:
            return error_result(ask["tool"], CorralError(
                "approval_required", f"{what}{NO_ONE_TO_ASK}{fix}.", rule=rule,
            ))
        answer = yield "approve", ask
        if isinstance(answer, NoApprover):  # the callback could not ask anyone
            how = f": {answer.hint}" if answer.hint else ""
            return error_result(ask["tool"], CorralError(
                "approval_required", f"{what} and nobody can be asked to approve it{how}{fix}.",
                rule=rule,
            ))
        if answer:
            return None
        return error_result(
            ask["tool"], CorralError("approval_denied", f"{what}; it was denied.", rule=rule)
        )

    def _finish(self, response: dict[str, Any], arguments: Any, started: float) -> dict[str, Any]:
        meta = response.pop("meta", None) or {}
        if self.history is not None and meta.get("history_bytes"):
            self.history.stored(meta["history_bytes"])
        if self.policy.read_before_write == "require" and response["ok"]:
            self._remember(response, meta, arguments)
        if self.audit is not None:
            error = response.get("error") or {}
            fields: dict[str, Any] = {
                "tool": response["tool"], "ok": response["ok"], "error": error.get("code"),
                "bytes": meta.get("bytes", 0),
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
            }
            if meta.get("touched"):
                fields["touched"] = meta["touched"]
            else:
                given = _paths(arguments) if isinstance(arguments, dict) else []
                fields["path"] = given[0] if given else None
                fields["rule"] = error.get("rule")
                fields.update(self._mode_decision(response["tool"], error.get("code")))
            self.audit.record(**fields)
        return response


    def _remember(self, response: dict[str, Any], meta: dict[str, Any], arguments: Any) -> None:
        """read_before_write: note the versions this session read or wrote."""
        keys = {t["path"]: approval_key(t["root"], t["resolved"]) for t in meta.get("touched", ())}
        result = response["result"]
        files = result.get("files") if response["tool"] == "read_multiple_files" else [result]
        with self._seen_lock:
            self.seen.update(meta.get("seen") or {})
            if response["tool"] not in SESSION_TOOLS:
                return
            for found in files or ():
                if found.get("ok", True) and found.get("version") and found["path"] in keys:
                    self.seen[keys[found["path"]]] = found["version"]

    def request_seen(self, name: Any) -> dict[str, str] | None:
        """What a write under read_before_write carries: the versions this session knows."""
        if self.policy.read_before_write != "require" or name not in SESSION_WRITERS:
            return None
        with self._seen_lock:
            return dict(self.seen)

    def _mode_decision(self, name: str, code: str | None) -> dict[str, str]:
        """Decision and rule of a call its tool's mode stopped before any path was
        looked at (a path rule's refusal carries its own, in meta.touched)."""
        decisions = {"tool_disabled": "deny", "approval_required": "supervised",
                     "approval_denied": "supervised"}
        if code not in decisions:
            return {}
        tool = TOOLS.get(name)
        read_only = self.policy.read_only and tool is not None and tool.writes
        return {"decision": decisions[code],
                "rule": READ_ONLY_RULE if read_only else TOOL_MODE_RULE}


class Sandbox:
    """File tools confined to a workspace. Thread-safe; close it (or use `with`).

    `approve(request) -> bool` is asked before a supervised call (a tool in
    mode "supervised", or a path a "supervised" rule matches) acts, once its
    paths are resolved: {"tool", "arguments", "paths" (as given), "resolved"
    (absolute), "rules" (None: the tool's mode), "targets" ([{"root", "path"
    (root-relative, resolved), "given", "rule", "shown" (one line to show)}])},
    strings escaped (control characters, backslashes). A call that touches
    several paths (move, copy) may ask more than once; a path that resolves
    differently when the call runs is asked about again. No callback:
    approval_required; a refusal: approval_denied.
    `allowed_paths` (RootSpec list) and `options` (SandboxOptions) come from
    corral.toml with `from_config`; they may be given here too.
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        policy: Policy | None = None,
        limits: Limits | None = None,
        workers: int | None = None,
        approve: Approve | None = None,
        audit: str | os.PathLike[str] | Audit | None = None,
        allowed_paths: Sequence[RootSpec] = (),
        options: SandboxOptions | None = None,
        history: HistoryOptions | None = None,
    ) -> None:
        self._open(_core(
            None, workspace, policy=policy, limits=limits, workers=workers, approve=approve,
            audit=audit, allowed_paths=allowed_paths, options=options, history=history,
        ), _start_executor)

    def _open(self, core: _Core, start: Callable[..., Any]) -> None:
        """Start the executor for `core` (a private pool, or a lane of a shared one)."""
        self._core = core
        store = core.history
        try:
            self._executor = start(
                core.roots, core.limits, core.policy, core.options,
                history=store.path if store is not None else None,
            )
            if store is not None and (dead := store.dead_writers()):
                # a host or worker killed mid-call: make the history agree with the tree
                self._executor.submit(core.history_request("settle", pids=dead))
        except BaseException:
            core.close_audit()
            raise

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | Config, **kwargs: Any) -> Sandbox:
        """A sandbox as corral.toml describes it; keyword arguments win over the file.
        The file is the operator's and trusted wherever it lies; the workspace's
        own corral.toml, if it is another file, narrows it. A Config (e.g.
        corral.trust.operator_config's, with that file applied) is taken as it is."""
        return _pooled(_start_executor, *_config_arguments(path, kwargs))

    def tools(self) -> list[dict[str, Any]]:
        """Specs of the tools the policy lets a model see."""
        return self._core.tools()

    def call(
        self, tool: str, arguments: dict[str, Any] | None = None, *,
        within: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Run one tool; a failure comes back as {"ok": false, "error": ...}.
        `within` (absolute paths) narrows this call: a path that resolves outside
        every one of them fails `path_denied`. The roots stay the outer bound."""
        with self._core.active():
            flow = self._core.flow(tool, arguments, within)
            try:
                kind, payload = next(flow)
                while True:
                    if kind == "submit":
                        answer = self._executor.submit(payload)
                    else:  # the core asks only when there is a callback
                        with self._core.waiting():
                            try:
                                answer = bool(self._core.approve(payload))  # type: ignore[misc]
                            except NoApprover as nobody:
                                answer = nobody
                    kind, payload = flow.send(answer)
            except StopIteration as done:
                return done.value

    # -- history: nothing lost ----------------------------------------------------

    def checkpoint(self, label: str | None = None) -> str:
        """Mark the tree's state now; returns the id rewind() takes back to it."""
        with self._core.active():
            return self._core.history_store().checkpoint(label)

    def history(self, path: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Recorded changes (and checkpoints, without a path), newest first;
        [] with history off (nothing is recorded)."""
        with self._core.active():
            store = self._core.history
            return [] if store is None else store.entries(path, limit)

    def undo(self, path: str, *, force: bool = False) -> dict[str, Any]:
        """Revert the last recorded change of `path` (in a confined worker)."""
        with self._core.active():
            request = self._core.restoring("undo", path=path, force=force)
            response = (self._core.history_off("undo") if request is None
                        else self._executor.submit(request))
            return self._core.history_result(response, path)

    def rewind(self, checkpoint: str, *, force: bool = False) -> dict[str, Any]:
        """Every path changed since `checkpoint` back to its state then."""
        with self._core.active():
            request = self._core.restoring("rewind", to=checkpoint, force=force)
            response = (self._core.history_off("rewind") if request is None
                        else self._executor.submit(request))
            return self._core.history_result(response, checkpoint)

    @property
    def confinement(self) -> dict[str, Any]:
        return self._executor.confinement

    @property
    def roots(self) -> tuple[RootSpec, ...]:
        return self._core.roots

    @property
    def policy(self) -> Policy:
        """The policy in effect (with the protected audit log and config added)."""
        return self._core.policy

    @property
    def limits(self) -> Limits:
        return self._core.limits

    def close(self) -> None:
        if self._core.shut():
            try:
                self._executor.close()
            finally:
                self._core.close_audit()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSandbox:
    """The same surface with `await sb.call(...)`; calls run concurrently."""

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        policy: Policy | None = None,
        limits: Limits | None = None,
        workers: int | None = None,
        approve: Approve | None = None,
        audit: str | os.PathLike[str] | Audit | None = None,
        allowed_paths: Sequence[RootSpec] = (),
        options: SandboxOptions | None = None,
        history: HistoryOptions | None = None,
    ) -> None:
        self._wrap(Sandbox(
            workspace, policy=policy, limits=limits, workers=workers, approve=approve,
            audit=audit, allowed_paths=allowed_paths, options=options, history=history,
        ))

    def _wrap(self, sync: Sandbox) -> None:
        self._sync = sync
        self._core = sync._core
        self._executor = sync._executor

    @classmethod
    def from_config(
        cls, path: str | os.PathLike[str] | Config, **kwargs: Any
    ) -> AsyncSandbox:
        return _pooled_async(Sandbox.from_config(path, **kwargs))

    def tools(self) -> list[dict[str, Any]]:
        return self._core.tools()

    async def call(
        self, tool: str, arguments: dict[str, Any] | None = None, *,
        within: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        with self._core.active():
            flow = self._core.flow(tool, arguments, within)
            try:
                kind, payload = next(flow)
                while True:
                    if kind == "submit":
                        answer = await self._executor.asubmit(payload)
                    else:
                        with self._core.waiting():
                            try:
                                answer = self._core.approve(payload)  # type: ignore[misc]
                                if inspect.isawaitable(answer):
                                    answer = await answer
                                answer = bool(answer)
                            except NoApprover as nobody:
                                answer = nobody
                    kind, payload = flow.send(answer)
            except StopIteration as done:
                return done.value

    async def checkpoint(self, label: str | None = None) -> str:
        return await asyncio.to_thread(self._sync.checkpoint, label)

    async def history(self, path: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._sync.history, path, limit)

    async def undo(self, path: str, *, force: bool = False) -> dict[str, Any]:
        with self._core.active():
            request = self._core.restoring("undo", path=path, force=force)
            response = (self._core.history_off("undo") if request is None
                        else await self._executor.asubmit(request))
            return self._core.history_result(response, path)

    async def rewind(self, checkpoint: str, *, force: bool = False) -> dict[str, Any]:
        with self._core.active():
            request = self._core.restoring("rewind", to=checkpoint, force=force)
            response = (self._core.history_off("rewind") if request is None
                        else await self._executor.asubmit(request))
            return self._core.history_result(response, checkpoint)

    @property
    def confinement(self) -> dict[str, Any]:
        return self._executor.confinement

    @property
    def roots(self) -> tuple[RootSpec, ...]:
        return self._core.roots

    @property
    def policy(self) -> Policy:
        """The policy in effect (with the protected audit log and config added)."""
        return self._core.policy

    @property
    def limits(self) -> Limits:
        return self._core.limits

    async def aclose(self) -> None:
        # Waiting for running calls blocks; do it off the event loop they run on.
        await asyncio.to_thread(self._sync.close)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _core(
    trusted: str | None,
    workspace: str | os.PathLike[str],
    *,
    policy: Policy | None = None,
    limits: Limits | None = None,
    workers: int | None = None,
    approve: Approve | None = None,
    audit: str | os.PathLike[str] | Audit | None = None,
    allowed_paths: Sequence[RootSpec] = (),
    options: SandboxOptions | None = None,
    history: HistoryOptions | None = None,
) -> _Core:
    """The core for Sandbox's arguments; `trusted`: a corral.toml the operator named
    (or one already applied), which is not taken for the workspace's own."""
    try:
        return _Core(
            workspace, policy=policy, limits=limits, workers=workers, approve=approve,
            audit=audit, allowed_paths=allowed_paths, options=options, history=history,
            trusted=trusted,
        )
    except CorralError as error:  # the history store cannot be used
        raise ValueError(error.message) from None


def _pooled(
    start: Callable[..., Any], trusted: str | None, arguments: dict[str, Any]
) -> Sandbox:
    """A Sandbox (Sandbox's arguments) whose executor `start` makes: corral.Pool's lanes."""
    sandbox = Sandbox.__new__(Sandbox)
    sandbox._open(_core(trusted, **arguments), start)
    return sandbox


def _pooled_async(sync: Sandbox) -> AsyncSandbox:
    sandbox = AsyncSandbox.__new__(AsyncSandbox)
    sandbox._wrap(sync)
    return sandbox


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
        "audit": config.audit_path,
        "history": config.history,
    }
    arguments.update(overrides)
    return config.narrowed_by or config.source, arguments
