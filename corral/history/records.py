"""History records as typed, versioned values, checked when read.

Whatever lies in the store is input: a worker wrote the pending records and the
blobs, and even the host's own files may have been torn by a crash or edited by
hand. `record_from_wire` and `checkpoint_from_wire` turn one file's bytes into a
value or raise BadRecord (why, in a sentence): a caller skips and reports that
file, and everything else keeps working.

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
from typing import Any, NamedTuple

from corral.fs import temp_owner
from corral.fs.tree import MAX_TREE_ENTRIES
from corral.tool_table import TABLE

VERSION = 1
# A record names a few paths, or a deleted directory's entries (at most
# MAX_TREE_ENTRIES of them, each a path and a few numbers): more is not one of ours.
MAX_RECORD_BYTES = 2 * 1024 * 1024
KINDS = ("replace", "append", "mkdir", "remove", "move_from", "move_to", "remove_tree")
KEPT_TYPES = ("file", "dir", "symlink")
ACTIONS = ("create", "modify", "delete", "move")
TYPES = ("file", "dir", "symlink", "other")
_HEX = frozenset("0123456789abcdef")
ID_WIDTH = 16 + 6 + 4  # hex: time_ns, pid, counter
# A patch of up to 100 files, a move being two entries; ~0.5 KiB an entry stays far
# inside MAX_RECORD_BYTES.
MAX_PATCH_ENTRIES = 200


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
        _check(isinstance(path, str) and kind in KEPT_TYPES and _count(mode),
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


class State(NamedTuple):
    """A path's state: its type and, for files, mode, size and how it is known
    (`blob`: where the old bytes are kept, with `hash` once committed; `version`:
    a content hash; `tail`: the hash of an append's bytes)."""

    type: str
    mode: int | None = None
    size: int | None = None
    blob: str | None = None
    hash: str | None = None
    version: str | None = None
    tail: str | None = None
    target: str | None = None
    ino: int | None = None
    tree: tuple[Kept, ...] | None = None  # a deleted directory's entries (remove_tree)

    def to_wire(self) -> dict[str, Any]:
        wire = {key: value for key, value in self._asdict().items() if value is not None}
        if self.tree is not None:
            wire["tree"] = [kept.to_wire() for kept in self.tree]
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> State | None:
        if wire is None:
            return None
        _check(isinstance(wire, dict), "a state that is not an object")
        _check(wire.get("type") in TYPES, "a state without a known type")
        unknown = set(wire) - set(cls._fields)
        _check(not unknown, f"a state with unknown keys {sorted(unknown)}")
        for key in ("mode", "size", "ino"):
            _check(_count(wire.get(key, 0)), f"a state whose {key} is not a count")
        for key in ("blob", "hash", "version", "tail", "target"):
            _check(isinstance(wire.get(key, ""), str), f"a state whose {key} is not text")
        tree = wire.get("tree")
        if tree is None:
            return cls(**wire)
        _check(isinstance(tree, list) and len(tree) <= MAX_TREE_ENTRIES,
               f"a state whose tree is not a list of at most {MAX_TREE_ENTRIES} entries")
        return cls(**{**wire, "tree": tuple(Kept.from_wire(kept) for kept in tree)})


class Entry(NamedTuple):
    """One path a change touched (`to`/`source`: a move's other end, as shown)."""

    root: str
    rel: str
    path: str
    kind: str
    action: str
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

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "root": self.root, "rel": self.rel, "path": self.path, "kind": self.kind,
            "action": self.action,
            "before": None if self.before is None else self.before.to_wire(),
            "after": None if self.after is None else self.after.to_wire(),
        }
        if self.made:
            wire["made"] = list(self.made)
        for key in ("to", "source", "temp"):
            if getattr(self, key) is not None:
                wire[key] = getattr(self, key)
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> Entry:
        _check(isinstance(wire, dict), "an entry that is not an object")
        for key in ("root", "rel", "path"):
            _check(isinstance(wire.get(key), str), f"an entry without its {key}")
        _check(os.path.isabs(wire["root"]), "an entry whose root is not absolute")
        _check(wire.get("kind") in KINDS, "an entry of an unknown kind")
        _check(wire.get("action") in ACTIONS, "an entry of an unknown action")
        made = wire.get("made", [])
        _check(isinstance(made, list) and all(isinstance(m, str) for m in made),
               "an entry whose made is not a list of paths")
        for key in ("to", "source", "temp"):
            _check(isinstance(wire.get(key, ""), str), f"an entry whose {key} is not text")
        return cls(
            wire["root"], wire["rel"], wire["path"], wire["kind"], wire["action"],
            State.from_wire(wire.get("before")), State.from_wire(wire.get("after")),
            tuple(made), wire.get("to"), wire.get("source"), wire.get("temp"),
        )


class Record(NamedTuple):
    """One change: what a call did to one or two paths (a move names both ends)."""

    id: str
    time: float
    tool: str
    pid: int
    entries: tuple[Entry, ...]
    undoes: str | None = None
    group: str | None = None
    done: bool = False
    v: int = VERSION

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"v": self.v, "id": self.id, "time": self.time,
                                "tool": self.tool, "pid": self.pid,
                                "entries": [entry.to_wire() for entry in self.entries]}
        if self.undoes is not None:
            wire["undoes"] = self.undoes
        if self.group is not None:
            wire["group"] = self.group
        if self.done:
            wire["done"] = True
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> Record:
        _check(isinstance(wire, dict), "a record that is not an object")
        _check(wire.get("v") == VERSION, f"a record not of version {VERSION}")
        _check(is_id(wire.get("id")), "a record without a valid id")
        _check(_time(wire.get("time")), "a record without a valid time")
        _check(isinstance(wire.get("tool"), str) and wire["tool"], "a record without its tool")
        _check(_count(wire.get("pid")), "a record without its writer's pid")
        undoes, group, done = wire.get("undoes"), wire.get("group"), wire.get("done", False)
        _check(undoes is None or is_id(undoes), "a record whose undoes is not an id")
        _check(group is None or is_id(group), "a record whose group is not an id")
        _check(type(done) is bool, "a record whose done is not true or false")
        entries = wire.get("entries")
        if done:  # an undo's last word: it names what it finished, and nothing else
            _check(undoes is not None and entries == [], "a done record with entries")
        elif record_kind(wire["tool"]) == PATCH:
            _check(isinstance(entries, list) and 1 <= len(entries) <= MAX_PATCH_ENTRIES,
                   f"a patch record without 1 to {MAX_PATCH_ENTRIES} entries")
        else:
            _check(isinstance(entries, list) and 1 <= len(entries) <= 2,
                   "a record without one or two entries")
            _check(all(isinstance(e, dict) and "temp" not in e for e in entries),
                   "a temp in a record that is not a patch's")
        return cls(wire["id"], float(wire["time"]), wire["tool"], wire["pid"],
                   tuple(Entry.from_wire(entry) for entry in entries), undoes, group, done)


class Checkpoint(NamedTuple):
    id: str
    time: float
    label: str | None
    v: int = VERSION

    def to_wire(self) -> dict[str, Any]:
        return {"v": self.v, "id": self.id, "time": self.time, "label": self.label}

    @classmethod
    def from_wire(cls, wire: Any) -> Checkpoint:
        _check(isinstance(wire, dict), "a checkpoint that is not an object")
        _check(wire.get("v") == VERSION, f"a checkpoint not of version {VERSION}")
        _check(is_id(wire.get("id")), "a checkpoint without a valid id")
        _check(_time(wire.get("time")), "a checkpoint without a valid time")
        label = wire.get("label")
        _check(label is None or isinstance(label, str), "a checkpoint whose label is not text")
        return cls(wire["id"], float(wire["time"]), label)


def parse(data: bytes) -> Any:
    """A store file's JSON; BadRecord if it is not JSON or too big to be a record."""
    _check(len(data) <= MAX_RECORD_BYTES, "a file too big to be a record")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise BadRecord("a file that is not JSON (torn by a crash?)") from None


def record_from_bytes(data: bytes) -> Record:
    return Record.from_wire(parse(data))


def checkpoint_from_bytes(data: bytes) -> Checkpoint:
    return Checkpoint.from_wire(parse(data))


def dump(value: Record | Checkpoint) -> bytes:
    return dump_wire(value.to_wire())


def dump_wire(wire: dict[str, Any]) -> bytes:
    return json.dumps(wire, separators=(",", ":")).encode()


def _check(condition: object, why: str) -> None:
    if not condition:
        raise BadRecord(why)


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and (
        math.isfinite(value) and value >= 0)
