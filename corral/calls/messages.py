"""The messages between host and worker: one immutable, typed value each, with
`to_wire()` (the JSON object a frame carries) and `from_wire()`. A worker builds
its answer as an Answer too (tools/registry.execute), never as a dict. What a
worker reports beside a result (Meta and its parts) are msgspec Structs, which
msgspec checks against their types; the others are NamedTuples (docs/
development.md, "Records"), checked by hand where a type cannot say it: an answer
against its request, ok or error, a request's malformed entry dropped rather than
refused.

A worker is confined because the code in it may be made to misbehave, so what it
sends is untrusted: `Answer.from_wire` and `BootReport.from_wire` check every
field the host reads and raise `Malformed` (the worker is then treated as lost).
The content itself (file text, listings) is the worker's to give and is not
copied: a result stays the dict the frame decoded to. Requests come from the
host, which the worker trusts no more: it checks them again where it acts.

Wire shapes (one JSON object per frame):
    call     {"id", "tool", "arguments", "approved", "within"?, "seen"?, "grants"?}
             grants: [[id, "root\0resolved" | null, rule | null, mode?], ...] (GrantRef)
    history  {"id", "history": "undo"|"rewind"|"settle", "tool", ...its fields}
    cleanup  {"id", "cleanup": {"pid", "tool", "arguments"}}   after a crash
             {"id", "cleanup": {"temps": [[root index, path], ...]}}
               both answer {"id", "removed": count} (Removed)
             {"id", "find_temps": true} -> {"id", "temps": [[root index, path, pid], ...]}
               (TempList)
    answer   {"id", "ok", "tool", "result"+"text" | "error", "meta"}
             meta {"touched"?, "bytes"?, "needs_approval"?, "history_bytes"?, "seen"?,
                   "history_ids"?, "grants"? [[id, root, resolved], ...], "diff"?,
                   "dirs_made"?, "history_done"?}   (what is zero or empty left out)
    boot     {"confinement", "pid", "roots"} | {"confine_error"}
(The zygote's control channel: control.py.)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import msgspec
import msgspec.structs

from corral.errors import ERROR_CODES, CorralError
from corral.jsonfast import is_raw
from corral.tool_table import TABLE

if TYPE_CHECKING:
    from msgspec import Raw

HISTORY_OPS = ("undo", "rewind", "settle", "snapshot_walk", "snapshot_restore")


_NO_VERSIONS: Mapping[str, str] = MappingProxyType({})
# quota_exceeded is the host's alone (it counts the quotas): from a worker it is a
# forgery, which would make a client wait and a quota-refusal metric lie.
WORKER_CODES = ERROR_CODES - {"quota_exceeded"}


class Malformed(ValueError):
    """A frame that is not the message it should be (the text says what it is)."""


# -- what a call touched -----------------------------------------------------------


# The parts of Meta are msgspec Structs: msgspec checks a worker's meta against
# their types in C (strict: no bool for an int, no int for a str; counts >= 0;
# the diff bounded) in ~1 us where the hand-written checks took 2-4 us, and a
# Struct class is ~7x cheaper to create at import than a NamedTuple.
Count = Annotated[int, msgspec.Meta(ge=0)]


class Touched(msgspec.Struct, frozen=True):
    """One path a call touched, for the audit record (never contents)."""

    path: str  # as the caller gave it
    root: str  # the root's absolute path
    resolved: str  # root-relative, after resolution
    decision: str
    rule: str | None

    def to_wire(self) -> dict[str, Any]:
        """As it travels to the host, and as the audit log records it (its fields are
        audit.TOUCHED_FIELDS)."""
        return msgspec.structs.asdict(self)


class NeedsApproval(msgspec.Struct, frozen=True, omit_defaults=True):
    """A resolved path a supervised call stopped before acting on: the host asks
    about it and sends the call again with `key` approved."""

    key: str  # access.approval_key(root, resolved)
    root: str
    resolved: str
    path: str  # as the caller gave it
    rule: str | None  # the supervised rule; "" or None: the tool's mode or default action
    size: Count | None = None  # the file's size, for the person asked (None: no such file)
    # Another tool whose mode the stop answers to as well (a patch's Delete File:
    # "delete_file"), a scope of its own for grants; None: the call's tool alone.
    mode: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = msgspec.to_builtins(self)  # size and mode only when set
        return wire


class GrantRef(NamedTuple):
    """A remembered approval as a call carries it to the worker: a path grant names
    its approval key, a rule grant its rule ("": what the tool's mode or the default
    action supervises); either covers only stops of its `mode` (NeedsApproval.mode).
    Only the grants of the call's tool travel."""

    id: str
    key: str | None  # access.approval_key(root, resolved), for a path grant
    rule: str | None  # for a rule grant
    mode: str | None = None  # the other tool whose mode's stops it covers (None: none)

    def to_wire(self) -> list[str | None]:
        # the mode only when there is one: most grants have none
        wire = [self.id, self.key, self.rule]
        return wire if self.mode is None else [*wire, self.mode]


class GrantUse(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A grant the worker's access check let a resolved path through by (on the
    wire [id, root, resolved])."""

    id: str
    root: str
    resolved: str


# -- fields ------------------------------------------------------------------


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _strings(entry: Mapping[str, Any], names: tuple[str, ...]) -> bool:
    for name in names:  # noqa: SIM110 - a loop, not all(generator): every answer passes here
        if type(entry.get(name)) is not str:
            return False
    return True


def _optional_string(value: Any) -> bool:
    return value is None or isinstance(value, str)


# The longest approval diff a worker may send (tools/preview bounds it to less).
MAX_PREVIEW_CHARS = 8 * 1024


class Meta(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a worker tells the host beside the result: never shown to a caller.
    Its parts are what the tools record (tools/base.py: Touched, NeedsApproval).
    On the wire what is zero or empty is left out (most answers)."""

    touched: tuple[Touched, ...] = ()
    bytes: Count = 0  # file bytes read or written, for the audit log
    needs_approval: tuple[NeedsApproval, ...] = ()
    history_bytes: Count = 0  # what this call added to the history store
    seen: Mapping[str, str] = _NO_VERSIONS  # read_before_write versions
    history_ids: tuple[str, ...] = ()  # the records it made, for the host to check and commit
    grants: tuple[GrantUse, ...] = ()  # remembered approvals the call went through by
    # at an approval stop: the change, bounded, for the person asked
    diff: Annotated[str, msgspec.Meta(max_length=MAX_PREVIEW_CHARS)] | None = None
    dirs_made: Count = 0  # missing parent directories it created (the files quota counts them)
    # those of history_ids' records that are small, as written (input: promote.py checks them)
    history_done: tuple[dict[str, Any], ...] = ()

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = msgspec.to_builtins(self)
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> Meta:
        """The meta a worker sent; Malformed (saying which field) for anything else.
        Unknown keys are ignored, as a newer worker's would be."""
        try:
            return msgspec.convert(wire, cls, strict=True)
        except msgspec.ValidationError as exc:
            raise Malformed(f"meta that is not one: {exc}") from None


# -- requests (host -> worker) ---------------------------------------------------


class CallRequest(NamedTuple):
    """One tool call. `tool` and `arguments` are the caller's, unchecked: the
    worker looks the tool up and validates them itself."""

    tool: Any
    arguments: Any
    approved: tuple[str, ...] = ()  # NeedsApproval keys the host's approver said yes to
    within: tuple[str, ...] | None = None  # absolute paths narrowing this call
    seen: Mapping[str, str] | None = None  # read_before_write: versions this session knows
    id: int = 0
    # Host side only: the caller writes the answer out as JSON, so a large read's text
    # and content may come back as JSON text (jsonfast.Raw), never decoded in the host.
    raw: bool = False
    grants: tuple[GrantRef, ...] = ()  # remembered approvals of this tool (grants.Grants)

    def numbered(self, id: int) -> CallRequest:
        return self._replace(id=id)


    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "id": self.id, "tool": self.tool, "arguments": self.arguments,
            "approved": list(self.approved),
        }
        if self.within is not None:
            wire["within"] = list(self.within)
        if self.seen is not None:
            wire["seen"] = dict(self.seen)
        if self.grants:  # absent in the common case: no grant of this tool
            wire["grants"] = [grant.to_wire() for grant in self.grants]
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> CallRequest:
        within, seen, approved = wire.get("within"), wire.get("seen"), wire.get("approved")
        grants = wire.get("grants")
        return cls(
            wire.get("tool"), wire.get("arguments", {}),
            tuple([a for a in approved if type(a) is str]) if type(approved) is list else (),
            tuple(within) if type(within) is list else None,
            seen if type(seen) is dict else None, _id(wire),
            grants=_grant_refs(grants) if grants is not None else (),
        )


def _grant_refs(wire: Any) -> tuple[GrantRef, ...]:
    """The grants a call carries; a malformed entry is dropped (it grants nothing)."""
    if type(wire) is not list:
        return ()
    return tuple([
        GrantRef(*entry) for entry in wire
        if type(entry) is list and len(entry) in (3, 4) and type(entry[0]) is str
        and all(_optional_string(part) for part in entry[1:])
    ])


class HistoryRequest(NamedTuple):
    """undo (path), rewind (to: a checkpoint id) or settle (pids: writers that died)."""

    op: str
    path: str | None = None
    to: str | None = None
    force: bool = False
    pids: tuple[int, ...] = ()
    id: int = 0

    @property
    def tool(self) -> str:
        """The name its answer and audit line carry."""
        return self.op if self.op in ("undo", "rewind") else "history"

    def numbered(self, id: int) -> HistoryRequest:
        return self._replace(id=id)


    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"id": self.id, "history": self.op, "tool": self.tool}
        if self.op == "undo":
            wire.update(path=self.path, force=self.force)
        elif self.op == "rewind" or self.op.startswith("snapshot_"):
            wire.update(to=self.to, force=self.force)
        else:
            wire["pids"] = list(self.pids)
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> HistoryRequest:
        pids = wire.get("pids")
        return cls(
            str(wire["history"]), wire.get("path"), wire.get("to"), bool(wire.get("force")),
            tuple(p for p in pids if is_count(p)) if isinstance(pids, list) else (), _id(wire),
        )


class CleanupRequest(NamedTuple):
    """After a worker died mid-call: remove the temp files it may have left where
    its call (`tool` with its cleanup_arguments, tool_table) was writing."""

    pid: int
    tool: Any
    arguments: Mapping[str, Any]
    id: int = 0

    @classmethod
    def after(cls, pid: int, call: CallRequest | HistoryRequest) -> CleanupRequest:
        arguments = call.arguments if isinstance(call, CallRequest) else {}
        given = arguments if isinstance(arguments, dict) else {}
        row = TABLE.get(call.tool) if isinstance(call.tool, str) else None
        names = row.cleanup_arguments if row is not None else ()
        return cls(pid, call.tool, {k: given[k] for k in names if k in given}, -call.id)


    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "cleanup": {
            "pid": self.pid, "tool": self.tool, "arguments": dict(self.arguments)}}


class FindTemps(NamedTuple):
    """List every temp file in the writable roots (the start-up sweep)."""

    id: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "find_temps": True}


class RemoveTemps(NamedTuple):
    """Remove exactly these temp files ([root index, path] pairs)."""

    temps: tuple[tuple[int, str], ...]
    id: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "cleanup": {"temps": [list(t) for t in self.temps]}}


# Everything the host sends a worker.
ToWorker = CallRequest | HistoryRequest | CleanupRequest | FindTemps | RemoveTemps


def request_from_wire(wire: dict[str, Any]) -> ToWorker:
    """The request a frame holds (in the worker). Unknown shapes are calls: the
    registry then answers them with its own error."""
    if "tool" in wire and "history" not in wire and "cleanup" not in wire:
        return CallRequest.from_wire(wire)  # the common case first
    cleanup = wire.get("cleanup")
    if isinstance(cleanup, dict):
        if "temps" in cleanup:
            temps = cleanup["temps"] if isinstance(cleanup["temps"], list) else []
            return RemoveTemps(tuple(
                (t[0], t[1]) for t in temps
                if isinstance(t, list) and len(t) == 2 and is_count(t[0]) and isinstance(t[1], str)
            ), _id(wire))
        arguments = cleanup.get("arguments")
        return CleanupRequest(
            int(cleanup.get("pid") or 0), cleanup.get("tool"),
            arguments if isinstance(arguments, dict) else {}, _id(wire),
        )
    if wire.get("find_temps") is True:
        return FindTemps(_id(wire))
    if wire.get("history") in HISTORY_OPS:
        return HistoryRequest.from_wire(wire)
    return CallRequest.from_wire(wire)


def _id(wire: dict[str, Any]) -> int:
    value = wire.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# -- answers (worker -> host) ---------------------------------------------------


class Answer(NamedTuple):
    """A tool's (or undo/rewind's) answer: the contract's result plus Meta.
    `public()` is what a caller of Sandbox.call gets. A read's text and content are
    JSON text (jsonfast.Raw) only when the request asked for that (CallRequest.raw)."""

    ok: bool
    tool: Any
    result: dict[str, Any] | None = None
    text: str | Raw | None = None
    error: dict[str, Any] | None = None  # {"code", "message", "rule"?}
    meta: Meta = Meta()
    id: int | None = None

    def public(self) -> dict[str, Any]:
        if self.ok:
            return {"ok": True, "tool": self.tool, "result": self.result, "text": self.text}
        return {"ok": False, "tool": self.tool, "error": self.error}

    def to_wire(self) -> dict[str, Any]:
        wire = self.public()
        wire["meta"] = self.meta.to_wire()
        wire["id"] = self.id
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any], request: CallRequest | HistoryRequest) -> Answer:
        """The answer to `request`; Malformed if the frame cannot be one."""
        if wire.get("id") != request.id:
            raise Malformed("an answer to another request")
        tool = request.tool
        if wire.get("tool") != tool and (isinstance(tool, str) or wire.get("tool") != ""):
            raise Malformed("an answer for another tool")
        meta = Meta.from_wire(wire.get("meta", {}))
        ok = wire.get("ok")
        if ok is True:
            result, text = wire.get("result"), wire.get("text")
            # text is JSON text (jsonfast.Raw) when the request asked for that
            if not isinstance(result, dict) or not (isinstance(text, str) or is_raw(text)):
                raise Malformed("a result without its dict and text")
            image = result.get("image")
            if image is not None and not (
                isinstance(image, dict) and _strings(image, ("media_type", "data"))
            ):
                raise Malformed("an image block without media_type and data")
            return cls(True, wire["tool"], result, text, None, meta, request.id)
        if ok is False:
            error = wire.get("error")
            if not isinstance(error, dict) or error.get("code") not in WORKER_CODES:
                raise Malformed("an error without a known code")
            if not isinstance(error.get("message"), str) or not _optional_string(
                error.get("rule")
            ):
                raise Malformed("an error without a message")
            return cls(False, wire["tool"], None, None, error, meta, request.id)
        raise Malformed("an answer that is neither ok nor an error")


def error_answer(
    tool: Any, error: CorralError | str, message: str = "", *, meta: Meta | None = None,
    id: int | None = None,
) -> Answer:
    """The one way an error answer is made: from a CorralError, or a code and message."""
    body = error.to_dict() if isinstance(error, CorralError) else {
        "code": error, "message": message}
    return Answer(False, tool, error=body, meta=meta if meta is not None else Meta(), id=id)


def host_bug_answer(tool: Any, exc: Exception) -> Answer:
    """A bug in the host's own code, reported to the caller (the face also prints the
    traceback) instead of a request that never gets an answer."""
    return error_answer(
        tool, "io_error", f"internal error in the corral host: {type(exc).__name__}: {exc}")


class Removed(NamedTuple):
    """How many temp files a cleanup (CleanupRequest, RemoveTemps) removed."""

    id: int
    removed: int

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "removed": self.removed}

    @classmethod
    def from_wire(cls, wire: dict[str, Any], request: CleanupRequest | RemoveTemps) -> Removed:
        """The answer to `request`; Malformed for anything else."""
        if wire.get("id") != request.id or not is_count(wire.get("removed")):
            raise Malformed("a cleanup answer without a count")
        return cls(request.id, wire["removed"])


class TempList(NamedTuple):
    """The temp files a FindTemps listed: (root index, path, writer pid)."""

    id: int
    temps: tuple[tuple[int, str, int], ...]

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "temps": [list(t) for t in self.temps]}

    @classmethod
    def from_wire(cls, wire: dict[str, Any], request: FindTemps) -> TempList:
        """The answer to `request`; Malformed for anything else."""
        temps = wire.get("temps")
        if wire.get("id") != request.id or not isinstance(temps, list) or not all(
            isinstance(t, list) and len(t) == 3 and is_count(t[0]) and isinstance(t[1], str)
            and is_count(t[2]) for t in temps
        ):
            raise Malformed("a temp listing that is not [root index, path, pid] triples")
        return cls(request.id, tuple((t[0], t[1], t[2]) for t in temps))


# -- a worker's first frame --------------------------------------------------------


class BootReport(NamedTuple):
    """A new worker's report: the layers it confined itself with and the roots it
    holds, or why it could not confine itself."""

    confinement: dict[str, Any] | None = None
    pid: int | None = None
    roots: tuple[tuple[str, str], ...] = ()  # (path, mode) of each root it holds
    confine_error: str | None = None

    def to_wire(self) -> dict[str, Any]:
        if self.confine_error is not None:
            return {"confine_error": self.confine_error}
        return {"confinement": self.confinement, "pid": self.pid,
                "roots": [list(r) for r in self.roots]}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> BootReport:
        error = wire.get("confine_error")
        if error is not None:
            return cls(confine_error=str(error))
        layers, roots = wire.get("confinement"), wire.get("roots", [])
        if not isinstance(layers, dict) or not isinstance(roots, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(p, str) for p in r)
            for r in roots
        ):
            raise Malformed("a report without its layers and roots")
        pid = wire.get("pid")
        return cls(layers, pid if is_count(pid) else None, tuple((r[0], r[1]) for r in roots))
