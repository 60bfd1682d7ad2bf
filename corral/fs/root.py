"""Root: a directory handle beneath which every path is resolved (hazmat layer).

Every method raises CorralError (never OSError) with the path *as the caller
gave it* in the message. Each is a short wrapper, as Go's os.Root methods are:
resolve with `Root.at`, the one resolution primitive (a parent directory fd
beneath the root plus one final name; corral/fs/_guarded.py and _resolve.py
beneath it), call `guard`, then act through that fd (corral/fs/_ops.py). A
feature's own operation (fs/batch.py's staging, history's) is built the same way
in its own module, on `Root.at` and `Root.locked`.

`guard` on every operation: called with the root-relative resolved path
(posix, "." for the root itself, no leading "./") of the object the operation is
about to touch, computed from the fd actually opened (race-free), after
resolution and before any read or change. Tools pass a guard that applies the
policy and raises CorralError("path_denied"/"approval_required").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import corral.fs._atomic as _atomic
import corral.fs._listing as _listing
import corral.fs._ops as _ops
import corral.fs._resolve as _resolve
import corral.fs._treelock as _treelock
import corral.fs.tree as _tree
from corral.errors import CorralError
from corral.fs._atomic import ANYTHING, Expect
from corral.fs._errors import (
    CrossFilesystem,
    check_path,
    fail,
    from_errno,
    require_file,
    translated,
)
from corral.fs._guarded import guard_at, pick_resolver, target
from corral.fs.staged import Staged, set_aside
from corral.fs.syscalls import (
    RENAME_NOREPLACE,
    SETID,
    SUBDIR_FLAGS,
    Land,
    fd_path,
    rename_into_place,
    renameat2,
)
from corral.fs.types import (
    UNGUARDED,
    Entry,
    FileInfo,
    Guard,
    MoveGuard,
    WriteOutcome,
    entry_of,
    kind,
)
from corral.fs.version import content_version


class _DirectoryMove(Exception):
    """The source of a move is a directory: it needs the tree lock exclusively."""


class Keep(Protocol):
    """A history keeper (corral/history): each change below calls it at the instant
    the change lands, after resolution and the guard, so it can record what is
    replaced before it is gone; NO_KEEP, the default, records nothing. `made`:
    directories the call created on the way."""

    def writing(
        self, root: Root, rel: str, made: list[str], version: str, size: int,
        st: os.stat_result | None,
    ) -> AbstractContextManager[Land]: ...

    def appending(
        self, root: Root, rel: str, made: list[str], size: int | None, data: bytes
    ) -> AbstractContextManager[None]: ...

    def making_dir(self, root: Root, rel: str, made: list[str]) -> AbstractContextManager[None]: ...

    def remove(self, root: Root, rel: str, dir_fd: int, name: str, st: os.stat_result) -> None: ...

    def remove_tree(
        self, root: Root, rel: str, dir_fd: int, name: str, st: os.stat_result,
        tree: list[_tree.Tree],
    ) -> None: ...

    def move(
        self, src: tuple[Root, str, int, str, os.stat_result],
        dst: tuple[Root, str, int, str, os.stat_result | None], flags: int,
    ) -> None: ...

    def together(self) -> AbstractContextManager[None]:
        """The changes made inside are one change to undo."""
        ...

    def batch(self, staged: Sequence[Staged]) -> AbstractContextManager[None]:
        """Several changes landing as one (fs/batch.py): entered before the first
        lands, left with an error when they were all undone, or normally when all
        landed, the old files still waiting under their temps (staged.set_aside)."""
        ...


class NoKeep:
    """The Keep of a change nobody records (history off): each change lands as is."""

    def writing(
        self, root: Root, rel: str, made: list[str], version: str, size: int,
        st: os.stat_result | None,
    ) -> AbstractContextManager[Land]:
        return contextlib.nullcontext(rename_into_place)

    def appending(
        self, root: Root, rel: str, made: list[str], size: int | None, data: bytes
    ) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def making_dir(self, root: Root, rel: str, made: list[str]) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def remove(self, root: Root, rel: str, dir_fd: int, name: str, st: os.stat_result) -> None:
        (os.rmdir if stat.S_ISDIR(st.st_mode) else os.unlink)(name, dir_fd=dir_fd)

    def remove_tree(
        self, root: Root, rel: str, dir_fd: int, name: str, st: os.stat_result,
        tree: list[_tree.Tree],
    ) -> None:
        _tree.remove(dir_fd, name, st)

    def move(
        self, src: tuple[Root, str, int, str, os.stat_result],
        dst: tuple[Root, str, int, str, os.stat_result | None], flags: int,
    ) -> None:
        renameat2(src[2], src[3], dst[2], dst[3], flags)

    def together(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def batch(self, staged: Sequence[Staged]) -> Iterator[None]:
        yield
        for item in staged:  # nobody keeps the old files
            if set_aside(item):
                with contextlib.suppress(OSError):
                    os.unlink(item.temp, dir_fd=item.dir_fd)


NO_KEEP = NoKeep()


_nothing = contextlib.nullcontext


class Root:
    """A directory handle. Modes: "rw" or "ro" (ro refuses every change: read_only).

    Every path is resolved beneath the root's fd: `..` above the root, absolute
    paths and absolute symlinks, relative symlinks that leave the root and
    /proc magic links fail outside_workspace, whatever renames race with it.

    What a Root does NOT protect against (as with Go's os.Root):
    - Hard links: a name inside the root hard-linked to a file outside is that
      file. Reads return its content; append refuses files with nlink > 1 and
      write_atomic replaces the inode, so neither writes through to it.
    - Mount points inside the root are crossed: a bind mount of /etc into the
      workspace is the workspace.
    - Concurrent changes inside the root by other processes: a name may be
      replaced between two calls, or between `guard` and the syscall that acts
      on the same final name (the directory is pinned by its fd, the name in it
      is not). Renames inside the root never lead outside it.
    - A directory moved *out of* the root by another process while an
      operation holds its fd: the operation acts there. Both resolvers notice
      a move that came before the end of resolution (openat2: the kernel's
      path for the fd is no longer beneath the root; walk: a directory is no
      longer where it was found) and fail io_error; a later move is not seen.
      Landlock in the worker is the layer that holds then.
    - Special files swapped in after the lstat are opened O_NONBLOCK and
      refused from fstat; opening a device can still have side effects.
    - Resource use: huge files, directories or trees, a full disk; callers pass
      limits. Temp files of a writer killed mid-write stay until
      remove_stale_temps.
    """

    path: str  # the root's real absolute path
    mode: str
    fd: int  # O_PATH|O_DIRECTORY fd of the root
    given_path: str  # the absolute path the host named it by (may hold symlinks)
    resolver: str  # "openat2" | "walk": the resolver in use
    durable: bool  # writes fsync the file and its directory before they return

    def __init__(
        self, path: str, *, mode: str = "rw", resolver: str = "auto", durable: bool = True
    ) -> None:
        """resolver: "auto" (openat2, else walk), "openat2" or "walk" (the fallback).
        durable=False: writes stay atomic but skip the fsyncs (a scratch workspace)."""
        try:
            fd = os.open(path, _resolve.DIR_FLAGS)
        except OSError as exc:
            raise from_errno(exc.errno, "open root", path) from None
        try:
            try:
                real = fd_path(fd)
            except OSError:
                real = os.path.realpath(path)
            self._adopt(fd, path, real, mode, resolver, durable)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def from_fd(
        cls, fd: int, path: str, *, mode: str = "rw", resolver: str = "auto", durable: bool = True
    ) -> Root:
        """Adopt an fd opened elsewhere (a shared pool's host opens roots and sends
        them), known by `path`, the real path it was opened at: a directory renamed
        or removed since keeps the name its sandbox gives it."""
        root = cls.__new__(cls)
        root._adopt(fd, path, os.path.abspath(path), mode, resolver, durable)
        return root

    def _adopt(self, fd: int, path: str, real: str, mode: str, resolver: str,
               durable: bool) -> None:
        if mode not in ("rw", "ro"):
            raise ValueError(f"mode must be rw or ro, not {mode!r}")
        self.fd, self.mode, self.durable = fd, mode, durable
        st = os.fstat(fd)
        self._identity = (st.st_dev, st.st_ino)
        self.path = real
        self.given_path = os.path.abspath(path)
        self._resolver = pick_resolver(resolver, fd)
        self.resolver = self._resolver.name

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Root({self.path!r}, mode={self.mode!r}, resolver={self.resolver!r})"

    # -- resolution -----------------------------------------------------------

    def locked(
        self, *others: Root, exclusive: bool = False
    ) -> contextlib.AbstractContextManager[int]:
        """The tree lock (corral/fs/_treelock.py) on this root and `others`: shared
        by a change that adds or renames a name, exclusive by a directory move or a
        removal of a tree; yields this root's lock fd."""
        roots = [(root._identity, root.fd) for root in (self, *others)]
        return _treelock.held(roots, exclusive=exclusive)

    def _writable(self, op: str, rel: str) -> None:
        if self.mode != "rw":
            raise fail("read_only", op, rel, "the root is read-only")

    @contextlib.contextmanager
    def at(
        self, op: str, rel: str, *, follow: bool, guard: Guard, changes: bool = False,
        named: bool = False, make_parents: bool = False, made: list[str] | None = None,
    ) -> Iterator[_resolve.Target]:
        """The one resolution primitive (Go's doInRoot): every method here, and every
        caller's own operation (fs/batch.py's staging, history's), acts inside it on
        the Target it yields: `dir_fd`, the parent directory opened beneath the root,
        and `leaf`, one plain name in it (`name()` for a syscall; None: the path
        names `dir_fd` itself), with `rel` resolved and `st` its lstat (None:
        missing). In its security order: the path's text checked; with `changes`, a
        change refused in a read-only root; the path resolved beneath the root
        (missing parents guarded, then made into `made` with `make_parents`, or
        refused); with `named`, the final name checked ("", ".", ".." refused);
        then the resolved path guarded. OSError inside becomes a CorralError naming
        `op` and the caller's `rel`. The caller takes the tree lock (`locked`)
        around it if it adds or renames a name."""
        path = check_path(op, rel)
        if changes:
            self._writable(op, rel)
        with translated(op, rel), target(
            self._resolver, path, follow=follow, make_parents=make_parents, guard=guard,
            made=made,
        ) as t:
            if named:
                t.name()
            guard_at(guard, t.rel)
            yield t

    def resolve(self, rel: str, *, follow: bool = True) -> str:
        """The resolved root-relative path `rel` names (a missing leaf is allowed:
        resolved parent + leaf). Raises outside_workspace, symlink_loop, not_found
        (missing parent), not_a_directory."""
        path = check_path("resolve", rel)
        with translated("resolve", rel), target(self._resolver, path, follow=follow) as t:
            return t.rel

    # -- reading --------------------------------------------------------------

    def info(
        self, rel: str, *, follow: bool = False, guard: Guard = None,
        version_limit: int | None = None,
    ) -> FileInfo | None:
        """lstat-like (stat if follow) through the parent fd; None if it does not exist.
        version_limit: a regular file up to that many bytes also gets its content
        version, read through the same resolution (None when it is bigger, or was
        swapped for something else since the lstat; a failed open is a read error)."""
        path = check_path("stat", rel)
        with translated("stat", rel):
            try:  # a trailing slash resolves the final link, as lstat("link/") does
                t = target(self._resolver, path, follow=follow or path.endswith("/"), guard=guard)
            except FileNotFoundError:
                return None
            with t:
                guard_at(guard, t.rel)
                st = t.st
                if st is None:
                    return None
                if t.trailing_slash and not stat.S_ISDIR(st.st_mode):
                    raise OSError(errno.ENOTDIR, "not a directory")
                link = None
                if stat.S_ISLNK(st.st_mode):
                    with contextlib.suppress(OSError):  # replaced since the lstat: no text
                        link = os.readlink(t.name(), dir_fd=t.dir_fd)
                version = None
                if version_limit is not None and stat.S_ISREG(st.st_mode):
                    with translated("read", rel):
                        version = _ops.version_of(t, version_limit)
                return FileInfo(
                    kind(st.st_mode), st.st_size, st.st_mtime, stat.S_IMODE(st.st_mode),
                    st.st_nlink, link, version, st.st_ino,
                )

    def read_bytes(
        self, rel: str, *, max_file_bytes: int, guard: Guard = None, single_link: str | None = None
    ) -> bytes:
        """Whole regular file (follows symlinks beneath the root), checked as `opened`
        checks it; size > max_file_bytes -> too_large naming both sizes."""
        with self.opened(rel, guard=guard, single_link=single_link) as (fd, st):
            if st.st_size > max_file_bytes:
                raise _ops.too_large("read", rel, st.st_size, max_file_bytes)
            return self.read_whole(fd, rel, max_file_bytes)

    @contextlib.contextmanager
    def opened(
        self, rel: str, *, guard: Guard = None, single_link: str | None = None
    ) -> Iterator[tuple[int, os.stat_result]]:
        """The regular file `rel` (symlinks followed beneath the root) open for reading,
        with its fstat, for a reader that takes it in windows. Opens O_NONBLOCK and
        decides from fstat: dir -> is_a_directory, FIFO/socket/device ->
        not_a_regular_file (never blocks); with `single_link` (a rule name), a file
        with more than one hard link -> path_denied naming that rule (another name
        of it may be denied)."""
        with self.at("read", rel, follow=True, guard=guard) as t:
            require_file(t.st, t.trailing_slash)
            fd = t.open(os.O_RDONLY | os.O_NONBLOCK)
            try:
                st = os.fstat(fd)
                require_file(st)
                if single_link is not None and st.st_nlink > 1:
                    raise fail(
                        "path_denied", "read", rel, f"the file has {st.st_nlink} hard links and "
                        "the policy refuses reading a file with more than one", rule=single_link,
                    )
                yield fd, st
            finally:
                os.close(fd)

    @staticmethod
    def read_whole(fd: int, rel: str, max_file_bytes: int) -> bytes:
        """The rest of the open file `fd`, too_large if it grows past max_file_bytes
        while it is read."""
        data, size = _ops.read_upto(fd, max_file_bytes)
        if size > max_file_bytes:
            raise _ops.too_large("read", rel, size, max_file_bytes)
        return data

    def scandir(self, rel: str, *, guard: Guard = None) -> list[Entry]:
        """One directory's entries (names only in Entry.path), never following symlinks."""
        with translated("list", rel):
            fd = self._open_listing("list", rel, guard)
            try:
                return [entry_of(name, st) for name, st in _listing.entries(fd)]
            finally:
                os.close(fd)

    def walk(
        self, rel: str, *, guard: Guard = None, prune: Callable[[str], bool] | None = None,
        entered: Callable[[str, list[str]], None] | None = None,
    ) -> Iterator[Entry]:
        """Depth-first, sorted by name, paths relative to `rel`; never descends into
        symlinks; opens each subdirectory beneath its parent fd with O_NOFOLLOW.
        prune(path) -> True: that directory is listed but not entered.
        entered(path, names): each directory's names, before its entries ("": rel)."""
        with translated("walk", rel):
            walker = _listing.Walk(self._open_listing("walk", rel, guard), prune=prune,
                                   entered=entered)
        return (entry_of(path, st) for path, st in walker)

    def _open_listing(self, op: str, rel: str, guard: Guard) -> int:
        with self.at(op, rel, follow=True, guard=guard) as t:
            if t.st is None:
                raise OSError(errno.ENOENT, "missing")
            if not stat.S_ISDIR(t.st.st_mode):
                raise OSError(errno.ENOTDIR, "not a directory")
            return t.open(os.O_RDONLY | os.O_DIRECTORY)

    # -- changing -------------------------------------------------------------

    def write_atomic(
        self,
        rel: str,
        data: bytes,
        *,
        expect: Expect = ANYTHING,
        exclusive: bool = False,
        make_parents: bool = True,
        mode: int | None = None,
        max_file_bytes: int | None = None,
        guard: Guard = None,
        keep: Keep = NO_KEEP,
    ) -> WriteOutcome:
        """Temp file (O_CREAT|O_EXCL|O_NOFOLLOW) in the target's directory, write,
        fsync, old file's mode (set-id bits dropped), rename over the target, fsync
        the directory. A final symlink is written through to its target beneath
        the root (stays a link); a hard-linked file gets a new inode. Temp names
        start with .corral-tmp-<pid>- (see remove_stale_temps).
        expect: under an flock of the parent directory, the current file must hold
        that version or content (a missing file never does), else conflict; a
        current file over max_file_bytes is a conflict without being read whole.
        exclusive: fail already_exists if the target exists (copy/move without
        overwrite). mode: the new file's permission bits instead (a moved file keeps
        its own). On any failure the temp file is removed, the target untouched.
        keep: records the replaced file (or its absence) as the new one lands."""
        made: list[str] = []
        with self._unmaking(made), self.locked() as lock, self.at(
            "write", rel, follow=True, guard=guard, changes=True, named=True,
            make_parents=make_parents, made=made,
        ) as t:
            name = t.name()
            st = t.st
            if st is not None or t.trailing_slash:
                require_file(st, t.trailing_slash)
            if exclusive and st is not None:
                raise OSError(errno.EEXIST, "exists")
            if mode is None and st is not None:
                mode = stat.S_IMODE(st.st_mode)
            version = content_version(data)
            try:
                with keep.writing(self, t.rel, made, version, len(data), st) as land:
                    _atomic.replace(
                        t.dir_fd, name, data, mode=mode, expect=expect,
                        exclusive=exclusive, current_limit=max_file_bytes, land=land,
                        lock_fd=lock if "/" not in t.rel else None,  # its directory is the root
                        sync=self.durable,
                    )
            except _atomic.VersionMismatch:
                raise fail(
                    "conflict", "write", rel, "the file changed since expected_version was read"
                ) from None
            return WriteOutcome(created=st is None, version=version)

    @contextlib.contextmanager
    def _unmaking(self, made: list[str]) -> Iterator[None]:
        """A write or append that fails removes the directories it made on its way
        (`made`, filled as it resolves): a failed call leaves no trace."""
        try:
            yield
        except BaseException:
            remove_made(self, made)
            raise


    def append(
        self, rel: str, data: bytes, *, max_file_bytes: int, guard: Guard = None,
        keep: Keep = NO_KEEP,
    ) -> int:
        """One O_APPEND write (creates the file and parents if missing); refuses
        nlink > 1 with path_denied; too_large if the result would pass
        max_file_bytes. Returns the new size. keep: records the size before."""
        made: list[str] = []
        with self._unmaking(made), self.locked(), self.at(
            "append", rel, follow=True, guard=guard, changes=True, named=True,
            make_parents=True, made=made,
        ) as t:
            name = t.name()
            if t.st is not None or t.trailing_slash:
                require_file(t.st, t.trailing_slash)
            elif len(data) > max_file_bytes:
                raise _ops.too_large("append", rel, len(data), max_file_bytes)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
            # a file this call creates is recorded before the create, an existing one's
            # size once it is open
            creating = t.st is None
            with keep.appending(self, t.rel, made, None, data) if creating else _nothing():
                fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=t.dir_fd)
                try:
                    st = _ops.appendable(fd, rel, len(data), max_file_bytes)
                    with _nothing() if creating else keep.appending(
                        self, t.rel, made, st.st_size, data
                    ):
                        _atomic.append_whole(fd, data)
                    return os.fstat(fd).st_size
                finally:
                    os.close(fd)

    def mkdir(
        self, rel: str, *, parents: bool = True, guard: Guard = None, keep: Keep = NO_KEEP
    ) -> bool:
        """Returns False if it already existed as a directory; already_exists if a
        non-directory is there. keep: records the directories made."""
        made: list[str] = []
        with self.locked(), self.at(
            "mkdir", rel, follow=False, guard=guard, changes=True, make_parents=parents,
            made=made,
        ) as t:
            if t.leaf is None:
                return False
            if t.st is None:
                try:
                    with keep.making_dir(self, t.rel, made):
                        os.mkdir(t.leaf, 0o777, dir_fd=t.dir_fd)
                    return True
                except FileExistsError:
                    pass  # lost a race: judge what is there now
            if _ops.is_dir_there(self._resolver, t):
                return False
            raise OSError(errno.EEXIST, "exists")

    def unlink(self, rel: str, *, guard: Guard = None, keep: Keep = NO_KEEP) -> None:
        """Regular files and symlinks (the link, not its target) only; a directory
        -> is_a_directory. keep: takes the file away into the history store instead."""
        with self.at("delete", rel, follow=False, guard=guard, changes=True, named=True) as t:
            name = t.name()
            if t.st is None:
                raise OSError(errno.ENOENT, "missing")
            if stat.S_ISDIR(t.st.st_mode):
                raise OSError(errno.EISDIR, "directory")
            if t.trailing_slash:
                raise OSError(errno.ENOTDIR, "not a directory")
            keep.remove(self, t.rel, t.dir_fd, name, t.st)

    def set_dir_mode(self, rel: str, mode: int, *, guard: Guard = None) -> None:
        """A directory's permission bits (set-id bits never: the seccomp filter
        refuses them), by an fd of the directory itself, opened without following."""
        with self.at("chmod", rel, follow=False, guard=guard, changes=True) as t:
            if t.st is None:
                raise OSError(errno.ENOENT, "missing")
            if not stat.S_ISDIR(t.st.st_mode):
                raise OSError(errno.ENOTDIR, "not a directory")
            fd = t.dir_fd if t.leaf is None else os.open(t.name(), SUBDIR_FLAGS,
                                                         dir_fd=t.dir_fd)
            try:
                os.fchmod(fd, stat.S_IMODE(mode) & ~SETID)
            finally:
                if fd != t.dir_fd:
                    os.close(fd)

    def rmdir(self, rel: str, *, guard: Guard = None, keep: Keep = NO_KEEP) -> None:
        """Remove an empty directory (undo of a create_directory); a non-empty one
        fails io_error, anything else not_a_directory."""
        # exclusively: a keeper renames the directory away (into the store), and no
        # call of corral's may add a name in it between the check and that
        with self.locked(exclusive=True), self.at(
            "rmdir", rel, follow=False, guard=guard, changes=True, named=True
        ) as t:
            name = t.name()
            if t.st is None:
                raise OSError(errno.ENOENT, "missing")
            if not stat.S_ISDIR(t.st.st_mode):
                raise OSError(errno.ENOTDIR, "not a directory")
            if _ops.has_entries(t.dir_fd, name):  # a rename would take them along
                raise OSError(errno.ENOTEMPTY, "not empty")
            keep.remove(self, t.rel, t.dir_fd, name, t.st)

    def remove_tree(
        self, rel: str, *, recursive: bool, guard: Guard = None,
        beneath: Callable[[str], None] | None = None, keep: Keep = NO_KEEP,
    ) -> int:
        """Remove a directory and, with `recursive`, everything beneath it; returns
        how many entries beneath it went. Every entry is surveyed first (never
        following a symlink: a link is removed as a link) and given to
        `beneath` with its resolved path, then `guard.decided()` (if the guard has
        it: say, to ask about every supervised entry at once); only then does
        anything change. Refused: the root itself (invalid_arguments), a symlink
        (not_a_directory), a non-empty directory without `recursive`
        (invalid_arguments), a mount point of another file system beneath
        (path_denied), a FIFO, socket or device beneath (not_a_regular_file), more
        than _tree.MAX_TREE_ENTRIES entries (too_large). Under the tree lock held
        exclusively, as a directory move: no call of corral's adds a name meanwhile."""
        with self.locked(exclusive=True), self.at(
            "delete", rel, follow=False, guard=guard, changes=True
        ) as t:
            if t.leaf is None:
                raise fail("invalid_arguments", "delete", rel,
                           "it is a root of the workspace, which is never deleted")
            name = t.name()
            if t.st is None:
                raise OSError(errno.ENOENT, "missing")
            if stat.S_ISLNK(t.st.st_mode):
                raise fail("not_a_directory", "delete", rel,
                           "it is a symlink (delete_file removes the link)")
            if not stat.S_ISDIR(t.st.st_mode):
                raise OSError(errno.ENOTDIR, "not a directory")
            tree = _ops.survey(t, rel, recursive)
            if beneath is not None:
                for entry in tree:
                    beneath(_resolve.join(t.rel, entry.path))
            decided = getattr(guard, "decided", None)
            if decided is not None:
                decided()
            keep.remove_tree(self, t.rel, t.dir_fd, name, t.st, tree)
            return len(tree)

    def rename(
        self, src: str, dst_root: Root, dst: str, *, overwrite: bool = False,
        guard: MoveGuard = UNGUARDED, keep: Keep = NO_KEEP,
    ) -> None:
        """renameat2 between two parent fds; RENAME_NOREPLACE unless overwrite
        (already_exists); a directory into itself -> invalid_arguments. `guard`
        checks both paths and, for a directory, every entry beneath it (MoveGuard);
        more than _ops.MAX_MOVED_ENTRIES -> too_large. An entry another process adds
        between that walk and the rename is not seen; corral's own calls that add
        names wait for the tree lock, which a directory move holds exclusively
        from its walk to its rename."""
        check_path("move", src)
        check_path("move", dst)
        self._writable("move", src)
        dst_root._writable("move", dst)
        exclusive = False
        while True:
            with self.locked(dst_root, exclusive=exclusive):
                try:
                    return self._rename(src, dst_root, dst, overwrite, exclusive, guard, keep)
                except _DirectoryMove:
                    exclusive = True  # found a directory under the shared lock: again, exclusively

    def _rename(
        self, src: str, dst_root: Root, dst: str, overwrite: bool, exclusive: bool,
        guard: MoveGuard, keep: Keep,
    ) -> None:
        with self.at("move", src, follow=False, guard=guard.source, named=True) as s:
            src_name = s.name()
            if s.st is None:
                raise OSError(errno.ENOENT, "missing")
            if stat.S_ISDIR(s.st.st_mode) and not exclusive:
                raise _DirectoryMove
            with dst_root.at("move", dst, follow=False, guard=guard.destination, named=True) as d:
                dst_name = d.name()
                _ops.check_move(s, d, self._identity == dst_root._identity, src, dst)
                if stat.S_ISDIR(s.st.st_mode) and guard.checks:
                    _ops.guard_beneath(s.dir_fd, src_name, src, s.rel, d.rel, guard)
                flags = 0 if overwrite else RENAME_NOREPLACE
                try:
                    keep.move(
                        (self, s.rel, s.dir_fd, src_name, s.st),
                        (dst_root, d.rel, d.dir_fd, dst_name, d.st), flags,
                    )
                except OSError as exc:
                    if exc.errno == errno.EXDEV:  # here: another filesystem, not an escape
                        raise CrossFilesystem("move", src) from None
                    raise

    def remove_stale_temps(
        self, rel: str = ".", *, dead_pids: Collection[int] = (),
        min_age: float = _atomic.STALE_TEMP_AGE, recursive: bool = True,
    ) -> int:
        """Remove temp files left by writers that died mid-write: those named
        with a pid in `dead_pids` (a pool knows which worker it killed) or older
        than `min_age` seconds, in `rel` (and below it if recursive). A write's
        temp lies in its target's resolved directory: dirname(resolve(path)).
        Returns how many."""
        self._writable("clean", rel)
        removed = 0
        for entry in self.walk(rel) if recursive else self.scandir(rel):
            name = entry.path.rpartition("/")[2]
            if entry.type != "file" or not _atomic.stale_temp(
                name, entry.modified, dead_pids=dead_pids, min_age=min_age
            ):
                continue
            with contextlib.suppress(CorralError):
                self.unlink(_resolve.join(rel, entry.path))
                removed += 1
        return removed


def remove_made(root: Root, made: list[str]) -> None:
    """Remove directories a failed change made on its way (Root's write and append,
    a batch's staging), deepest first and only while empty. Under the tree lock
    exclusively, so no call of corral's is between resolving a path through one of
    them and acting in it (the caller holds none)."""
    if made:
        with root.locked(exclusive=True):
            for directory in reversed(made):
                try:
                    with root.at("rmdir", directory, follow=False, guard=None) as t:
                        os.rmdir(t.name(), dir_fd=t.dir_fd)
                except CorralError:
                    break  # not empty (or gone): the ones above it are not either
