"""The two changes history makes in a root that no tool makes: a torn append cut
back (settling after a kill) and a kept directory put back whole (undo of a
delete_directory). Each acts through Root's resolution primitive (`Root.at`)
under its tree lock, as Root's own changes do."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable

from corral.fs import NO_KEEP, Keep, Root
from corral.fs.syscalls import RENAME_NOREPLACE, renameat2, temp_name
from corral.fs.tree import remove


def cut_back(root: Root, rel: str, size: int | None, still: Callable[[], bool]) -> bool:
    """Undo a torn append (its writer was killed inside it): the regular file `rel`
    back to `size` bytes, or removed when the append created it (None). Under the
    lock appends hold, and only if it is bigger than that and `still()` (asked
    under the lock: no later change of it was recorded). Returns whether it cut."""
    with root.locked(), root.at("cut", rel, follow=False, guard=None, changes=True,
                                named=True) as t:
        name = t.name()
        if t.st is None or not stat.S_ISREG(t.st.st_mode):
            return False
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=t.dir_fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # as Root.append holds it
            st = os.fstat(fd)
            if st.st_nlink != 1 or st.st_size <= (size or 0) or not still():
                return False
            os.ftruncate(fd, size or 0)
            if size is None and _same_file(st, t.dir_fd, name):
                os.unlink(name, dir_fd=t.dir_fd)
            if root.durable:
                os.fsync(fd)
            return True
        finally:
            os.close(fd)


def restore_tree(
    root: Root, rel: str, src_fd: int, src_name: str, *,
    copy: Callable[[int, str], None], guard: Callable[[str], None] | None = None,
    keep: Keep = NO_KEEP,
) -> None:
    """Put a directory kept outside the roots (`src_name` of `src_fd`: a history
    store's) at `rel`, which must not exist (already_exists), its missing parents
    made: renamed in whole, or, where a rename cannot reach (another file system,
    a directory this process may not change), `copy(dir_fd, name)` makes it under
    a temp name beside `rel`, renamed in whole. `guard` gets the resolved path it
    lands at (to decide what the tree holds beneath it too). keep: records it as
    a directory made (one record). Under the tree lock exclusively, as a directory
    move: no call of corral's adds a name beneath it meanwhile."""
    made: list[str] = []
    with root.locked(exclusive=True), root.at(
        "restore", rel, follow=False, guard=guard, changes=True, named=True,
        make_parents=True, made=made,
    ) as t:
        name = t.name()
        if t.st is not None:
            raise OSError(errno.EEXIST, "exists")
        with keep.making_dir(root, t.rel, made):
            try:
                renameat2(src_fd, src_name, t.dir_fd, name, RENAME_NOREPLACE)
                return
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EACCES, errno.EPERM):
                    raise
            temp = temp_name()
            copy(t.dir_fd, temp)
            try:
                renameat2(t.dir_fd, temp, t.dir_fd, name, RENAME_NOREPLACE)
            except BaseException:
                remove(t.dir_fd, temp)
                raise


def _same_file(st: os.stat_result, dir_fd: int, name: str) -> bool:
    """Whether `name` in `dir_fd` is still the file `st` was taken of."""
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)
