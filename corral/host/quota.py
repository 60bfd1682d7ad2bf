"""Quotas ([quota], or a tenant's in tenants.toml), counted in the host.

`QuotaUsage` holds the counters: one per sandbox, or one a host shares between
sandboxes (a tenant's sessions share one). `Quotas` is a sandbox's quotas over
its usage: `admit` runs before a call takes a worker, `settle` once its answer
is back. Both are driven by flow.CallPlan, so every face counts the same way.

Each quota is a sliding window, not a token bucket: "N per minute" then holds
for *every* 60 seconds (a bucket of N refilled at N a minute lets nearly 2N
through in one minute: a full bucket, then the refill), and `retry_after_s`
is the moment enough of the window's oldest use expires, which is when the
call would be accepted if nothing else came in first.

What a call costs (its tool's row in tool_table says which of these), and what
the host trusts of it (a worker's answer is input):
- a call: 1, counted when the host accepts it, whatever becomes of it;
- bytes written: a sized write (write_file, append_file) costs its content's
  length, known from the request and reserved before it runs (a write that does
  not fit is refused then); a measured or copied one's figure is the worker's
  (Meta.bytes: an edited or copied file's new size), raised to a floor and cut
  to a cap the request and the limits fix, and refused before it runs only when
  nothing is left of the quota;
- files created: at most what the request could create, reserved before the call
  runs: its file (1, or a patch's added files) and each directory on its paths'
  way below their root, since any may be missing (the host never looks);
  the answer may only lower it (Meta.dirs_made: the missing parents it made).
  Reserved, not counted afterwards: calls in flight together cannot pass the
  quota, nor one deep path; a call whose reservation is over the whole quota is
  refused (too_large).
An error answer releases its reservation (a failed call changed nothing), and a
dry run (`dry_run: true`) is a call only: it writes and creates nothing.
"""

from __future__ import annotations

import math
import posixpath
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from corral.calls.messages import Answer
from corral.config import Limits, QuotaOptions
from corral.errors import CorralError, shown_path
from corral.tool_table import TABLE, ToolRow

if TYPE_CHECKING:
    from corral.tools.patch_format import FilePatch

CALLS, BYTES, FILES = "calls_per_minute", "write_bytes_per_hour", "files_created_per_hour"
WINDOWS = {CALLS: 60.0, BYTES: 3600.0, FILES: 3600.0}  # each quota's window, in seconds
# Uses closer together than window/SLOTS share one slot, dated by the latest of them:
# memory stays bounded under a flood, and a slot expires no earlier than its uses.
SLOTS = 1000
MEASURED = ("measured", "copied")  # tool_table's costs the worker's figure tells
WHAT = {CALLS: "calls accepted in the last minute", BYTES: "bytes written in the last hour",
        FILES: "files created in the last hour"}


class _Slot:
    __slots__ = ("amount", "at", "live")

    def __init__(self, at: float, amount: int) -> None:
        self.at, self.amount, self.live = at, amount, True


class _Window:
    """The uses of one quota in the last `span` seconds."""

    __slots__ = ("grain", "slots", "span", "total")

    def __init__(self, span: float) -> None:
        self.span, self.grain = span, span / SLOTS
        self.slots: deque[_Slot] = deque()
        self.total = 0

    def expire(self, now: float) -> None:
        while self.slots and self.slots[0].at + self.span <= now:
            slot = self.slots.popleft()
            self.total -= slot.amount
            slot.live = False

    def add(self, now: float, amount: int) -> _Slot:
        last = self.slots[-1] if self.slots else None
        if last is not None and now - last.at < self.grain:
            last.at, last.amount = now, last.amount + amount
        else:
            last = _Slot(now, amount)
            self.slots.append(last)
        self.total += amount
        return last

    def adjust(self, slot: _Slot, delta: int, now: float) -> None:
        """A reservation settled: `delta` more (or less) than reserved."""
        if slot.live:
            delta = max(delta, -slot.amount)
            slot.amount += delta
            self.total += delta
        elif delta > 0:  # expired meanwhile: the extra is a use of now
            self.add(now, delta)

    def wait(self, now: float, free: int) -> float:
        """Seconds until at least `free` of the total has expired."""
        gone = 0
        for slot in self.slots:
            gone += slot.amount
            if gone >= free:
                return slot.at + self.span - now
        return self.span  # not reached: free <= total, as callers ensure


Reservation = dict[str, tuple[_Slot, int]]  # quota -> (its slot, the amount reserved)


class QuotaUsage:
    """The counters of one sandbox, or of every sandbox given the same one (a
    tenant's sessions). Thread-safe; `clock` (monotonic seconds) is for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._windows = {name: _Window(span) for name, span in WINDOWS.items()}

    def take(
        self, limits: dict[str, int], wants: dict[str, int], room: dict[str, int] | None = None
    ) -> Reservation | tuple[str, float]:
        """Reserve `wants` (quota -> amount) in the window of each quota `limits`
        bounds, all or none; `room`: amounts that must fit without being reserved.
        Else (the quota whose room comes last, seconds until it does)."""
        needs = dict(room) if room else {}
        for name, amount in wants.items():
            if amount > needs.get(name, 0):
                needs[name] = amount
        with self._lock:
            now = self._clock()
            refusal: tuple[str, float] | None = None
            for name, needed in needs.items():
                limit = limits.get(name)
                if limit is None:
                    continue
                window = self._windows[name]
                window.expire(now)
                over = window.total + needed - limit
                if over > 0:
                    wait = window.wait(now, over)
                    if refusal is None or wait > refusal[1]:
                        refusal = (name, wait)
            if refusal is not None:
                return refusal
            # a quota that needs only room gets an empty slot: its use is settled later
            return {name: (self._windows[name].add(now, wants.get(name, 0)), wants.get(name, 0))
                    for name in needs if name in limits}

    def settle(self, reservation: Reservation, used: dict[str, int]) -> None:
        """Correct each reservation to what the call used."""
        with self._lock:
            now = self._clock()
            for name, (slot, reserved) in reservation.items():
                window = self._windows[name]
                window.expire(now)  # a slot past its window takes nothing more
                window.adjust(slot, used.get(name, 0) - reserved, now)

    def used(self, name: str) -> int:
        """What the window of quota `name` holds now."""
        with self._lock:
            window = self._windows[name]
            window.expire(self._clock())
            return window.total


class Quotas:
    """One sandbox's quotas over its usage (see the module docstring)."""

    def __init__(self, quotas: QuotaOptions, usage: QuotaUsage, limits: Limits,
                 roots: Sequence[str] = ()) -> None:
        self.quotas, self.usage, self.limits = quotas, usage, limits
        # an absolute path's depth counts from its root (the roots' own paths exist)
        self._roots = sorted((root.rstrip("/") for root in roots), key=len, reverse=True)
        self._bounds = {name: getattr(quotas, name) for name in WINDOWS
                        if getattr(quotas, name) is not None}

    def admit(self, tool: str, args: dict[str, Any],
              files: Sequence[FilePatch]) -> Reservation | CorralError:
        """Count a call the host accepts, before it takes a worker; or why not.
        `files`: what its patch changes (patch_format.files_of; none for a call
        without a patch)."""
        row = TABLE[tool]
        wants = {CALLS: 1}
        if args.get("dry_run") is True:  # changes nothing (the tool's contract): a call only
            return self._taken(self.usage.take(self._bounds, wants))
        room: dict[str, int] = {}
        if row.creates in ("one", "per_added_file"):
            # a patch that can make nothing (an edit) is not held back by this quota
            created, parents = _most_created(row, files), self._most_parents(row, args, files)
            limit = self.quotas.files_created_per_hour
            if limit is not None and created + parents > limit:  # no wait would be honest
                return CorralError("too_large", _never_created(row, args, created, parents,
                                                               limit))
            if created + parents:
                wants[FILES] = created + parents
        size = _content_bytes(row, args)
        if size is not None:
            wants[BYTES] = size
            limit = self.quotas.write_bytes_per_hour
            if limit is not None and size > limit:
                return CorralError(
                    "too_large", f"content for {shown_path(args['path'])} is {size} bytes, over "
                    f"the quota [quota] write_bytes_per_hour = {limit}, so it can never be "
                    "accepted.")
        elif row.cost in MEASURED:
            room[BYTES] = 1  # its size shows afterwards: some must be left
        return self._taken(self.usage.take(self._bounds, wants, room))

    def _taken(self, taken: Reservation | tuple[str, float]) -> Reservation | CorralError:
        """The reservation, or the refusal naming the quota and when it has room."""
        if isinstance(taken, dict):
            return taken
        name, wait = taken
        limit = getattr(self.quotas, name)
        retry = math.ceil(wait * 1000) / 1000  # never sooner than it would be accepted
        return CorralError(
            "quota_exceeded",
            f"the quota [quota] {name} = {limit} has no room for this call "
            f"({self.usage.used(name)} {WHAT[name]}); it would be accepted in {retry} s.",
            retry_after_s=retry,
        )

    def settle(self, reservation: Reservation, tool: str, args: dict[str, Any],
               files: Sequence[FilePatch], answer: Answer) -> None:
        """Count what the call did, as far as the host can trust it (`files` as
        admit's). Its call was counted for good when it was admitted."""
        if not answer.ok:  # nothing changed
            self.release(reservation)
            return
        held = _held(reservation)
        if not held:  # a call that neither writes nor creates: nothing to correct
            return
        row = TABLE[tool]
        used = {BYTES: self._written(row, args, files, answer)}
        if FILES in held:  # a worker's figures may lower the reservation, never raise it
            used[FILES] = min(_created(row, answer), _most_created(row, files)) + min(
                answer.meta.dirs_made, self._most_parents(row, args, files))
        self.usage.settle(held, used)

    def release(self, reservation: Reservation) -> None:
        """A call that changed nothing (it failed, or was given up on while a person
        was asked): what it reserved to write and create is freed; its call stays."""
        held = _held(reservation)
        if held:
            self.usage.settle(held, {})

    def _written(self, row: ToolRow, args: dict[str, Any], files: Sequence[FilePatch],
                 answer: Answer) -> int:
        """The bytes a finished call wrote: the request's when it fixes them, else the
        worker's figure between a floor and a cap the host knows."""
        size = _content_bytes(row, args)
        if size is not None:
            return size
        if row.cost not in MEASURED:
            return 0
        if row.cost == "copied":
            most = self.limits.max_file_bytes  # the source is read within it
        else:  # each file's new size (a patch's files each)
            most = (self.limits.max_file_bytes + self.limits.max_write_bytes) * max(1, len(files))
        # at least an edit's new text (another tool's arguments hold none)
        return max(_edit_floor(args), min(answer.meta.bytes, most))

    def _most_parents(self, row: ToolRow, args: dict[str, Any],
                      files: Sequence[FilePatch]) -> int:
        """The parent directories a call's paths could need made: the directories on
        their way below their roots, each counted once (a patch's: of the files it
        adds and where it moves files to; ten files added in one new directory make
        one). Lexical: the worker makes at most one directory for each."""
        if row.creates == "per_added_file":
            paths = [name for change in files
                     for name in (change.path if change.action == "add" else None,
                                  change.move_to) if name is not None]
        else:
            paths = [args["path"]] if isinstance(args.get("path"), str) else []
        above: set[str] = set()
        for path in paths:
            parts = self._below_root(posixpath.normpath(path)).split("/")[:-1]
            above.update("/".join(parts[:depth]) for depth in range(1, len(parts) + 1))
        return len(above)

    def _below_root(self, path: str) -> str:
        """A path relative to its root: an absolute one under a root loses the root's
        part, any other is as given (one outside every root is refused by the worker)."""
        if path.startswith("/"):
            for root in self._roots:
                if path.startswith(root + "/"):
                    return path[len(root) + 1:]
        return path.strip("/")


def _held(reservation: Reservation) -> Reservation:
    """What a call reserved besides itself (its call is counted for good)."""
    return {name: taken for name, taken in reservation.items() if name != CALLS}


def _content_bytes(row: ToolRow, args: dict[str, Any]) -> int | None:
    """The bytes a sized write (write_file, append_file) puts in, from its request;
    else None. Counted, not encoded, where that is cheap: this runs on every such call."""
    if row.cost != "sized":
        return None
    content = args["content"]
    if args.get("encoding") == "base64":
        # what b64decode(validate=True) gives a valid string (its padding, which may be
        # longer than needed, carries no data); an invalid one fails in the worker
        return len(content.rstrip("=")) * 3 // 4
    if content.isascii():
        return len(content)
    return len(content.encode("utf-8", "surrogatepass"))


def _never_created(row: ToolRow, args: dict[str, Any], created: int, parents: int,
                   limit: int) -> str:
    """Why a call that reserves more than the whole files quota is refused."""
    why = f"over the quota [quota] files_created_per_hour = {limit}, so it can never be accepted"
    if row.creates == "per_added_file":
        made = f" and may make {parents} directories for them" if parents else ""
        return f"the patch adds {created} files{made}, {created + parents} in all, {why}."
    return (f"{shown_path(args['path'])} lies {parents} directories deep: the call reserves "
            "what it creates and each directory on the way it may have to make, "
            f"{created + parents} in all, "
            f"{why} (the host cannot tell which exist); use a shallower path.")


def _most_created(row: ToolRow, files: Sequence[FilePatch]) -> int:
    if row.creates == "one":
        return 1
    if row.creates == "per_added_file":
        return sum(1 for change in files if change.action == "add")
    return 0


def _created(row: ToolRow, answer: Answer) -> int:
    """Files a successful call says it created (capped by the caller)."""
    result = answer.result or {}
    if row.creates == "per_added_file":
        files = result.get("files")
        return sum(1 for f in files if isinstance(f, dict) and f.get("action") == "add") \
            if isinstance(files, list) else 0
    if row.creates != "one":
        return 0
    if "created" in result:  # write_file, create_directory
        return 1 if result["created"] is True else 0
    if "bytes_appended" in result:  # append_file: a new file holds just what was appended
        return 1 if result.get("size") == result["bytes_appended"] else 0
    return 1  # copy_file; onto an existing file (overwrite) too: the host cannot tell


def _edit_floor(args: dict[str, Any]) -> int:
    """Bytes an edit's new file holds at least: its largest new_string without
    whitespace (tolerant matching may re-indent it or change its line endings)."""
    edits = args.get("edits") or [args]
    return max((len("".join(str(edit.get("new_string", "")).split()).encode(
        "utf-8", "surrogatepass")) for edit in edits if isinstance(edit, dict)), default=0)
