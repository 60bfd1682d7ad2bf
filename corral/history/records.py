"""History records as typed, versioned values, checked when read.

Whatever lies in the store is input: a worker wrote the pending records and the
blobs, and even the host's own files may have been torn by a crash or edited by
hand. `record_from_bytes` and `checkpoint_from_bytes` turn one file's bytes into a
value or raise BadRecord (why, in a sentence): a caller skips and reports that
file, and everything else keeps working.

The values are msgspec Structs: msgspec decodes a file straight into them and
checks each field against its type as it goes (strict: no bool for a count, no
number for a text; the literal kinds; no unknown key in a state), ~8x faster
than json.loads and checks by hand; `_checked` adds what a type cannot say.

A record is {"v", "id", "time", "tool", "pid", "entries": [entry...], "undoes"?,
"group"?, "done"?}: one or two entries, but an apply_patch record names every
path of its patch (up to MAX_PATCH_ENTRIES), each with the `temp` beside it that
holds its new file until it lands; `group` joins the records of one change made as several (a
move between roots: a copy, then a delete), undone whole; `done` (no entries)
says the undo of `undoes` finished;
an entry names one path and its state before and after the change (None: the
path did not exist). A committed record, which only the host writes, also says
where each blob lies ("w-<key>/b-<id>-0") with its size and content hash.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, NamedTuple, TypeVar

import msgspec
import msgspec.structs

from corral.fs import temp_owner
from corral.fs.tree import MAX_TREE_ENTRIES
from corral.tool_table import TABLE

VERSION: Final = 1
# A record names a few paths, or a deleted directory's entries (at most
# MAX_TREE_ENTRIES of them, each a path and a few numbers): more is not one of ours.
MAX_RECORD_BYTES = 2 * 1024 * 1024
_HEX = frozenset("0123456789abcdef")
ID_WIDTH = 16 + 6 + 4  # hex: time_ns, pid, counter
# A patch of up to 100 files, a move being two entries; ~0.5 KiB an entry stays far
# inside MAX_RECORD_BYTES.
MAX_PATCH_ENTRIES = 200
Count = Annotated[int, msgspec.Meta(ge=0)]
Id = Annotated[str, msgspec.Meta(pattern=f"^[0-9a-f]{{{ID_WIDTH}}}\\Z")]
Time = Annotated[float, msgspec.Meta(ge=0)]  # and finite (_checked)
KINDS = ("replace", "append", "mkdir", "remove", "move_from", "move_to", "remove_tree")
ACTIONS = ("create", "modify", "delete", "move")
TYPES = ("file", "dir", "symlink", "other")
# One of these names: a pattern, not a Literal, since the callers pass a str.
Kind = Annotated[str, msgspec.Meta(pattern=f"^({'|'.join(KINDS)})\\Z")]
Action = Annotated[str, msgspec.Meta(pattern=f"^({'|'.join(ACTIONS)})\\Z")]
Type = Annotated[str, msgspec.Meta(pattern=f"^({'|'.join(TYPES)})\\Z")]


class BadRecord(ValueError):
    """A store file that is not a record this version wrote."""


def is_id(text: object) -> bool:
    return isinstance(text, str) and len(text) == ID_WIDTH and set(text) <= _HEX


VERSION_WIDTH = 24  # hex digits of fs.version's content hash


def is_version(text: object) -> bool:
    """A content version (fs.version) as a record may name one."""
    return isinstance(text, str) and len(text) == VERSION_WIDTH and set(text) <= _HEX


# A record's kind says how it is checked, shown and settled after a crash: a
# "patch" record names every file of one patch, each with the temp beside it that
# holds its new file until it lands, all changed together; a "change" record one or
# two paths (a move names both ends).
PATCH, CHANGE = "patch", "change"


def record_kind(tool: str) -> str:
    """The kind of the records `tool` writes (its row's; undo's own are changes)."""
    row = TABLE.get(tool)
    return PATCH if row is not None and row.record == "batch" else CHANGE


# A Kept stays a NamedTuple with its own wire, by hand: msgspec maps a list to fields
# by position, and a kept entry's list changes shape with its type.
class Kept(NamedTuple):
    """One entry beneath a deleted directory, as its record keeps it: the path below
    the directory, type, permission bits, and a file's size (with its content hash
    once the host committed the record) or a symlink's target. On the wire a list,
    [path, type, mode, size or target, hash?]: a tree has thousands."""

    path: str
    type: str
    mode: int
    size: int = 0
    target: str | None = None
    hash: str | None = None

    def to_wire(self) -> list[Any]:
        if self.type == "symlink":
            return [self.path, self.type, self.mode, self.target]
        if self.type == "dir":
            return [self.path, self.type, self.mode]
        return [self.path, self.type, self.mode, self.size,
                *([] if self.hash is None else [self.hash])]

    @classmethod
    def from_wire(cls, wire: Any) -> Kept:
        _check(isinstance(wire, list) and 3 <= len(wire) <= 5, "a kept entry that is not a list")
        path, kind, mode, *rest = wire
        _check(isinstance(path, str) and kind in ("file", "dir", "symlink") and _count(mode),
               "a kept entry without its path, type and mode")
        if kind == "dir":
            _check(not rest, "a kept directory with more than its mode")
            return cls(path, kind, mode)
        if kind == "symlink":
            _check(len(rest) == 1 and isinstance(rest[0], str), "a kept symlink without a target")
            return cls(path, kind, mode, target=rest[0])
        _check(1 <= len(rest) <= 2 and _count(rest[0]), "a kept file without its size")
        digest = rest[1] if len(rest) == 2 else None
        _check(digest is None or isinstance(digest, str), "a kept file whose hash is not text")
        return cls(path, kind, mode, rest[0], hash=digest)


# A State's tree is typed by a class msgspec does not know, so that msgspec hands
# the list to _decode_tree (each Kept by its own from_wire) rather than map it by
# position. For the type checker, and in every State made here, a tuple of Kept.
if TYPE_CHECKING:
    KeptList = tuple[Kept, ...]
else:
    class KeptList(tuple):
        """The entries beneath a deleted directory, as a State's type names them."""


class State(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A path's state: its type and, for files, mode, size and how it is known
    (`blob`: where the old bytes are kept, with `hash` once committed; `version`:
    a content hash; `tail`: the hash of an append's bytes)."""

    type: Type
    mode: Count | None = None
    size: Count | None = None
    blob: str | None = None
    hash: str | None = None
    version: str | None = None
    tail: str | None = None
    target: str | None = None
    ino: Count | None = None
    tree: KeptList | None = None  # a deleted directory's entries (remove_tree)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = msgspec.to_builtins(self)
        if self.tree is not None:
            wire["tree"] = [kept.to_wire() for kept in self.tree]
        return wire


class Entry(msgspec.Struct, frozen=True, omit_defaults=True):
    """One path a change touched (`to`/`source`: a move's other end, as shown)."""

    root: str  # absolute (_checked)
    rel: str
    path: str
    kind: Kind
    action: Action
    before: State | None
    after: State | None
    made: tuple[str, ...] = ()
    to: str | None = None
    source: str | None = None
    temp: str | None = None  # a patch's: root-relative, its new file (or old, set aside)

    def temp_is_writers(self, pid: int) -> bool:
        """The entry names a temp beside its path, named as the writer `pid` names
        temps (fs.temp_name)."""
        return self.temp is not None and posixpath.dirname(self.temp) == posixpath.dirname(
            self.rel) and temp_owner(posixpath.basename(self.temp)) == pid

    def has_tree(self) -> bool:
        return any(state is not None and state.tree is not None
                   for state in (self.before, self.after))

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = msgspec.to_builtins(self)
        if self.has_tree():  # a tree's Kept lists are their own (Kept.to_wire)
            for key, state in (("before", self.before), ("after", self.after)):
                if state is not None:
                    wire[key] = state.to_wire()
        return wire


class Record(msgspec.Struct, frozen=True, omit_defaults=True):
    """One change: what a call did to one or two paths (a move names both ends)."""

    id: Id
    time: Time
    tool: Annotated[str, msgspec.Meta(min_length=1)]
    pid: Count
    entries: tuple[Entry, ...]
    undoes: Id | None = None
    group: Id | None = None
    done: bool = False
    v: Literal[1] = VERSION

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = msgspec.to_builtins(self)
        wire["v"] = self.v  # a default, and every file names its version
        if any(entry.has_tree() for entry in self.entries):
            wire["entries"] = [entry.to_wire() for entry in self.entries]
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> Record:
        return _checked(_converted(wire, cls))


class Checkpoint(msgspec.Struct, frozen=True):
    id: Id
    time: Time
    label: str | None
    v: Literal[1] = VERSION

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = msgspec.to_builtins(self)
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> Checkpoint:
        return _finite(_converted(wire, cls))


_Value = TypeVar("_Value", Record, Checkpoint)


def _checked(record: Record) -> Record:
    """What the types do not say: a finite time, absolute roots, how many entries."""
    entries = record.entries
    if record.done:  # an undo's last word: it names what it finished, and nothing else
        _check(record.undoes is not None and not entries, "a done record with entries")
    elif record_kind(record.tool) == PATCH:
        _check(1 <= len(entries) <= MAX_PATCH_ENTRIES,
               f"a patch record without 1 to {MAX_PATCH_ENTRIES} entries")
    else:
        _check(1 <= len(entries) <= 2, "a record without one or two entries")
        _check(all(entry.temp is None for entry in entries),
               "a temp in a record that is not a patch's")
    _check(all(os.path.isabs(entry.root) for entry in entries),
           "an entry whose root is not absolute")
    return _finite(record)


def _finite(value: _Value) -> _Value:
    _check(math.isfinite(value.time), f"a {type(value).__name__.lower()} without a valid time")
    return value


def _decode_tree(kind: type, wire: Any) -> KeptList:
    """msgspec's hook for the one type it cannot decode itself (KeptList)."""
    _check(kind is KeptList and type(wire) in (list, tuple) and len(wire) <= MAX_TREE_ENTRIES,
           f"a state whose tree is not a list of at most {MAX_TREE_ENTRIES} entries")
    return KeptList([Kept.from_wire(kept) for kept in wire])  # convert() checks its type


def _converted(wire: Any, kind: type[_Value]) -> _Value:
    try:
        return msgspec.convert(wire, kind, strict=True, dec_hook=_decode_tree)
    except msgspec.ValidationError as exc:
        raise BadRecord(f"not a {kind.__name__.lower()}: {exc}") from None


_RECORD = msgspec.json.Decoder(Record, dec_hook=_decode_tree)
_CHECKPOINT = msgspec.json.Decoder(Checkpoint, dec_hook=_decode_tree)


def _decoded(data: bytes, decoder: msgspec.json.Decoder[_Value], kind: type[_Value]) -> _Value:
    """A store file's value; BadRecord if it is not JSON, too big or not a `kind`."""
    _check(len(data) <= MAX_RECORD_BYTES, "a file too big to be a record")
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise BadRecord(f"not a {kind.__name__.lower()}: {exc}") from None
    except (msgspec.DecodeError, RecursionError):
        pass  # a lone surrogate escape (a file name's undecodable byte), or not JSON
    try:
        wire = json.loads(data)
    except (ValueError, RecursionError):
        raise BadRecord("a file that is not JSON (torn by a crash?)") from None
    return _converted(wire, kind)


def record_from_bytes(data: bytes) -> Record:
    return _checked(_decoded(data, _RECORD, Record))


def checkpoint_from_bytes(data: bytes) -> Checkpoint:
    return _finite(_decoded(data, _CHECKPOINT, Checkpoint))


def dump(value: Record | Checkpoint) -> bytes:
    return dump_wire(value.to_wire())


_ENCODER = msgspec.json.Encoder()


def dump_wire(wire: dict[str, Any]) -> bytes:
    # msgspec (~1 us a record against json's ~9); json where a file name holds a lone
    # surrogate (an undecodable byte), which msgspec refuses and json escapes
    try:
        return _ENCODER.encode(wire)
    except UnicodeEncodeError:
        return json.dumps(wire, separators=(",", ":")).encode()


def _check(condition: object, why: str) -> None:
    if not condition:
        raise BadRecord(why)


def _count(value: object) -> bool:
    return type(value) is int and value >= 0
