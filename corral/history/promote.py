"""The host lets a record into the history only through here. A worker wrote it
(in its work directory), so it is input: its shape, its time, its roots, its tool
and its blob are checked, and the committed record the host writes carries the
blob's place, size and content hash, which an undo checks before writing a byte.
A record that fails is dropped (with its blob) and reported, never committed."""

from __future__ import annotations

import contextlib
import os
import posixpath
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from msgspec.structs import replace

from corral.history import kept
from corral.history.links import check_target
from corral.history.records import (
    MAX_RECORD_BYTES,
    PATCH,
    BadRecord,
    Entry,
    Record,
    State,
    checkpoint_from_bytes,
    dump,
    is_version,
    record_from_bytes,
    record_kind,
)
from corral.history.store import (
    CHECKPOINT,
    COMMITTED,
    DONE,
    RECORD,
    Store,
    blob_name,
    blob_size,
    hand_back,
    hash_blob,
    id_pid,
    id_time,
    is_id,
    kept_name,
    publish,
    read_small,
    skipped,
    spare_name,
)
from corral.history.trees import check_kept, check_listing

# Workers and host read one clock; this much slack covers a step of it (NTP) between
# the two readings, and no more: a record dated later than that is refused.
CLOCK_SLACK_S = 1.0


class Expect(NamedTuple):
    """What a record may be: the roots its writer could write (those of the work
    directory it lies in), and for a call's own records the call's tool and the
    wall-clock time it started; for records no call named (the sweep's), the tools
    that record changes and the oldest time the history still keeps."""

    writable: frozenset[str]
    tool: str | None = None
    since: float | None = None
    tools: frozenset[str] | None = None


def promote(
    store: Store, work: str, ids: Iterable[str], expect: Expect,
    given: Sequence[Any] = (), spares: set[str] | None = None,
) -> dict[str, str]:
    """Commit the done records and checkpoints `ids` of the work directory `work`
    (store.fd); returns {name: why} of those refused. A name already committed, or
    gone (another host promoted it), is left as it is. `given`: records as the
    worker's answer carried them (its Meta's history_done), taken instead of reading
    their `.done` files back: they come from the same writer, so they are input
    exactly as those files are, and are checked the same way. `spares`: a record's
    done file goes back to its writer for reuse (store.hand_back), its name added
    here, rather than being removed."""
    refused: dict[str, str] = {}
    carried = {wire.get("id"): wire for wire in given if isinstance(wire, dict)}
    for item in ids:
        if not is_id(item):
            refused[str(item)[:64]] = "not an id"
            continue
        for prefix in (RECORD, CHECKPOINT):  # an id names a record or a checkpoint
            name = f"{prefix}{item}{DONE}"
            try:
                if prefix == CHECKPOINT:
                    if (data := read_small(store.fd, name)) is None:
                        continue
                    checkpoint = checkpoint_from_bytes(data)
                    _check(checkpoint.id == item, "a checkpoint under another's name")
                    _check_time(item, checkpoint.time, expect)
                    value, roots = dump(checkpoint), list(expect.writable)
                else:
                    if item in carried:
                        record = Record.from_wire(carried.pop(item))
                        from_file = False
                    elif (data := read_small(store.fd, name)) is None:
                        continue
                    else:
                        record, from_file = record_from_bytes(data), True
                    record = _checked(store, work, item, record, expect)
                    value = dump(record)
                    # a carried record is bounded as a file's is (read_small bounds
                    # the file itself, so its record is not measured again here)
                    _check(from_file or len(value) <= MAX_RECORD_BYTES,
                           "a record too big to be one")
                    # (an undo's closing record names no path: its sandbox's roots)
                    roots = kept.roots_of(record) or list(expect.writable)
            except (BadRecord, OSError) as why:
                refused[name] = str(why)
                skipped(name, why)
                _drop(store, item, name, expect)
                break
            # Written by the host, under a temp name renamed in (never the worker's
            # file, which its writer could still change; never torn by a kill: a
            # temp is cleared at the next bound). The `.done` goes after, so a host
            # killed between the two leaves it for the next sweep, which finds the
            # record committed and only removes it (and mirrors it then).
            committed = f"{prefix}{item}{COMMITTED}"
            publish(store.home, committed, value)
            # mirrored for the workers of its roots before the done record goes
            kept.link(store.home, committed, roots)
            with contextlib.suppress(FileNotFoundError):
                spare = spare_name(item)
                if spares is not None and prefix == RECORD and hand_back(store.fd, name, spare):
                    spares.add(spare)
                else:
                    os.unlink(name, dir_fd=store.fd)
            break
    return refused


def done(store: Store) -> list[str]:
    """The ids of every done record and checkpoint of the work directory."""
    with os.scandir(store.fd) as entries:
        return sorted(
            entry.name[2:-len(DONE)] for entry in entries
            if entry.name.endswith(DONE) and entry.name.startswith((RECORD, CHECKPOINT))
        )


def _checked(store: Store, work: str, record_id: str, record: Record, expect: Expect) -> Record:
    _check(record.id == record_id, "a record under another record's name")
    _check(record.pid == id_pid(record_id), "a record whose pid is not its id's")
    _check_time(record_id, record.time, expect)
    if expect.tool is not None:
        _check(record.tool == expect.tool,
               f"a record of {record.tool!r} from a {expect.tool!r} call")
    if expect.tools is not None:
        _check(record.tool in expect.tools, f"a record of {record.tool!r}, which changes nothing")
    if record.undoes is not None and record.tool == "rewind":  # a rewind's closing record
        _check(record.done and _committed(store, record.undoes, CHECKPOINT),
               "a rewind's closing record that names no checkpoint of the history")
    elif record.undoes is not None:
        _check(record.tool == "undo", "an undoes from something other than undo")
        _check(_committed(store, record.undoes), "an undo of a change the history does not hold")
    patch = record_kind(record.tool) == PATCH
    _check(patch or all(entry.temp is None for entry in record.entries),
           "a temp in a record that is not a patch's")
    entries = tuple(_entry(store, work, record, index if patch else 0, entry, expect)
                    for index, entry in enumerate(record.entries))
    if patch:
        keys = [(entry.root, entry.rel) for entry in entries]
        _check(len(set(keys)) == len(keys), "a patch record that names a path twice")
    return replace(record, entries=entries)


def _check_time(item: str, made: float, expect: Expect) -> None:
    now = time.time()
    at = id_time(item)
    _check(at <= now + CLOCK_SLACK_S and made <= now + CLOCK_SLACK_S, "dated in the future")
    _check(abs(made - at) <= CLOCK_SLACK_S, "a time that is not its id's")
    if expect.since is not None:
        _check(at >= expect.since - CLOCK_SLACK_S, "older than the call that made it")


def _entry(
    store: Store, work: str, record: Record, index: int, entry: Entry, expect: Expect
) -> Entry:
    """One entry checked; `index`: the blob it may keep (a patch keeps one per entry)."""
    record_id = record.id
    _check(entry.root in expect.writable, "a path in a root this sandbox does not write")
    for rel in (entry.rel, *entry.made):
        _check(_plain(rel), "a path that is not plainly beneath its root")
    if entry.temp is not None:  # beside its path, named as its writer names temps
        _check(_plain(entry.temp) and entry.temp_is_writers(record.pid),
               "a patch entry whose temp is not its writer's, beside its path")
    for state in (entry.before, entry.after):
        _check(state is None or state.hash is None, "a state that claims its own hash")
        _check(state is None or state.target is None or check_target(state.target) is None,
               "a symlink whose target no link can hold")
    _check(entry.after is None or entry.after.blob is None, "an after state with a blob")
    for state in (entry.before, entry.after):
        _check(state is None or state.tree is None or (
            entry.kind == "remove_tree" and state is entry.before),
            "a list of kept entries on a change that is not a directory's delete")
    if entry.kind == "remove_tree":
        return _tree_entry(store, record_id, entry)
    before = entry.before
    if before is None or before.blob is None:
        return entry
    blob = blob_name(record_id, index)
    _check(before.blob == blob, "a blob of another record")
    if before.type == "dir":  # what an undo needs of it is that it was a directory
        return replace(entry, before=replace(before, blob=f"{work}/{blob}"))
    _check(before.type == "file", "a blob of something that is not a file")
    with kept.taken(store.home, store.fd, blob, entry.root) as where:  # then checked there
        if before.version is not None:
            # The version the writer claims for what it replaced becomes the kept copy's
            # hash, unread: the note below says why that is as strong as hashing it here.
            _check(is_version(before.version), "a version that is not one")
            size = blob_size(where, blob)
            _check(size is not None and size == before.size,
                   "a blob that is missing, not a file or cut short")
            digest: str | None = before.version
        else:
            digest = hash_blob(where, blob, before.size)
    _check(digest is not None, "a blob that is missing, not a file or cut short")
    return replace(entry, before=State(**{
        **before.to_wire(), "blob": f"{kept_name(entry.root)}/{blob}", "hash": digest}))


# Why the committed hash of a kept copy may be the version its writer claimed (the
# Keeper knows it without reading: the file is one it wrote itself, unchanged since),
# rather than a hash the host takes of the blob here:
# - Undo (store.read_blob) writes nothing until the blob it read has the record's
#   size and hash. The record is the host's (workers may only read the store), so a
#   blob swapped or altered after the claim is refused, exactly as one altered after
#   a host's hash would be.
# - A writer that lies (a compromised worker) gains nothing: the host hashing the blob
#   would bind whatever bytes that writer put there before the promote, just as
#   well. Either way the hash says what the blob held as the change landed, not that
#   those were the file's bytes before it, which no check after the fact can know.
# - So a lie or a stale claim (the file rewritten in place by another program in the
#   microseconds between the writer's last look and its rename into the store) costs
#   only that undo: it is refused, nothing written, the blob left as it is.
# A record without a claim (a file the worker did not write, or one changed since) has
# its blob read and hashed here as before.


def _tree_entry(store: Store, record_id: str, entry: Entry) -> Entry:
    """A deleted directory: its kept tree must be exactly the list its record holds
    (checked, every file hashed, nothing followed), which then carries the hashes."""
    before = entry.before
    _check(entry.rel != "." and entry.after is None and entry.action == "delete",
           "a directory's delete that is not one")
    _check(before is not None and before.type == "dir" and before.tree is not None,
           "a directory's delete without its list of entries")
    assert before is not None and before.tree is not None  # for mypy: checked just above
    blob = blob_name(record_id)
    _check(before.blob == blob, "a blob of another record")
    check_listing(before.tree)
    with kept.taken(store.home, store.fd, blob, entry.root) as where:
        tree = check_kept(where, blob, before.mode, before.tree, hashed=False).tree
    return replace(entry, before=replace(before, blob=f"{kept_name(entry.root)}/{blob}",
                                                 tree=tree))


def _committed(store: Store, record_id: str, prefix: str = RECORD) -> bool:
    try:
        os.stat(f"{prefix}{record_id}{COMMITTED}", dir_fd=store.home, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _plain(rel: str) -> bool:
    return rel == "." or (
        bool(rel) and not rel.startswith("/") and posixpath.normpath(rel) == rel
        and rel != ".." and not rel.startswith("../") and "\0" not in rel
    )


def _drop(store: Store, item: str, name: str, expect: Expect) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=store.fd)
    if name.startswith(RECORD):  # every blob of it (a patch's: one per entry)
        prefix = blob_name(item, 0)[:-1]
        with os.scandir(store.fd) as found:
            blobs = [entry.name for entry in found if entry.name.startswith(prefix)]
        for blob in blobs:
            store.remove_blob(blob)
        kept.forget(store.home, prefix, expect.writable)  # those its checks moved there


def _check(condition: object, why: str) -> None:
    if not condition:
        raise BadRecord(why)
