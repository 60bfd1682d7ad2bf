"""The one resolution loop: a root-relative path -> (parent directory fd, final name).

Two resolvers open directories beneath the root fd:
- `Openat2Resolver`: one openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) call;
  the kernel refuses `..` above the root, absolute symlinks and magic links
  with EXDEV/ELOOP, whatever renames race with it.
- `WalkResolver` (kernels without openat2): one component at a time with
  O_NOFOLLOW, keeping its own stack of directory fds so `..` pops a fd it
  opened instead of asking the kernel for a parent; at the end it checks that
  each directory is still where it was found (a rename raced it: walk again). It resolves symlinks
  itself and does what RESOLVE_BENEATH does: a relative target is spliced
  into the remaining path, an *absolute target is refused* (EXDEV ->
  outside_workspace) even when it would land inside the root, `..` never goes
  above the root, and more than MAX_SYMLINKS links is ELOOP.

Above both, `lookup` opens the parent of the final name and, when asked to
follow, resolves a final symlink itself in the same way (re-resolving the
link's target from the root), so every syscall that acts gets a directory fd
beneath the root plus one plain name. Failures are OSError with the errno the
kernel would give; corral/fs/_errors.py maps them once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

import corral.fs.syscalls as syscalls
from corral.fs.syscalls import DIR_FLAGS

MAX_SYMLINKS = 40  # the kernel's MAXSYMLINKS: the same depth both resolvers allow
OPENAT2_EAGAIN_RETRIES = 16  # EAGAIN = a rename raced the lookup; a few retries win, then report it
WALK_RETRIES = 16  # the same for the walk: its path changed under it; walk again, then report it

_RESOLVE = syscalls.RESOLVE_BENEATH | syscalls.RESOLVE_NO_MAGICLINKS
_DELETED = " (deleted)"  # what the kernel appends to the recorded path of a removed directory


def _oserror(err: int) -> OSError:
    return OSError(err, os.strerror(err))


def join(base: str, rel: str) -> str:
    return rel if base == "." else f"{base}/{rel}"


def split(rel: str) -> tuple[str, str]:
    """Lexical (directory part, final name); the name may be "", "." or ".."."""
    head, _, leaf = rel.rstrip("/").rpartition("/")
    return head or ".", leaf


class Openat2Resolver:
    name = "openat2"

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd

    def open_dir(self, rel: str) -> tuple[int, str]:
        for _ in range(OPENAT2_EAGAIN_RETRIES):
            try:
                fd = syscalls.openat2(self.root_fd, rel, DIR_FLAGS, 0, _RESOLVE)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    continue
                if exc.errno == errno.ELOOP:
                    self._classify_loop(rel)
                raise
            try:
                return fd, self._relative(fd)
            except BaseException:
                os.close(fd)
                raise
        raise _oserror(errno.EAGAIN)

    def _classify_loop(self, rel: str) -> None:
        """The kernel answers ELOOP both for a loop and for a magic link such as
        /proc/self/root; the walk tells them apart (EXDEV for the magic link, whose
        text is absolute or leaves the root). Its result is never used otherwise."""
        try:
            os.close(WalkResolver(self.root_fd).open_dir(rel)[0])
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise
        raise _oserror(errno.ELOOP)

    def _relative(self, fd: int) -> str:
        """Root-relative path of an fd opened beneath the root, from the kernel's record."""
        root, here = syscalls.fd_path(self.root_fd), syscalls.fd_path(fd)
        if here.endswith(_DELETED) and os.fstat(fd).st_nlink == 0:
            raise _oserror(errno.ENOENT)  # removed meanwhile: its recorded path is not a path
        if here == root:
            return "."
        prefix = root if root.endswith("/") else root + "/"
        if not here.startswith(prefix):  # root moved or removed meanwhile
            raise _oserror(errno.ESTALE)
        return here[len(prefix):]


class WalkResolver:
    name = "walk"

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd

    def open_dir(self, rel: str) -> tuple[int, str]:
        for _ in range(WALK_RETRIES):
            try:
                return self._walk(rel)
            except _ChainMoved:
                continue
        raise _oserror(errno.ESTALE)

    def _walk(self, rel: str) -> tuple[int, str]:
        if rel.startswith("/"):
            raise _oserror(errno.EXDEV)
        fds: list[int] = []  # fds[i] is the directory names[:i+1]; the root fd is never in it
        names: list[str] = []
        todo = rel.split("/")[::-1]  # a stack: the next component is last
        links = 0
        try:
            while todo:
                name = todo.pop()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not names:
                        raise _oserror(errno.EXDEV)
                    os.close(fds.pop())
                    names.pop()
                    continue
                here = fds[-1] if fds else self.root_fd
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=here)
                fds.append(fd)  # closed with the others on any failure
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    names.append(name)
                    continue
                fds.pop()
                try:
                    if not stat.S_ISLNK(mode):
                        raise _oserror(errno.ENOTDIR)
                    target = os.readlink("", dir_fd=fd)  # this very link, whatever is renamed
                finally:
                    os.close(fd)
                links += 1
                if links > MAX_SYMLINKS:
                    raise _oserror(errno.ELOOP)
                if target.startswith("/"):
                    raise _oserror(errno.EXDEV)
                if not target:
                    raise _oserror(errno.ENOENT)
                todo.extend(target.split("/")[::-1])
            self._check_chain(fds, names)
            result = fds.pop() if fds else os.dup(self.root_fd)
            return result, "/".join(names) or "."
        finally:
            for fd in fds:
                os.close(fd)


    def _check_chain(self, fds: list[int], names: list[str]) -> None:
        """Each directory opened is still that name in the one before it: none
        was moved (perhaps out of the root) while the walk went on. The openat2
        resolver's path check is the same test."""
        parents = [self.root_fd, *fds][: len(fds)]
        for parent, name, fd in zip(parents, names, fds, strict=True):
            try:
                there = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                raise _ChainMoved from None
            here = os.fstat(fd)
            if (there.st_dev, there.st_ino) != (here.st_dev, here.st_ino):
                raise _ChainMoved


class _ChainMoved(Exception):
    """A directory on the walked path was renamed meanwhile: walk again."""


Resolver = Openat2Resolver | WalkResolver


@dataclass
class Target:
    """What a path names: `leaf` in the directory `dir_fd` (O_PATH), or, when
    `leaf` is None, the directory `dir_fd` itself (the path ended in ., .. or
    named the root). `rel` is its resolved root-relative path; `st` its lstat
    (None: missing). The caller closes it (it is a context manager)."""

    dir_fd: int
    leaf: str | None
    rel: str
    st: os.stat_result | None
    trailing_slash: bool

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.dir_fd)

    def name(self) -> str:
        """The final name an acting syscall gets; "", "." and ".." are refused."""
        if self.leaf is None:
            raise _oserror(errno.EINVAL)
        return self.leaf

    def open(self, flags: int, mode: int = 0o666) -> int:
        name = self.leaf if self.leaf is not None else "."
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.dir_fd)


MissingParent = Callable[[str, str], None]


def lookup(
    resolver: Resolver, rel: str, *, follow: bool, missing_parent: MissingParent | None = None
) -> Target:
    """Open the parent of `rel`'s final name beneath the root; follow a final
    symlink (relative targets only) if asked. When the parent directory is
    missing, `missing_parent(dir_rel, leaf)` is called once: it creates the
    directory (the lookup goes on) or raises."""
    slash = rel.endswith("/")
    for _ in range(MAX_SYMLINKS + 1):
        head, leaf = split(rel)
        if leaf in ("", ".", ".."):
            fd, resolved = resolver.open_dir(rel)
            return Target(fd, None, resolved, os.fstat(fd), slash)
        try:
            # A name in the root itself: its directory is the root fd, as the walk
            # finds too; openat2 and the two readlinks of its path check would only
            # find the root again (~15 us of a small call).
            fd, parent = (os.dup(resolver.root_fd), ".") if head == "." else resolver.open_dir(head)
        except FileNotFoundError:
            if missing_parent is None:
                raise
            missing_parent(head, leaf)
            missing_parent = None
            fd, parent = resolver.open_dir(head)
        try:
            st: os.stat_result | None = os.stat(leaf, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except BaseException:
            os.close(fd)
            raise
        if not (follow and st is not None and stat.S_ISLNK(st.st_mode)):
            return Target(fd, leaf, join(parent, leaf), st, slash)
        try:
            link = os.readlink(leaf, dir_fd=fd)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            continue  # no longer a link (renamed meanwhile): look again
        finally:
            os.close(fd)
        if link.startswith("/"):
            raise _oserror(errno.EXDEV)
        rel = join(parent, link)
    raise _oserror(errno.ELOOP)


def join_all(base: str, names: list[str]) -> str:
    return "/".join(names if base == "." else [base, *names]) or "."


def deepest_dir(resolver: Resolver, rel: str) -> tuple[int, str, list[str]]:
    """The deepest existing directory on the way to `rel`: its fd, its resolved
    path and the missing names below it. ENOENT when a missing name is followed
    by "..": the kernel stops at the missing name, so do we."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    for depth in range(len(parts), -1, -1):
        try:
            fd, base = resolver.open_dir("/".join(parts[:depth]) or ".")
            break
        except FileNotFoundError:
            if depth == 0:
                raise
    missing = parts[depth:]
    if ".." in missing:
        os.close(fd)
        raise _oserror(errno.ENOENT)
    return fd, base, missing


def predict(resolver: Resolver, head: str, leaf: str) -> str:
    """The resolved path `head/leaf` will have once head's missing directories exist."""
    fd, base, missing = deepest_dir(resolver, head)
    os.close(fd)
    return join_all(base, [*missing, leaf])


def make_dirs(resolver: Resolver, rel: str, before_create: Callable[[str], None]) -> list[str]:
    """Create the missing directories of `rel` (mkdir -p beneath the root).
    `before_create(resolved_rel)` sees the resolved path of the deepest one first.
    Returns the resolved paths of the directories this call created, outermost first."""
    fd, base, missing = deepest_dir(resolver, rel)
    made: list[str] = []
    try:
        before_create(join_all(base, missing))
        for index, name in enumerate(missing):
            # FileExistsError: a racing mkdir -p; O_NOFOLLOW below refuses all but a directory
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=fd)
                made.append(join_all(base, missing[: index + 1]))
            child = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return made
