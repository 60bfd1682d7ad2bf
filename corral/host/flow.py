"""CallFlow: one tool call as a resumable sequence of steps, with no I/O of its own.

As in httpx, the steps of a call that decide (tool lookup, tool modes, argument
validation, the approval rounds) are written once, as a generator that yields
what it needs done and receives the outcome:

    Submit(request)   run this request in a confined worker; reply with its Answer
    Approve(request)  ask the host's approver; reply True, False, an Approval, or
                      NoApprover

and returns the call's result. A driver carries the steps out: `Sandbox.call`
blocks, `AsyncSandbox.call` awaits, the MCP face turns Approve into an
elicitation (or a 2026-07-28 `input_required` round) as it steps the flow
itself (mcp_core), the JSON-lines face has no
approver (such a call fails `approval_required`). A driver that stops early
(an exception, a cancelled task) closes the flow.

    flow = sandbox.flow("write_file", {"path": "a.txt", "content": "hi"})
    with flow:
        step = flow.step()
        while step is not None:
            reply = run(step.request) if isinstance(step, Submit) else ask(step.request)
            step = flow.step(reply)
    result = flow.result
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from msgspec.structs import replace

from corral.calls.messages import (
    Answer,
    CallRequest,
    GrantRef,
    NeedsApproval,
    Touched,
    error_answer,
)
from corral.errors import CorralError
from corral.host.grants import REMEMBER, Grant, Grants
from corral.host.quota import Quotas
from corral.observe import Observer
from corral.policy import Policy
from corral.tool_table import PATCH_ARGUMENT, TABLE
from corral.tools.patch_format import files_of
from corral.tools.registry import lookup, shown_name, validate
from corral.tools.render import escaped

MAX_APPROVAL_ROUNDS = 4  # asks per call: move/copy name two paths, each may need a yes
NO_ONE_TO_ASK = " and nothing here can ask for it"  # approval_required: no approve callback


class NoApprover(Exception):
    """Raised by an approve callback when nobody can answer this request (an MCP
    client that cannot be asked): the call fails `approval_required`, as it does
    with no callback at all; `hint` says what would let someone be asked."""

    def __init__(self, hint: str = "") -> None:
        super().__init__(hint)
        self.hint = hint


@dataclass(frozen=True)
class Approval:
    """An approver's answer that may be remembered: `remember="path"` grants the tool
    on the approved resolved paths, `"rule"` on every path the same supervised rule
    covers, for the life of the sandbox (Sandbox.approvals lists them). A denial
    is never remembered. True is Approval(True), False Approval(False)."""

    allow: bool
    remember: Literal["once", "path", "rule"] = "once"

    def __post_init__(self) -> None:
        if not isinstance(self.allow, bool):
            raise TypeError(f"Approval.allow must be a bool, not {type(self.allow).__name__}")
        if self.remember not in REMEMBER:
            raise ValueError(f"Approval.remember must be one of {', '.join(REMEMBER)}, "
                             f"not {self.remember!r}")

    def __bool__(self) -> bool:
        return self.allow


# A driver's reply for an approval it was given in an earlier round of the same call
# (MCP's stateless retries): allowed, and neither audited nor remembered again.
REPLAYED = Approval(True)
# An approval decision as the flow reports it: tool, the paths asked about, the
# answer, the grants it made, and what the stopped call touched (to the ledger,
# which audits it).
Decided = Callable[
    [str, Sequence[NeedsApproval], Approval, Sequence[Grant], Sequence[Touched]], None]


@dataclass(frozen=True)
class Submit:
    """Run `request` in a confined worker; the reply is its `Answer`."""

    request: CallRequest


@dataclass(frozen=True)
class Approve:
    """Ask the host's approver about `request` (the keys Sandbox documents); the
    reply is True, False, or the approver's NoApprover."""

    request: dict[str, Any]


Step = Submit | Approve
Steps = Generator[Step, Any, Answer]


class CallFlow:
    """One call's steps (see the module docstring). `step(reply)` resumes it with
    the reply to the last step and returns the next one, or None once the call is
    done; its result is then in `result` (the dict Sandbox.call returns)."""

    def __init__(self, steps: Steps, finish: Callable[[Answer], dict[str, Any]]) -> None:
        self._steps = steps
        self._finish = finish
        self._started = False
        self._closed = False
        self.result: dict[str, Any] | None = None

    def step(self, reply: Any = None) -> Step | None:
        if self._closed:
            return None  # given up on: no result, nothing more runs
        try:
            if self._started:
                return self._steps.send(reply)
            self._started = True
            return next(self._steps)
        except StopIteration as done:
            self._closed = True
            self.result = self._finish(done.value)
            return None
        except BaseException:  # the call failed in the host (a bad reply): nothing more runs
            self._closed = True
            raise

    def close(self) -> None:
        """Give up on the call (nothing more runs); safe to call when it is done."""
        self._closed = True
        self._steps.close()

    def __enter__(self) -> CallFlow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def drive(
    flow: CallFlow, submit: Callable[[CallRequest], Answer],
    approve: Callable[[dict[str, Any]], Approval | bool | NoApprover],
) -> dict[str, Any]:
    """Carry a flow out with blocking calls; closed on any exception."""
    with flow:
        step = flow.step()
        while step is not None:
            reply = submit(step.request) if isinstance(step, Submit) else approve(step.request)
            step = flow.step(reply)
    assert flow.result is not None
    return flow.result


async def adrive(
    flow: CallFlow, submit: Callable[[CallRequest], Awaitable[Answer]],
    approve: Callable[[dict[str, Any]], Awaitable[Approval | bool | NoApprover]],
) -> dict[str, Any]:
    """drive() with awaits."""
    with flow:
        step = flow.step()
        while step is not None:
            reply = await (
                submit(step.request) if isinstance(step, Submit) else approve(step.request)
            )
            step = flow.step(reply)
    assert flow.result is not None
    return flow.result


class CallPlan(NamedTuple):
    """What the steps of one call need to know of its sandbox."""

    policy: Policy
    workspace: str  # the first root: paths in it are shown root-relative
    can_ask: bool  # an approver exists: without one a supervised call fails at once
    seen: Callable[[str], dict[str, str] | None]  # read_before_write versions for a tool
    raw: bool = False  # a large read's text and content may stay JSON text (CallRequest.raw)
    quotas: Quotas | None = None  # counted here, so every face counts alike
    grants: Grants | None = None  # remembered approvals (none: nothing is remembered)
    decided: Decided | None = None  # told every approval decision (the audit)
    observer: Observer | None = None  # hears of each approval asked and its outcome

    def steps(self, name: Any, arguments: Any, within: Sequence[str] | None) -> Steps:
        """The call's steps; the result is the worker's Answer, or one made here."""
        try:
            tool = lookup(name)
            mode = self.policy.tool_mode(tool.name, writes=tool.writes)
            if mode == "deny":
                why = self.policy.disabled_reason(tool.name, writes=tool.writes)
                raise CorralError("tool_disabled", why)
            args = validate(tool, arguments)
        except CorralError as error:
            return error_answer(shown_name(name), error)
        # The files a patch changes: read once, for the grants and the quotas, and only
        # when either needs them (a 4 MiB patch is a scan of 30-120 ms).
        held = self.grants if self.grants is not None and self.grants.holds(tool.name) else None
        patch = PATCH_ARGUMENT in TABLE[tool.name].path_arguments
        files = files_of(args[PATCH_ARGUMENT]) if patch and (
            held is not None or self.quotas is not None) else ()
        grants = held.for_call(tool.name, args, files) if held is not None else ()
        if mode == "supervised" and not self.can_ask and not grants:
            return _nobody_to_ask(
                tool.name, f"the tool {tool.name} needs approval", None,
                f'; set {tool.name} = "allow" in [tools] to run it without asking',
            )
        if self.quotas is None:
            return (yield from self._run(tool.name, args, within, grants))
        # Accepted (or refused) here, before a worker is taken; a flow closed before
        # its answer keeps what it reserved (it may have written), unless it was closed
        # while a person was asked: the worker had stopped before acting (an MCP
        # stateless round ends so, and its retry is admitted anew).
        reservation = self.quotas.admit(tool.name, args, files)
        if isinstance(reservation, CorralError):
            return error_answer(tool.name, reservation)
        quotas = self.quotas
        answer = yield from self._run(
            tool.name, args, within, grants, lambda: quotas.release(reservation))
        self.quotas.settle(reservation, tool.name, args, files, answer)
        return answer

    def _run(
        self, tool: str, args: dict[str, Any], within: Sequence[str] | None,
        grants: tuple[GrantRef, ...], unasked: Callable[[], None] = lambda: None,
    ) -> Steps:
        """The worker's answer, after any approval rounds it asks for (the remembered
        `grants` that can apply travel with each request)."""
        # A supervised tool, or a path a supervised rule matches: the worker resolves
        # each path, stops before acting and names what needs a yes; the host asks
        # about those resolved paths and sends the call again with them approved.
        approved: list[str] = []
        rounds = 0
        while True:
            rounds += 1
            answer = yield Submit(CallRequest(
                tool, args, tuple(approved),
                tuple(within) if within is not None else None, self.seen(tool),
                raw=self.raw, grants=grants,
            ))
            if answer.meta.grants:  # a call a remembered approval let through (rare)
                answer = self._checked(tool, grants, answer)
            needed = [n for n in answer.meta.needs_approval if n.key not in approved]
            if not needed and answer.meta.grants and self.observer is not None:
                self.observer.on_approval("remembered")  # let through by a held grant
            if not needed or not self.can_ask:
                return answer
            ask = self._request(tool, args, needed, answer.meta.diff)
            rule = next((need.rule for need in needed if need.rule), None)
            why = f" (rule {rule!r})" if rule else ""
            shown = ", ".join(target["shown"] for target in ask["targets"])
            # said only when the callback cannot ask anyone (NoApprover)
            fix = "" if rule else (f'; or set {tool} = "allow" in [tools] of the '
                                   "operator's config to run it without asking")
            refusal = yield from self._ask(
                ask, needed, answer.meta.touched, f"{shown} needs approval{why}", rule, fix,
                unasked)
            if refusal is not None:  # nothing went through, by a grant or otherwise
                return Answer(False, refusal.tool, error=refusal.error,
                              meta=replace(answer.meta, grants=()))
            if rounds == MAX_APPROVAL_ROUNDS:
                return answer
            approved += [need.key for need in needed]

    def _checked(self, tool: str, sent: tuple[GrantRef, ...], answer: Answer) -> Answer:
        """The answer with only the grant uses that hold (grants.Grants.checked)."""
        kept = self.grants.checked(tool, sent, answer.meta.grants) if self.grants else ()
        return answer if kept == answer.meta.grants else answer._replace(
            meta=replace(answer.meta, grants=kept))

    def _request(
        self, tool: str, args: dict[str, Any], needed: list[NeedsApproval], diff: str | None
    ) -> dict[str, Any]:
        """What approve() is asked (the keys are documented API): every path as
        resolved in the worker, root-relative, with its root, as the caller spelled
        it, a one-line `shown` form and the file's size; for a change, its diff
        (bounded in the worker: tools/preview.py); control characters escaped
        throughout (the diff's line by line)."""
        targets = [_target(need, self.workspace) for need in needed]
        return {
            "tool": tool, "arguments": args,
            "paths": [target["given"] for target in targets],
            "resolved": [escaped(posixpath.join(need.root, need.resolved)) for need in needed],
            "rules": [target["rule"] for target in targets],
            "targets": targets,
            "diff": "\n".join(escaped(line) for line in diff.split("\n")) if diff else None,
        }

    def _ask(
        self, ask: dict[str, Any], needed: list[NeedsApproval], touched: Sequence[Touched],
        what: str, rule: str | None = None, fix: str = "",
        unasked: Callable[[], None] = lambda: None,
    ) -> Generator[Step, Any, Answer | None]:
        """None if the host approved; else the error answer to return (naming the
        path rule that asked for the approval, if one did)."""
        if not self.can_ask:
            return _nobody_to_ask(ask["tool"], what, rule, fix)
        try:
            reply = yield Approve(ask)
        except GeneratorExit:  # given up on while asking: `unasked` says so
            unasked()
            raise
        if isinstance(reply, NoApprover):  # the callback could not ask anyone
            how = f": {reply.hint}" if reply.hint else ""
            return error_answer(ask["tool"], CorralError(
                "approval_required", f"{what} and nobody can be asked to approve it{how}{fix}.",
                rule=rule,
            ))
        if not isinstance(reply, bool | Approval):  # a driver's own; Sandbox.run checks too
            raise TypeError(f"an Approve step's reply must be a bool, a corral.Approval or a "
                            f"NoApprover, not {type(reply).__name__}")
        approval = reply if isinstance(reply, Approval) else Approval(reply)
        if approval is not REPLAYED:
            issued = self.grants.issue(ask["tool"], needed, approval.remember) if (
                approval.allow and self.grants is not None) else []
            if self.decided is not None:
                self.decided(ask["tool"], needed, approval, issued, touched)
            if self.observer is not None:
                self.observer.on_approval("asked")
                self.observer.on_approval("granted" if approval.allow else "denied")
        if approval.allow:
            return None
        return error_answer(
            ask["tool"], CorralError("approval_denied", f"{what}; it was denied.", rule=rule)
        )


def _nobody_to_ask(tool: str, what: str, rule: str | None, fix: str) -> Answer:
    return error_answer(tool, CorralError(
        "approval_required", f"{what}{NO_ONE_TO_ASK}{fix}.", rule=rule))


def _target(need: NeedsApproval, workspace: str) -> dict[str, Any]:
    """One path needing approval, as approve() sees it (see CallPlan._request)."""
    root, path, given = need.root, need.resolved, need.path
    absolute = posixpath.join(root, path) if path != "." else root
    shown = path if root == workspace else absolute
    if posixpath.normpath(given) not in (path, absolute):
        shown += f" (given as {given})"  # tpl/../deploy.yml through a symlink, say
    return {
        "root": escaped(root), "path": escaped(path), "given": escaped(given),
        # a rule's name may come from the workspace's own corral.toml: escaped too
        "rule": escaped(need.rule) if need.rule else None, "shown": escaped(shown),
        "size": need.size,
    }
