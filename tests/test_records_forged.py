"""A store file is input (a worker wrote it, a crash may have torn it): each field
of a record is checked as it is read, and a forged one is BadRecord, never a value
(history/records.py). What the host writes reads back equal, a file name's
undecodable bytes and a deleted directory's tree included."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.history.records import (
    MAX_PATCH_ENTRIES,
    MAX_RECORD_BYTES,
    BadRecord,
    Checkpoint,
    Entry,
    Kept,
    Record,
    State,
    checkpoint_from_bytes,
    dump,
    record_from_bytes,
)

ID = "0123456789abcdef0123456789"
ENTRY = {"root": "/w", "rel": "a", "path": "a", "kind": "replace", "action": "modify",
         "before": {"type": "file", "mode": 420, "size": 3, "blob": f"b-{ID}-0"},
         "after": {"type": "file", "mode": 420, "size": 4, "version": "a" * 24}}
RECORD = {"v": 1, "id": ID, "time": 1.5, "tool": "write_file", "pid": 7, "entries": [ENTRY]}


def _with(path: str, value: Any) -> dict[str, Any]:
    """RECORD with one field (a dotted path; a number indexes a list) set to `value`."""
    record = json.loads(json.dumps(RECORD))
    *parents, last = [int(part) if part.isdigit() else part for part in path.split(".")]
    where = record
    for part in parents:
        where = where[part]
    where[last] = value
    return record


FORGED = [
    ("v", 2), ("v", True), ("v", "1"), ("id", "x" * 26), ("id", ID.upper()), ("id", ID + "\n"),
    ("id", 5), ("time", -1), ("time", "1"), ("time", True), ("tool", ""), ("tool", 3),
    ("pid", -1), ("pid", 1.0), ("pid", False), ("undoes", "nope"), ("group", 3),
    ("done", 1), ("entries", []), ("entries", [ENTRY] * 3), ("entries", "a"),
    ("entries.0", []), ("entries.0.root", "w"), ("entries.0.root", None),
    ("entries.0.rel", 3), ("entries.0.kind", "chmod"), ("entries.0.action", "Modify"),
    ("entries.0.made", "a"), ("entries.0.made", [1]), ("entries.0.to", 3),
    ("entries.0.temp", "a.tmp"), ("entries.0.before", []),
    ("entries.0.before.type", "fifo"), ("entries.0.before.mode", -1),
    ("entries.0.before.size", True), ("entries.0.before.ino", "1"),
    ("entries.0.before.blob", 3), ("entries.0.before.later", 1),
    ("entries.0.before.tree", "x"), ("entries.0.before.tree", [["a", "fifo", 1]]),
    ("entries.0.before.tree", [["a", "dir", 1, 2]]),
    ("entries.0.before.tree", [["l", "symlink", 1]]),
    ("entries.0.before.tree", [["f", "file", 1, -3]]),
    ("entries.0.before.tree", [["f", "file", 1, 3, 4]]),
]


@pytest.mark.parametrize(("path", "value"), FORGED)
def test_a_forged_field_is_a_bad_record(path: str, value: Any) -> None:
    forged = _with(path, value)
    with pytest.raises(BadRecord):
        record_from_bytes(json.dumps(forged).encode())
    with pytest.raises(BadRecord):
        Record.from_wire(forged)  # a record a worker's answer carries (promote.py)


@pytest.mark.parametrize("data", [
    b"", b"{", b"[]", b"null", b'{"v": 1}', b"\xff", b"[" * 100_000,
    json.dumps(_with("time", float("nan"))).encode(),  # NaN: json's, never msgspec's
    json.dumps(_with("time", float("inf"))).encode(),
    b" " * (MAX_RECORD_BYTES + 1),
])
def test_a_file_that_is_no_record_is_a_bad_record(data: bytes) -> None:
    with pytest.raises(BadRecord):
        record_from_bytes(data)


def test_what_the_entries_may_hold_depends_on_the_record() -> None:
    patch_entry = {**ENTRY, "temp": ".corral-tmp-7-x"}
    patch = {**RECORD, "tool": "apply_patch", "entries": [patch_entry]}
    assert record_from_bytes(json.dumps(patch).encode()).entries[0].temp == ".corral-tmp-7-x"
    with pytest.raises(BadRecord, match="patch"):
        Record.from_wire({**patch, "entries": [patch_entry] * (MAX_PATCH_ENTRIES + 1)})
    done = {**RECORD, "entries": [], "done": True, "undoes": ID}
    assert Record.from_wire(done).done
    with pytest.raises(BadRecord, match="done"):
        Record.from_wire({**done, "entries": [ENTRY]})
    with pytest.raises(BadRecord, match="done"):
        Record.from_wire({**done, "undoes": None})


def test_what_the_host_writes_reads_back_equal() -> None:
    tree = (Kept("f", "file", 0o644, 3, hash="b" * 24), Kept("d", "dir", 0o755),
            Kept("l", "symlink", 0o777, target="../x"), Kept("e", "file", 0o600))
    odd = "caf\udce9.txt"  # a name whose byte is not UTF-8, as Python spells it
    records = [
        Record(ID, 2.0, "delete_directory", 1, (Entry(
            "/w", "d", "d", "remove_tree", "delete", State("dir", 0o755, blob="b", tree=tree),
            None),)),
        Record(ID, 2, "move_file", 1, (
            Entry("/w", odd, odd, "move_from", "move", State("file", 0o644, 1), None, to="b"),
            Entry("/w", "b", "b", "move_to", "move", None, State("file", 0o644, 1),
                  made=("x",), source=odd),
        ), group=ID),
        Record(ID, 3.0, "undo", 1, (), undoes=ID, done=True),
    ]
    for record in records:
        assert record_from_bytes(dump(record)) == record
        assert Record.from_wire(record.to_wire()) == record
        assert json.loads(dump(record))["v"] == 1
    checkpoint = Checkpoint(ID, 4.0, None)
    assert checkpoint_from_bytes(dump(checkpoint)) == checkpoint
    for forged in ({"v": 1, "id": ID, "time": 1}, {"v": 1, "id": ID, "time": -1, "label": None},
                   {"v": 1, "id": ID, "time": 1, "label": 3}):
        with pytest.raises(BadRecord):
            checkpoint_from_bytes(json.dumps(forged).encode())


def test_a_store_written_before_reads_back() -> None:
    """Files as the NamedTuple records wrote them ("v" first, every non-ASCII
    character escaped) are read as they were."""
    old = (b'{"v":1,"id":"' + ID.encode() + b'","time":1700000000.5,"tool":"delete_directory",'
           b'"pid":9,"entries":[{"root":"/w","rel":"d\\u00e9","path":"d\\udce9","kind":'
           b'"remove_tree","action":"delete","before":{"type":"dir","mode":493,"blob":"b",'
           b'"tree":[["f","file",420,3,"' + b"b" * 24 + b'"],["l","symlink",511,"t"],'
           b'["s","dir",448]]},"after":null}]}')
    record = record_from_bytes(old)
    [entry] = record.entries
    assert (entry.rel, entry.path) == ("d\u00e9", "d\udce9")
    assert entry.before is not None and entry.before.tree == (
        Kept("f", "file", 420, 3, hash="b" * 24), Kept("l", "symlink", 511, target="t"),
        Kept("s", "dir", 448))
    assert record_from_bytes(dump(record)) == record
    label = b'{"v":1,"id":"' + ID.encode() + b'","time":5,"label":"caf\\u00e9"}'
    assert checkpoint_from_bytes(label) == Checkpoint(ID, 5.0, "caf\u00e9")
