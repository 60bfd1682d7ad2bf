"""The worker side of history: a Keeper is handed to each changing Root call
(fs.root.Keep) and writes the record of the change *before* the change lands,
as a pending record; once it has landed the record is committed. A kill at any
instant leaves a pending record that `settle` (corral/history/recover.py)
resolves by looking at the tree.

What is kept, per change:
- an atomic write over a file: the old inode itself. The new file is swapped in
  with RENAME_EXCHANGE, which leaves the old one under the temp name; that is
  renamed into the store (no copy). Where the store is on another mount (EXDEV,
  or Landlock refusing the move) the old bytes are copied instead.
- an append: the old size (an append only adds; its undo cuts the file back).
- a delete: the file itself, renamed into the store (copied across mounts).
- a directory deleted with everything in it (delete_directory): the tree itself,
  renamed into the store, and the list of its entries in the record
  (history/trees.py). Across mounts it is copied in, then renamed aside in its
  own directory and removed; its symlinks are not copied (a worker cannot make
  one): the record names each with its target, and an undo has the host make
  them again (history/links.py).
- a move: the moved inode's number (its undo moves it back); a destination it
  overwrote is copied into the store first.
- a directory made: nothing (its undo removes it if empty).
Entry states (`before`/`after`, records.State): None for "did not exist", else
the type and, for files, mode, size and where it is kept (`blob`), the content
`version` or the appended `tail` (a version of the appended bytes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from msgspec.structs import replace

from corral.errors import CorralError, shown_path
from corral.fs import Root, content_version
from corral.fs.staged import Staged, set_aside
from corral.fs.syscalls import RENAME_EXCHANGE, RENAME_NOREPLACE, Land, renameat2, temp_name
from corral.fs.tree import Tree, remove, survey
from corral.fs.version import chunked_version
from corral.history.records import BadRecord, Entry, Record, State
from corral.history.store import Store, StoreError, blob_name, id_time, new_id
from corral.history.trees import check_kept, copy_tree, kept_of, kind_of, refill, unshare

# A moved file up to this size is known by its content (hashed: ~1 ms a MiB); a bigger
# one by its inode, which an undo of a later change to it replaces (then: a conflict).
HASH_MOVED_BYTES = 8 * 1024 * 1024
# Files this worker wrote, by (device, inode): their (size, mtime, ctime) just after
# they landed and their version. A write over one of them that finds it unchanged
# records the version of what it replaces without reading it (an agent rewrites and
# edits the same few files), and the host commits that version as the kept copy's
# hash instead of reading and hashing the blob (promote.py: why that is as strong).
# Bounded: a miss only costs the host its hash.
WRITTEN_KEPT = 256
_written: dict[tuple[int, int], tuple[tuple[int, int, int], str]] = {}


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What any change to a file's bytes moves: its size, mtime and ctime (ctime
    cannot be set back, and from Linux 6.13 a change after a stat gets a finer one)."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _landed(dir_fd: int, name: str, version: str) -> None:
    """Remember the file a write just landed at `name` as holding `version`."""
    st = _lstat(dir_fd, name)
    if st is None or not stat.S_ISREG(st.st_mode):
        return
    if len(_written) >= WRITTEN_KEPT:
        del _written[next(iter(_written))]
    _written[(st.st_dev, st.st_ino)] = (_stamp(st), version)


def _known_version(st: os.stat_result) -> str | None:
    """The version of the file `st` describes, if this worker wrote it and it has not
    changed since; None otherwise."""
    known = _written.get((st.st_dev, st.st_ino))
    return known[1] if known is not None and known[0] == _stamp(st) else None


def shown(workspace: str, root_path: str, rel: str) -> str:
    """The path as a user names it: relative in the workspace, absolute elsewhere."""
    if root_path == workspace:
        return rel
    return root_path if rel == "." else f"{root_path}/{rel}"


@dataclass
class _Pending:
    """A write's record, and the target's lstat it was made for."""

    record: Record
    st: os.stat_result | None


class Keeper:
    """Records the changes of one call (one record per change)."""

    def __init__(
        self, store: Store, workspace: str, tool: str, undoes: str | None = None
    ) -> None:
        self.store = store
        self.workspace = workspace
        self.tool = tool
        self.undoes = undoes
        self.group: str | None = None  # set by together()
        self.stored = 0  # bytes copied or moved into the store, for the host's bounds
        self.ids: list[str] = []
        self.done: list[dict[str, Any]] = []  # the small records committed, as the host gets them
        self._reserved: str | None = None

    # -- records --------------------------------------------------------------

    def _entry(
        self, root: Root, rel: str, kind: str, action: str, before: State | None,
        after: State | None, made: Sequence[str] = (), to: str | None = None,
        source: str | None = None,
    ) -> Entry:
        return Entry(root.path, rel, shown(self.workspace, root.path, rel), kind, action, before,
                     after, tuple(made), to, source)

    def _next_id(self) -> str:
        """The id the next record gets (its blob is named after it before it is written)."""
        if self._reserved is None:
            self._reserved = new_id()
        return self._reserved

    def _pending(self, *entries: Entry) -> Record:
        record_id, self._reserved = self._next_id(), None
        # dated by its id, which was made before the old file was kept (a copy can take
        # longer than the host allows between a record's time and its id's)
        record = Record(record_id, id_time(record_id), self.tool, os.getpid(), entries,
                        self.undoes, self.group)
        self.stored += self.store.write_pending(record)
        return record

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """The changes made inside are one change to undo (a move between two roots
        is a copy there and a delete here): their records share a "group" id."""
        self.group = new_id()
        try:
            yield
        finally:
            self.group = None

    def _commit(self, record: Record) -> None:
        # a small done record goes to the host in the answer too: it need not read it
        # back from the work directory (promote.py checks it all the same)
        if self.store.commit(record.id) and len(record.entries) <= 2 and not any(
                entry.before is not None and entry.before.tree for entry in record.entries):
            self.done.append(record.to_wire())
        self.ids.append(record.id)

    @contextlib.contextmanager
    def _landing(self, record: Record) -> Iterator[None]:
        """Commit if the change lands, forget the record if it fails."""
        try:
            yield
        except BaseException:
            self.store.drop(record.id)
            raise
        self._commit(record)

    # -- fs.root.Keep ------------------------------------------------------

    @contextlib.contextmanager
    def writing(
        self, root: Root, rel: str, made: list[str], version: str, size: int,
        st: os.stat_result | None,
    ) -> Iterator[Land]:
        """An atomic write: the record is written first (before the new file's data
        is, so one journal commit carries both), as `st` says the target is; the
        Land it yields swaps the new file in and the old one into the store."""
        after = State("file", size=size, version=version)
        current = _Pending(self._pending(self._replacing(root, rel, made, after, st)), st)

        def again(now: os.stat_result | None) -> Entry:
            """The target changed since it was resolved: record what is there now."""
            self.store.drop(current.record.id)
            current.record = self._pending(self._replacing(root, rel, made, after, now))
            current.st = now
            return current.record.entries[0]

        def land(dir_fd: int, tmp: str, name: str, flags: int) -> None:
            entry = current.record.entries[0]
            now = _lstat(dir_fd, name)
            # a version the record claims for the old file must still be its own
            claimed = entry.before is not None and entry.before.version is not None
            if not _same(now, current.st) or (
                claimed and now is not None and current.st is not None
                and _stamp(now) != _stamp(current.st)
            ):
                entry = again(now)
            if entry.before is None:
                try:
                    renameat2(dir_fd, tmp, dir_fd, name, flags | RENAME_NOREPLACE)
                    _landed(dir_fd, name, version)
                    return
                except FileExistsError:
                    if flags & RENAME_NOREPLACE or (now := _lstat(dir_fd, name)) is None:
                        raise
                    entry = again(now)  # it appeared meanwhile: replace it, kept
            if flags & RENAME_NOREPLACE:
                raise FileExistsError(errno.EEXIST, "exists")
            # the blob _replacing named for what is there: the record's own
            self._swap(dir_fd, tmp, name, blob_name(current.record.id))
            _landed(dir_fd, name, version)

        try:
            yield land
        except BaseException:
            self.store.drop(current.record.id)
            raise
        self._commit(current.record)

    def _replacing(
        self, root: Root, rel: str, made: list[str], after: State, st: os.stat_result | None,
    ) -> Entry:
        if st is None:
            return self._entry(root, rel, "replace", "create", None, after, made=made)
        known = _known_version(st) if stat.S_ISREG(st.st_mode) else None
        before = State(kind_of(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size,
                       blob=blob_name(self._next_id()), version=known)
        return self._entry(root, rel, "replace", "modify", before, after, made=made)

    def _swap(self, dir_fd: int, tmp: str, name: str, blob: str) -> None:
        """The new file in, the old one (left under the temp name) into the store."""
        try:
            renameat2(dir_fd, tmp, dir_fd, name, RENAME_EXCHANGE)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: no exchange on this file system
                raise
            self._copy_in(dir_fd, name, blob)
            renameat2(dir_fd, tmp, dir_fd, name, 0)
            return
        try:
            self._take(dir_fd, tmp, blob)
        except BaseException:
            renameat2(dir_fd, tmp, dir_fd, name, RENAME_EXCHANGE)  # as it was
            raise

    @contextlib.contextmanager
    def appending(
        self, root: Root, rel: str, made: list[str], size: int | None, data: bytes
    ) -> Iterator[None]:
        start = size or 0
        before = None if size is None else State("file", size=size)
        after = State("file", size=start + len(data), tail=content_version(data))
        action = "create" if size is None else "modify"
        record = self._pending(self._entry(root, rel, "append", action, before, after, made=made))
        with self._landing(record):
            yield

    @contextlib.contextmanager
    def making_dir(self, root: Root, rel: str, made: list[str]) -> Iterator[None]:
        entry = self._entry(root, rel, "mkdir", "create", None, State("dir"), made=made)
        record = self._pending(entry)
        with self._landing(record):
            yield

    def remove(self, root: Root, rel: str, dir_fd: int, name: str, st: os.stat_result) -> None:
        record_id = self._next_id()
        blob = blob_name(record_id)
        kept = stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)
        before = State(
            kind_of(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size,
            blob=blob if kept else None,
            target=os.readlink(name, dir_fd=dir_fd) if stat.S_ISLNK(st.st_mode) else None,
        )
        record = self._pending(self._entry(root, rel, "remove", "delete", before, None))
        with self._landing(record):
            if not kept:  # a symlink's target is in the record; the store takes no links
                os.unlink(name, dir_fd=dir_fd)
                return
            try:
                self._take(dir_fd, name, blob)
            except StoreError:
                raise
            except OSError:  # a directory on another mount: nothing in it to keep
                if not stat.S_ISDIR(st.st_mode):
                    raise
                os.rmdir(name, dir_fd=dir_fd)

    def remove_tree(
        self, root: Root, rel: str, dir_fd: int, name: str, st: os.stat_result,
        tree: list[Tree],
    ) -> None:
        """A directory and everything beneath it: one record listing every entry, and
        the tree itself renamed into the store as the record's blob."""
        record_id = self._next_id()
        blob = blob_name(record_id)
        before = State("dir", stat.S_IMODE(st.st_mode), blob=blob, tree=kept_of(tree))
        record = self._pending(self._entry(root, rel, "remove_tree", "delete", before, None))
        with self._landing(record):
            try:
                os.rename(name, blob, src_dir_fd=dir_fd, dst_dir_fd=self.store.fd)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EACCES, errno.EPERM):
                    raise
                self._copy_tree(dir_fd, name, blob, before, st,
                                shown(self.workspace, root.path, rel))
                return
            self.stored += sum(kept.size for kept in before.tree or ())
            try:  # renamed in: its links too, every one
                whole = not check_kept(self.store.fd, blob, before.mode, before.tree or (),
                                       hashed=False, contents=False).unkept
            except BadRecord:
                whole = False
            if not whole:
                self._changed_meanwhile(record, dir_fd, name, shown(self.workspace, root.path, rel))
                return
            unshare(self.store.fd, blob, zip(tree, before.tree or (), strict=True))

    def _changed_meanwhile(self, record: Record, dir_fd: int, name: str, path: str) -> None:
        """Another process changed the tree between the survey and the rename
        (corral's own calls wait for the tree lock): it goes back and the call fails,
        rather than keep a tree its record does not list. If its name was taken
        meanwhile too, what was taken stays kept and its record is made to list it:
        nothing is lost (an undo then finds the name taken: a conflict)."""
        blob = blob_name(record.id)
        try:
            renameat2(self.store.fd, blob, dir_fd, name, RENAME_NOREPLACE)
        except FileExistsError:
            st = os.stat(blob, dir_fd=self.store.fd, follow_symlinks=False)
            entry = record.entries[0]
            assert entry.before is not None  # a remove_tree entry's: made just before
            before = replace(entry.before, mode=stat.S_IMODE(st.st_mode),
                                           tree=kept_of(survey(self.store.fd, blob, st)))
            self.store.rewrite_pending(replace(record, entries=(replace(entry, before=before),)))
            return
        raise CorralError("conflict", f"{path} changed while it was being deleted; nothing "
                          "was deleted.")

    def _copy_tree(
        self, dir_fd: int, name: str, blob: str, before: State, st: os.stat_result, path: str
    ) -> None:
        """The store is on another file system: the tree is copied in, then renamed
        aside in its own directory (the one step the change lands by) and removed.
        A name that no longer is the surveyed directory (another process swapped it,
        for a symlink say) stops it: conflict, and nothing is deleted. Its symlinks
        are not copied (listed in the record, with their targets)."""
        tree = before.tree or ()
        changed = CorralError(
            "conflict", f"{path} changed while it was being deleted; nothing was deleted.")
        if not _same(_lstat(dir_fd, name), st):
            raise changed
        try:
            self.stored += copy_tree(dir_fd, name, self.store.fd, blob, tree)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR):
                raise changed from None
            raise StoreError(exc) from None
        try:
            check_kept(self.store.fd, blob, before.mode, tree, hashed=False, contents=False)
        except BadRecord:
            raise changed from None
        aside = temp_name()
        renameat2(dir_fd, name, dir_fd, aside, RENAME_NOREPLACE)
        if not _same(_lstat(dir_fd, aside), st):  # swapped between the check and the rename
            renameat2(dir_fd, aside, dir_fd, name, RENAME_NOREPLACE)
            raise changed
        try:
            remove(dir_fd, aside)
        except OSError:
            # the kernel refused an entry (immutable, say): what went is put back from
            # the copy and the call fails, nothing deleted; if even that fails the
            # delete stands, the tree whole in the store (committed: undo brings it)
            try:
                lost = refill(self.store.fd, blob, dir_fd, aside, tree)
                renameat2(dir_fd, aside, dir_fd, name, RENAME_NOREPLACE)
            except OSError:
                return
            if lost:  # removed before the kernel stopped it: named, targets and all
                named = ", ".join(f"{shown_path(f'{path}/{kept.path}')} -> "
                                  f"{shown_path(kept.target or '')}" for kept in lost)
                raise CorralError("io_error", f"cannot delete {path}: the kernel refused to "
                                  "remove an entry; everything else was put back but these "
                                  f"symlinks, which corral cannot make: {named}") from None
            raise

    def move(self, src: tuple[Any, ...], dst: tuple[Any, ...], flags: int) -> None:
        src_root, src_rel, src_fd, src_name, src_st = src
        dst_root, dst_rel, dst_fd, dst_name, dst_st = dst
        if dst_st is not None and (dst_st.st_dev, dst_st.st_ino) == (src_st.st_dev, src_st.st_ino):
            # the same file (itself, or another link to it): rename(2) changes nothing
            renameat2(src_fd, src_name, dst_fd, dst_name, flags)
            return
        record_id = self._next_id()
        # by content, not inode: undoing a later change gives the path a new inode
        hashed = stat.S_ISREG(src_st.st_mode) and src_st.st_size <= HASH_MOVED_BYTES
        moved = State(kind_of(src_st.st_mode), stat.S_IMODE(src_st.st_mode), src_st.st_size,
                      version=_version(src_fd, src_name) if hashed else None, ino=src_st.st_ino)
        replaced = None
        if dst_st is not None and not flags & RENAME_NOREPLACE:
            blob = target = None
            if stat.S_ISREG(dst_st.st_mode):  # copied: the rename itself will unlink it
                blob = blob_name(record_id)
                self._copy_in(dst_fd, dst_name, blob)
            elif stat.S_ISLNK(dst_st.st_mode):
                target = os.readlink(dst_name, dir_fd=dst_fd)
            replaced = State(kind_of(dst_st.st_mode), stat.S_IMODE(dst_st.st_mode),
                             dst_st.st_size, blob=blob, target=target)
        to = shown(self.workspace, dst_root.path, dst_rel)
        record = self._pending(
            self._entry(src_root, src_rel, "move_from", "move", moved, None, to=to),
            self._entry(dst_root, dst_rel, "move_to", "move", replaced, moved,
                        source=shown(self.workspace, src_root.path, src_rel)),
        )
        with self._landing(record):
            renameat2(src_fd, src_name, dst_fd, dst_name, flags)

    @contextlib.contextmanager
    def batch(self, staged: Sequence[Staged]) -> Iterator[None]:
        """A patch: one record naming every change and its temp, written before the
        first lands (what a settle reads to finish or undo it after a kill); once all
        landed, each old file is taken from its temp into the store (blob i: entry i)."""
        record_id = self._next_id()
        record = self._pending(*(self._batch_entry(record_id, index, item)
                                 for index, item in enumerate(staged)))
        try:
            yield
        except BaseException:
            self.store.drop(record.id, len(staged))
            raise
        try:
            for index, item in enumerate(staged):
                if set_aside(item):
                    self._take(item.dir_fd, item.temp, blob_name(record.id, index))
        except (OSError, StoreError):
            # The patch landed; old files wait in their temps. The record stays pending,
            # unheld: an orphan the host has the next settle finish (it takes them).
            self.store.let_go(record.id)
            return
        self._commit(record)

    def _batch_entry(self, record_id: str, index: int, item: Staged) -> Entry:
        before = after = None
        if item.link is not None:  # the store takes no links: the record holds its target
            before = State("symlink", item.mode, len(os.fsencode(item.link)), target=item.link)
        elif item.action != "add":
            assert item.old is not None
            before = State("file", item.mode, len(item.old), blob=blob_name(record_id, index),
                           version=content_version(item.old))
        if item.action != "remove":
            after = State("file", size=item.size, version=item.version)
        other = item.partner
        to = source = None
        action = {"add": "create", "update": "modify", "remove": "delete"}[item.action]
        if other is not None:
            action = "move"
            shown_other = shown(self.workspace, other.root_path, other.rel)
            to, source = (shown_other, None) if item.action == "remove" else (None, shown_other)
        kind = "remove" if item.action == "remove" else "replace"
        path = shown(self.workspace, item.root_path, item.rel)
        return Entry(item.root_path, item.rel, path, kind, action, before, after,
                     tuple(item.made), to, source, item.temp_rel)

    # -- moving bytes into the store ------------------------------------------

    def _take(self, dir_fd: int, name: str, blob: str) -> None:
        """Move `name` into the store as `blob`; copy it (then unlink) where a rename
        cannot reach the store. StoreError if the store refuses it."""
        try:
            os.rename(name, blob, src_dir_fd=dir_fd, dst_dir_fd=self.store.fd)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EACCES, errno.EPERM):
                raise StoreError(exc) from None
            st = _lstat(dir_fd, name)
            if st is None or stat.S_ISDIR(st.st_mode):
                raise
            if stat.S_ISREG(st.st_mode):
                self._copy_in(dir_fd, name, blob)
            os.unlink(name, dir_fd=dir_fd)  # a symlink: its target text is in the record
            return
        st = os.stat(blob, dir_fd=self.store.fd, follow_symlinks=False)
        self.stored += st.st_size

    def _copy_in(self, dir_fd: int, name: str, blob: str) -> None:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        try:
            self.stored += self.store.stash_copy(fd, blob)
        finally:
            os.close(fd)


def _version(dir_fd: int, name: str) -> str:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return chunked_version(iter(lambda: os.read(fd, 1 << 20), b""))
    finally:
        os.close(fd)


def _same(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
