"""What a sandbox keeps of its calls, from their answers' Meta: one audit line
each, the versions this session read or wrote (read_before_write), and the bytes
the history store grew by. The worker's Meta never reaches a caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from corral.audit import Audit
from corral.calls.messages import Answer, Meta, NeedsApproval, Touched
from corral.history.host import History
from corral.host.flow import Approval
from corral.host.grants import Grant, Grants, named_paths
from corral.policy import Policy
from corral.tool_table import TABLE
from corral.tools.access import TOOL_MODE_RULE, approval_key
from corral.tools.render import escaped

READ_ONLY_RULE = "read-only"  # audit rule of a writer refused because the sandbox is read_only
# read_before_write (tool_table's session roles): the writers that need the version
# this session knows, and the tools whose results name the version read or left
NEED_VERSIONS = ("writes", "appends")
NAME_VERSIONS = ("reads", "writes")
# undo/rewind left a conflict alone: the Python spelling, which the CLI replaces with its own
FORCE_HINT = "Pass force=True to restore a conflicting path anyway."


class Ledger:
    """Thread-safe; one per sandbox."""

    def __init__(self, policy: Policy, audit: Audit | None, history: History | None,
                 grants: Grants | None = None) -> None:
        self.policy, self.audit, self.history, self.grants = policy, audit, history, grants
        # read_before_write: "root\0resolved" -> the version this session read or wrote
        self.seen: dict[str, str] = {}
        self._seen_lock = threading.Lock()

    def seen_for(self, tool: str) -> dict[str, str] | None:
        """What a write under read_before_write carries: the versions this session knows."""
        row = TABLE.get(tool)
        if self.policy.read_before_write != "require" or row is None or (
                row.session not in NEED_VERSIONS):
            return None
        with self._seen_lock:
            return dict(self.seen)

    def finish(self, answer: Answer, arguments: Any, started: float) -> dict[str, Any]:
        """The call's result for its caller, once its Meta is accounted for."""
        response = answer.public()
        meta = answer.meta
        # the bytes first: the commit notes them (a record still being committed is
        # one an eviction leaves alone)
        if self.history is not None and meta.history_bytes:
            self.history.stored(meta.history_bytes)
        if self.history is not None and meta.history_ids:
            since = time.time() - (time.monotonic() - started)  # the call's start, wall clock
            self.history.promote(meta.history_ids, answer.tool, since, meta.history_done,
                                 meta.history_bytes)
        if self.policy.read_before_write == "require" and answer.ok:
            self._remember(answer, meta)
        if meta.grants and self.grants is not None:  # checked by the flow (Grants.checked)
            self.grants.used(meta.grants)
        if self.audit is not None:
            error = answer.error or {}
            fields: dict[str, Any] = {
                "tool": answer.tool, "ok": answer.ok, "error": error.get("code"),
                "bytes": meta.bytes,
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
            }
            if meta.grants:
                fields["grant"] = ",".join(dict.fromkeys(use.id for use in meta.grants))
            if meta.touched:
                fields["touched"] = meta.touched
            else:
                given = named_paths(answer.tool, arguments) if isinstance(arguments, dict) else []
                fields["path"] = given[0] if given else None
                fields["rule"] = error.get("rule")
                fields.update(self._mode_decision(answer.tool, error.get("code")))
            self.audit.record(**fields)
        return response

    def approval(self, tool: str, needed: Sequence[NeedsApproval], approval: Approval,
                 issued: Sequence[Grant], touched: Sequence[Touched] = ()) -> None:
        """One audit record per approval decision: the paths asked about (with the
        rule the call's own record names: `touched`), `approval` ("once", "path",
        "rule" or "denied") and the grants it made."""
        if self.audit is None:
            return
        rules = {(t.root, t.resolved): t.rule for t in touched if t.decision == "supervised"}
        self.audit.record(
            tool=tool, ok=approval.allow,
            touched=[Touched(n.path, n.root, n.resolved, "supervised",
                             rules.get((n.root, n.resolved), n.rule or None)) for n in needed],
            approval=approval.remember if approval.allow else "denied",
            grant=",".join(grant.id for grant in issued) or None,
        )

    def history_result(
        self, answer: Answer, target: str, since: float | None = None
    ) -> dict[str, Any]:
        """An undo/rewind answer in the contract's shape, with its text; one audit
        line for it (path: the path undone or the id rewound to)."""
        response = answer.public()
        if self.history is not None and answer.meta.history_ids:
            self.history.promote(answer.meta.history_ids, answer.tool, since)
        result = answer.result if answer.ok else None
        if self.audit is not None:
            # a path left alone fails the record as it fails the command (exit 1): ok
            # false, error "conflict", each such path in `touched`
            error = answer.error or {}
            left = [p for p in (result or {}).get("conflicts", ()) if isinstance(p, str)]
            self.audit.record(tool=answer.tool, ok=answer.ok and not left,
                              error="conflict" if left else error.get("code"), path=target,
                              touched=[{"path": path} for path in left])
        if result is None:
            return response
        # names escaped, as approvals are: the text is shown to a person. A restored
        # path the change taken back had made is gone now: said so, not "restored"
        # (the worker's word, trusted only for paths it also lists as restored).
        told = result.get("removed")
        removed = {p for p in told if isinstance(p, str)} if isinstance(told, list) else set()
        lines = [f"Removed {escaped(path)} (it did not exist then)." if path in removed
                 else f"Restored {escaped(path)}." for path in result["restored"]]
        reasons = result.get("reasons") or {}
        lines += [f"Left {escaped(path)} alone: {escaped(reasons.get(path, 'it changed since'))}"
                  + ("" if reasons.get(path, "").endswith(".") else ".")
                  for path in result["conflicts"]]
        if result["conflicts"]:
            lines.append(FORCE_HINT)
        if "checkpoint" in result:
            lines.append(f"Checkpoint {result['checkpoint']} holds the state before this rewind.")
        response["text"] = "\n".join(lines) or "Nothing to restore."
        return response

    def _remember(self, answer: Answer, meta: Meta) -> None:
        """read_before_write: note the versions this session read or wrote."""
        keys = {t.path: approval_key(t.root, t.resolved) for t in meta.touched}
        result = answer.result or {}
        # one file's version, or each of several files' (a patch's: a moved file's is
        # its new path's)
        listed = result.get("files")
        files = listed if isinstance(listed, list) else [result]
        row = TABLE.get(answer.tool)
        with self._seen_lock:
            self.seen.update(meta.seen)
            if row is None or row.session not in NAME_VERSIONS:
                return
            for found in files:
                if not isinstance(found, dict) or not found.get("ok", True):
                    continue
                path = found.get("to", found.get("path"))
                if isinstance(path, str) and found.get("version") and path in keys:
                    self.seen[keys[path]] = found["version"]

    def _mode_decision(self, name: str, code: str | None) -> dict[str, str]:
        """Decision and rule of a call its tool's mode stopped before any path was
        looked at (a path rule's refusal carries its own, in meta.touched)."""
        decisions = {"tool_disabled": "deny", "approval_required": "supervised",
                     "approval_denied": "supervised"}
        if code not in decisions:
            return {}
        row = TABLE.get(name)
        read_only = self.policy.read_only and row is not None and row.writes
        return {"decision": decisions[code],
                "rule": READ_ONLY_RULE if read_only else TOOL_MODE_RULE}
