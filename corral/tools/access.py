"""The policy hook: every path a tool touches goes through here.

`target` maps the caller's path to (Root, rel) and refuses writes into an
"ro" root; `guard` builds the check the Root calls with the *resolved* path,
after opening and before acting, so a decision is made on what is really
there, whatever races happen meanwhile.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager

from corral.calls.messages import GrantUse, NeedsApproval, Touched
from corral.errors import CorralError, shown_path
from corral.fs import Root, content_version
from corral.policy import HARDLINKS_RULE, Decision, RootSpec
from corral.tools.base import Context


def as_given(ctx: Context, error: CorralError) -> CorralError:
    """The error with the caller's spelling of an absolute path: the fs layer names
    paths relative to their root, the caller named /abs/root/file."""
    return error.given(ctx.given)


# The rule a path decided by its tool's "supervised" mode is recorded under (audit).
TOOL_MODE_RULE = "tool-mode"


def approval_key(root: str, resolved: str) -> str:
    """The token the host approves for one resolved path."""
    return f"{root}\0{resolved}"


def target(ctx: Context, path: str, *, write: bool) -> tuple[Root, str]:
    root, rel = ctx.roots.locate(path)
    if rel != path:
        ctx.given[rel] = path
    if write and root.mode == "ro":
        raise CorralError("read_only", f"{path} lies in a read-only root.")
    return root, rel


def joined(base: str, name: str) -> str:
    """A root-relative path below `base` ("." is the root itself)."""
    return name if base == "." else f"{base}/{name}"


CLIENT_ROOTS_RULE = "client-roots"  # the rule named when a client's roots refuse a path


def within(ctx: Context, root: Root, resolved: str) -> bool:
    """Whether a resolved path lies in the client's roots for this call (if any)."""
    if ctx.within is None:
        return True
    return any(
        prefix == "." or resolved == prefix or resolved.startswith(prefix + "/")
        for prefix in ctx.within.get(root.path, ())
    )


def visibility(ctx: Context, root: Root) -> Callable[[str], bool]:
    """Listings hide what the policy denies outright: the check for each resolved
    path beneath `root`, built once per listing (it runs for every entry)."""
    spec, decide, tool = RootSpec(root.path, root.mode), ctx.policy.decide, ctx.tool

    def allowed(resolved: str) -> bool:
        return decide(tool, spec, resolved, write=False).action != "deny"

    if ctx.within is None:  # no client roots narrow this call: the policy alone decides
        return allowed
    return lambda resolved: within(ctx, root, resolved) and allowed(resolved)


class PathCheck:
    """The guard for one path argument. A Root calls it with the resolved path it
    is about to act on, and `through` with each directory the path passes through
    by `.` or `..`, or that does not exist (yet) on its way: there only a deny
    counts, so that a denied name answers path_denied whether it exists or not."""

    def __init__(self, ctx: Context, root: Root, path: str, *, write: bool) -> None:
        self.ctx, self.root, self.path, self.write = ctx, root, path, write
        self.spec = RootSpec(root.path, root.mode)
        # whose mode supervises the path, as messages name it: apply_patch's Delete
        # File answers to delete_file's too, and its stops are a scope of their own
        self.mode_tool = ctx.tool
        # TreeCheck: the paths that need approval, asked about together once all are known
        self.deferred: list[str] | None = None

    def __call__(self, resolved: str) -> None:
        ctx, path = self.ctx, self.path
        self._within(resolved)
        decision = ctx.policy.decide(ctx.tool, self.spec, resolved, write=self.write)
        action, rule = decision.action, decision.rule
        if action == "allow" and ctx.supervised:
            action, rule = "supervised", TOOL_MODE_RULE
        _record(ctx, Touched(path, self.root.path, resolved, action, rule))
        if action == "deny":
            raise _denied(path, rule)
        if action == "supervised":
            # the rule a "rule" grant must name: "" for the tool's mode or default action
            scope = "" if rule == TOOL_MODE_RULE else decision.rule or ""
            if _asked(ctx, self.root, resolved, path, scope, self._mode()):
                if self.deferred is not None:
                    self.deferred.append(path)
                    return
                why = f"the tool {self.mode_tool}'s mode" if rule == TOOL_MODE_RULE else (
                    _why(rule))
                raise CorralError(
                    "approval_required", f"{path} needs approval under {why}.",
                    rule=decision.rule,
                )

    def through(self, resolved: str, target: str | None = None) -> None:
        """`resolved`: a directory stepped through by "." or ".." (target None), or a
        name on the way to `target` that is missing or not a directory, which the
        target's rule decides (Policy.on_the_way). A refusal names `resolved`."""
        self._within(resolved)
        policy, tool = self.ctx.policy, self.ctx.tool
        if target is None or target == resolved:
            decision: Decision | None = policy.decide(tool, self.spec, resolved, write=self.write)
        else:
            decision = policy.on_the_way(tool, self.spec, resolved, target, write=self.write)
        if decision is not None and decision.action == "deny":
            touched = Touched(self.path, self.root.path, resolved, "deny", decision.rule)
            _record(self.ctx, touched)
            if target == resolved:
                raise _denied(self.path, decision.rule)
            raise CorralError(
                "path_denied", f"{self._shown(resolved)} is denied by {_why(decision.rule)} "
                f"(on the way to {self.path}).", rule=decision.rule,
            )

    def _mode(self) -> str | None:
        """The other tool whose mode this path's stop answers to (NeedsApproval.mode)."""
        return None if self.mode_tool == self.ctx.tool else self.mode_tool

    def _shown(self, resolved: str) -> str:
        """A resolved path spelled as the caller spells paths: absolute if they do."""
        if not self.path.startswith("/"):
            return shown_path(resolved)
        root = self.root.path.rstrip("/")
        return shown_path(root or "/" if resolved == "." else f"{root}/{resolved}")

    def _within(self, resolved: str) -> None:
        if not within(self.ctx, self.root, resolved):
            touched = Touched(self.path, self.root.path, resolved, "deny", CLIENT_ROOTS_RULE)
            _record(self.ctx, touched)
            raise CorralError(
                "path_denied", f"{self.path} is outside the client's roots.",
                rule=CLIENT_ROOTS_RULE,
            )


def _asked(ctx: Context, root: Root, resolved: str, shown: str, scope: str,
           mode: str | None) -> bool:
    """Whether a supervised path still needs a person's yes (neither approved for
    this call nor covered by a grant); if so it joins the call's questions. The host
    asks about this resolved path and sends the call again with its key approved; a
    path that resolves differently then asks again."""
    key = approval_key(root.path, resolved)
    if key in ctx.approved or _granted(ctx, key, scope, mode, root, resolved):
        return False
    ctx.needs_approval.append(NeedsApproval(key, root.path, resolved, shown, scope, mode=mode))
    return True


def _granted(ctx: Context, key: str, scope: str, mode: str | None, root: Root,
             resolved: str) -> bool:
    """Whether a remembered approval covers this resolved path (noted for the host,
    which checks the claim against the grants it sent). A grant covers only stops
    of the kind it was given for: a patch's edit and its delete are two."""
    for grant in ctx.grants:
        if grant.mode != mode:
            continue
        if (grant.key == key) if grant.key is not None else (grant.rule == scope):
            use = GrantUse(grant.id, root.path, resolved)
            if use not in ctx.grants_used:
                ctx.grants_used.append(use)
            return True
    return False


# Entries beneath one deleted directory asked about in one request: what a person
# can read, and what the worker's answer carries (corral/sandbox/answers.py).
MAX_ASKED_ENTRIES = 100


class TreeCheck(PathCheck):
    """The guard of a directory deleted with everything beneath it: the directory
    itself as PathCheck decides it, then each entry beneath (`entry`, with its
    resolved path) before anything is deleted. A denied entry stops the call
    naming it; every path that needs approval is collected and asked about at
    once (`decided`). Under the tool's own "supervised" mode the directory's
    approval covers what is beneath it. Only refused entries are recorded as
    touched: a big tree must not flood the audit record."""

    def __init__(self, ctx: Context, root: Root, path: str) -> None:
        super().__init__(ctx, root, path, write=True)
        self.deferred: list[str] = []

    def entry(self, resolved: str) -> None:
        ctx = self.ctx
        decision = ctx.policy.decide(ctx.tool, self.spec, resolved, write=True)
        if decision.action == "allow":
            return
        shown = self._shown(resolved)
        if decision.action != "deny" and len(self.deferred) >= MAX_ASKED_ENTRIES:
            self.deferred.append(shown)  # counted, not asked: decided() refuses
            return
        _record(ctx, Touched(shown, self.root.path, resolved, decision.action, decision.rule))
        if decision.action == "deny":
            raise CorralError(
                "path_denied", f"{shown} is denied by {_why(decision.rule)} (beneath "
                f"{self.path}); nothing was deleted.", rule=decision.rule)
        if _asked(ctx, self.root, resolved, shown, decision.rule or "", self._mode()):
            self.deferred.append(shown)

    def decided(self) -> None:
        """approval_required naming what needs approval, if anything does."""
        if not self.deferred:
            return
        count = len(self.deferred)
        if count > MAX_ASKED_ENTRIES:
            del self.ctx.needs_approval[:]  # nobody is asked about a part of them
            raise CorralError(
                "approval_required", f"{count} entries beneath {self.path} need approval, over "
                f"the {MAX_ASKED_ENTRIES} one request may ask about; delete its "
                "subdirectories first, or change the rule that supervises them.")
        first = ", ".join(self.deferred[:3]) + (f" and {count - 3} more" if count > 3 else "")
        rule = next((n.rule for n in self.ctx.needs_approval if n.rule), None)
        raise CorralError("approval_required", f"{first} need{'s' if count == 1 else ''} "
                          f"approval before {self.path} is deleted.", rule=rule)


def _denied(path: str, rule: str | None) -> CorralError:
    return CorralError("path_denied", f"{path} is denied by {_why(rule)}.", rule=rule)


def guard(ctx: Context, root: Root, path: str, *, write: bool) -> PathCheck:
    return PathCheck(ctx, root, path, write=write)


def moved(ctx: Context, src_root: Root, dst_root: Root) -> Callable[[str, str], None]:
    """The guard for each entry beneath a directory being moved, under its old and
    its new path (both writes). Only what is refused is recorded: a big tree must
    not flood the audit record; the message names the entry that stops the move."""
    sides = ((src_root, RootSpec(src_root.path, src_root.mode)),
             (dst_root, RootSpec(dst_root.path, dst_root.mode)))

    def check(old: str, new: str) -> None:
        for (root, spec), resolved in zip(sides, (old, new), strict=True):
            if ctx.policy.decide(ctx.tool, spec, resolved, write=True).action != "allow":
                guard(ctx, root, resolved, write=True)(resolved)

    return check


def session_key(ctx: Context, path: str) -> str | None:
    """The key read_before_write knows a file by: its root and resolved path, as the
    guard last saw them for the path as given (None before any guard ran)."""
    for touched in reversed(ctx.touched):
        if touched.path == path:
            return approval_key(touched.root, touched.resolved)
    return None


def require_read(ctx: Context, root: Root, path: str, current: bytes | str | None) -> str | None:
    """Under read_before_write = "require": a change to an existing file (current:
    its bytes, or its version) is a conflict unless this session read or wrote that
    version. Returns the current version when it was checked (None: not required)."""
    if ctx.policy.read_before_write != "require" or current is None:
        return None
    version = current if isinstance(current, str) else content_version(current)
    seen = ctx.seen.get(session_key(ctx, path) or "")
    if seen is None:
        raise CorralError(
            "conflict", f"{path} was not read in this session; read it before changing it."
        )
    if seen != version:
        raise CorralError(
            "conflict", f"{path} changed since this session last read it; read it again."
        )
    return version


def _why(rule: str | None) -> str:
    return "the policy's default action" if rule is None else f"policy rule '{rule}'"


def _record(ctx: Context, touched: Touched) -> None:
    # A Root may call the guard more than once for one path (e.g. a retry).
    if touched not in ctx.touched:
        ctx.touched.append(touched)


def open_target(ctx: Context, path: str, *, write: bool) -> tuple[Root, str, PathCheck]:
    """(root, rel, guard) for one path argument."""
    root, rel = target(ctx, path, write=write)
    return root, rel, guard(ctx, root, path, write=write)


def content(ctx: Context, root: Root, rel: str, check: Callable[[str], None]) -> bytes:
    """The bytes of a file whose content a tool returns (or shows in a diff): under
    [policy] hardlinks = "deny" a file with more than one link is refused, decided
    on the opened fd, since another name of the same inode may be a denied one."""
    return root.read_bytes(
        rel, max_file_bytes=ctx.limits.max_file_bytes, guard=check, single_link=_single(ctx)
    )


def opened(
    ctx: Context, root: Root, rel: str, check: Callable[[str], None]
) -> AbstractContextManager[tuple[int, os.stat_result]]:
    """The file `content` would read, open (fd, fstat) for a tool that reads a file
    of any size in windows, checked as `content` checks it."""
    return root.opened(rel, guard=check, single_link=_single(ctx))


def _single(ctx: Context) -> str | None:
    """The rule that refuses a file with other hard links, when the policy does."""
    return HARDLINKS_RULE if ctx.policy.hardlinks == "deny" else None
