"""The mount namespace a worker moves into, holding only its roots (ctypes; Linux).
Private plumbing for confine.py and probe.py. Hazmat: irreversible for the caller.

Landlock governs opening files, not stat or readlink: without this, a compromised
worker learns which host paths exist (/home/alice/.ssh/id_rsa, its size and
times). Here the worker's `/` becomes a fresh, read-only tmpfs holding a bind mount
of each root at the root's own absolute path, and of the worker's own
/proc/self/fd (corral.fs reads an fd's path there); the host's tree is detached.
A read-only root's bind mount is read-only too: Landlock does not govern chmod or
chown, and a change of mode (fchmod on an fd the worker opened for reading) then
fails EROFS; the worker cannot remount it (seccomp kills on mount, and it keeps
no CAP_SYS_ADMIN).
The root fds the worker inherited are reopened through the bind mounts and put
back under the same numbers: an fd from before would still lead, by `..`, into the
host's tree.

As root the worker unshares the mount namespace directly; otherwise it first
enters a user namespace of its own, mapping only its own uid and gid (where the
kernel allows unprivileged user namespaces). A kernel that allows neither gets
False from `enter()`, and the worker runs without this layer.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
from collections.abc import Collection, Sequence

from corral import _prctl
from corral._syscall import LIBC, call, syscall
from corral.seccomp.arches import load_arch, native_arch

CLONE_NEWNS = 0x0002_0000
CLONE_NEWUSER = 0x1000_0000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x4_0000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 0x400, 0x800, 0x20_0000
MNT_DETACH = 0x2
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
# The flags a remount must repeat: a user namespace may not clear them (statvfs's
# bit -> mount(2)'s bit; only relatime's differ).
_KEPT_FLAGS = {
    os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME, os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME,
}
# Where the new root is assembled before pivot_root: any directory of the host's
# tree serves, since the tmpfs on it lives only in the worker's namespace, unless a
# root is that directory or holds it (its bind would show the tmpfs, not the host's
# files). /dev and /run are never roots of a config; the first that fits is taken.
STAGING_CANDIDATES = ("/tmp", "/mnt", "/dev", "/run")
_TMPFS = MS_NOSUID | MS_NODEV | MS_NOEXEC
_TMPFS_OPTIONS = b"mode=0755,size=1m"  # it holds only empty mount points
_PROC_FDS = "/proc/self/fd"
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC  # as corral.fs opens roots
# errnos meaning "the kernel does not let this process have a namespace"
_REFUSED = (errno.EPERM, errno.EINVAL, errno.ENOSPC, errno.EUSERS, errno.ENOSYS)


class Refused(OSError):
    """The kernel does not allow this process a mount namespace."""


def _unshare(flags: int) -> None:
    call(LIBC.unshare, ctypes.c_int(flags))


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: bytes | None = None) -> None:
    call(
        LIBC.mount, None if source is None else os.fsencode(source), os.fsencode(target),
        None if fstype is None else fstype.encode(), ctypes.c_ulong(flags), data,
    )


def _nr(name: str) -> int:
    # glibc has no wrapper; the number comes from the same tables as seccomp's
    return load_arch(native_arch() or "x86_64").syscalls[name]


def _pivot_root(new_root: str, put_old: str) -> None:
    syscall(_nr("pivot_root"), os.fsencode(new_root), os.fsencode(put_old))


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(target: str, attr_set: int) -> None:
    attr = _MountAttr(attr_set=attr_set)
    syscall(_nr("mount_setattr"), ctypes.c_int(AT_FDCWD), os.fsencode(target),
            ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))


def _make_read_only(target: str) -> None:
    """The mount at `target` read-only, and every mount beneath it."""
    try:
        _mount_setattr(target, MOUNT_ATTR_RDONLY)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
        # before Linux 5.12: a read-only remount of this mount alone (a mount of
        # the host's beneath it stays as it was), repeating the flags it has
        kept = os.statvfs(target).f_flag
        flags = sum(bit for st_bit, bit in _KEPT_FLAGS.items() if kept & st_bit)
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)


def unshare_mounts() -> None:
    """Enter a new mount namespace (through a user namespace when not privileged);
    Refused if the kernel allows neither. The caller must be single-threaded."""
    try:
        _unshare(CLONE_NEWNS)
        return
    except OSError as exc:
        if exc.errno not in _REFUSED:
            raise
    if not _prctl.dumpable():
        # its /proc/self/uid_map belongs to root: the ids could not be mapped
        raise Refused(errno.EPERM, "no mount namespace: the process is not dumpable")
    uid, gid = os.geteuid(), os.getegid()
    try:
        _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    except OSError as exc:
        if exc.errno in _REFUSED:
            raise Refused(exc.errno, f"no mount namespace: {exc.strerror}") from None
        raise
    # the same ids inside as outside, so files keep their owners; no group changes
    for name, text in (("setgroups", b"deny"), ("uid_map", b"%d %d 1" % (uid, uid)),
                       ("gid_map", b"%d %d 1" % (gid, gid))):
        control = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(control, text)
        finally:
            os.close(control)


def enter(roots: Sequence[tuple[str, int | None]], read_only: Collection[str] = ()) -> bool:
    """Move into a mount namespace holding only `roots` ((absolute path, open fd or
    None)), those whose path is in `read_only` bound read-only; each fd is replaced
    by one opened through the namespace, same number. False if the kernel allows no
    namespace; OSError if building it fails."""
    # a root removed since the sandbox opened it has no path left to bind
    removed = [fd for _, fd in roots if fd is not None and os.fstat(fd).st_nlink == 0]
    roots = [(path, fd) for path, fd in roots if fd not in removed]
    # A root is bound from where its fd's directory is now: one renamed since the
    # sandbox opened it (`mv ws moved`) from its new place, at its old path (the
    # one the worker's calls and the host's messages know it by). Staging must
    # clear both.
    where = {fd: _where(fd) for _, fd in roots if fd is not None}
    sources = [path for path, _ in roots] + list(where.values())
    try:
        unshare_mounts()
    except Refused:
        return False
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount reaches the host
    staging = _staging(sources)
    # bind from fds opened in this namespace (a bind takes its source from the
    # caller's own namespace), before the tmpfs covers `staging`; each must be the
    # very directory the inherited fd names, or a rename has swapped it meanwhile
    opened = {path: _open_same(path, None) if fd is None else _open_held(fd, where[fd])
              for path, fd in roots}
    try:
        _mount("corral", staging, "tmpfs", _TMPFS, _TMPFS_OPTIONS)
        bound: list[str] = []
        for path in sorted(path for path, _ in roots):
            target = staging + path
            _make_mount_point(target, inside=[staging + b for b in bound])
            _mount(f"{_PROC_FDS}/{opened[path]}", target, None, MS_BIND | MS_REC)
            if path in read_only:
                _make_read_only(target)  # before a root nested in it is bound on it
            bound.append(path)
    finally:
        for bound_fd in opened.values():
            os.close(bound_fd)
    if removed:
        # on a tmpfs of their own, detached at once: an open removed directory on the
        # staging tmpfs would keep it from being remounted read-only (EBUSY)
        scratch = staging + "/.removed"
        os.mkdir(scratch)
        _mount("corral", scratch, "tmpfs", _TMPFS, _TMPFS_OPTIONS)
        for index, gone in enumerate(removed):
            _stand_in(f"{scratch}/{index}", gone)
        _mount_detach(scratch)
    os.makedirs(staging + _PROC_FDS)
    _mount(_PROC_FDS, staging + _PROC_FDS, None, MS_BIND)  # /proc/self: this process's own
    _mount(None, staging, None, MS_REMOUNT | MS_RDONLY | _TMPFS)
    os.chdir(staging)
    _pivot_root(".", ".")  # the old root now sits on top of the new one ...
    _mount_detach(".")  # ... and goes, with every host mount under it
    os.chdir("/")
    for path, fd in roots:
        if fd is not None:
            _reopen(path, fd)
    return True


def _staging(roots: list[str]) -> str:
    """The first candidate directory that no root is, or holds."""
    for candidate in STAGING_CANDIDATES:
        clear = all(candidate != root and not candidate.startswith(root.rstrip("/") + "/")
                    for root in roots)
        if clear and os.path.isdir(candidate):
            return candidate
    raise OSError(errno.EBUSY, f"no directory of {STAGING_CANDIDATES} lies outside the roots")


def _make_mount_point(target: str, inside: list[str]) -> None:
    """mkdir -p within the tmpfs only: a target beneath a root bound already must
    exist there (creating it would write to the host's files)."""
    if any(target.startswith(parent + "/") for parent in inside):
        if not os.path.isdir(target):
            raise OSError(errno.ENOENT, f"nested root {target!r} is gone from its parent root")
        return
    os.makedirs(target, exist_ok=True)


def _mount_detach(target: str) -> None:
    call(LIBC.umount2, os.fsencode(target), ctypes.c_int(MNT_DETACH))


def _where(fd: int) -> str:
    """The path the directory `fd` names has now (renamed or not)."""
    return os.readlink(f"{_PROC_FDS}/{fd}")


def _open_held(fd: int, path: str, attempts: int = 3) -> int:
    """The directory `fd` names, opened in this namespace at `path`, where it was
    before the unshare; asked again if a rename has moved it since (the kernel
    gives the path in the old namespace's terms, the same tree, while the zygote
    keeps that namespace alive)."""
    for _ in range(attempts - 1):
        try:
            return _open_same(path, fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ESTALE):
                raise
        path = _where(fd)
    return _open_same(path, fd)


def _open_same(path: str, fd: int | None) -> int:
    """`path` opened as a directory, as `fd` was (O_PATH or for reading: the history
    store's fd is read and locked); with `fd`, it must be the directory `fd` names."""
    flags = _DIR_FLAGS
    if fd is not None and not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_PATH:
        flags &= ~os.O_PATH
    fresh = os.open(path, flags | os.O_NOFOLLOW)
    if fd is not None:
        old, new = os.fstat(fd), os.fstat(fresh)
        if (old.st_dev, old.st_ino) != (new.st_dev, new.st_ino):
            os.close(fresh)
            raise OSError(errno.ESTALE, f"root {path!r} is no longer the directory opened")
    return fresh


def _stand_in(place: str, fd: int) -> None:
    """Replace `fd`, a removed root, by an empty directory made at `place` in the
    namespace's tmpfs and removed again: every call finds nothing in it, as in the
    removed root, and its link count of 0 tells the worker why (worker.py names it)."""
    os.mkdir(place, 0o500)
    flags = _DIR_FLAGS if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_PATH else _DIR_FLAGS & ~os.O_PATH
    fresh = os.open(place, flags | os.O_NOFOLLOW)
    try:
        os.rmdir(place)
        os.dup2(fresh, fd, inheritable=os.get_inheritable(fd))
    finally:
        os.close(fresh)


def _reopen(path: str, fd: int) -> None:
    """Replace `fd` by the same directory opened through its bind mount (same flags,
    same number), so `..` from it ends at the namespace's `/`."""
    fresh = _open_same(path, fd)
    try:
        os.dup2(fresh, fd, inheritable=os.get_inheritable(fd))
    finally:
        os.close(fresh)
