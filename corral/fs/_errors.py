"""errno -> stable error code, in one place, and the checks every caller path gets.

Messages follow Go's PathError: the operation and the path as the caller gave
it, never the host's absolute path, and nothing that tells whether something
outside the roots exists (an escape is refused before anything there is looked up).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from corral.errors import CorralError

PATH_MAX = 4096  # the kernel refuses longer paths (ENAMETOOLONG); refuse them before any syscall

# The reason a read-only file system gives (EROFS), as a worker's answer says it.
READ_ONLY_FS = "the file system is read-only"

_CODES = {
    errno.ELOOP: ("symlink_loop", "too many levels of symbolic links"),
    errno.EXDEV: ("outside_workspace", "path escapes the workspace roots"),
    errno.ENOENT: ("not_found", "no such file or directory"),
    errno.ENOTDIR: ("not_a_directory", "not a directory"),
    errno.EISDIR: ("is_a_directory", "is a directory"),
    errno.EEXIST: ("already_exists", "already exists"),
    errno.ENOTEMPTY: ("already_exists", "a non-empty directory is in the way"),
    errno.EROFS: ("read_only", READ_ONLY_FS),
    errno.EACCES: ("path_denied", "permission denied"),
    errno.EPERM: ("path_denied", "operation not permitted"),
    errno.ENAMETOOLONG: ("invalid_arguments", "file name too long"),
    errno.EINVAL: ("invalid_arguments", "invalid path for this operation"),
    errno.ENXIO: ("not_a_regular_file", "not a regular file"),
}


def fail(code: str, op: str, path: str, why: str, *, rule: str | None = None) -> CorralError:
    """The operation, the caller's path and why ("cannot read a.txt: ...")."""
    return CorralError(code, rule=rule, op=op, path=path, reason=why)


class CrossFilesystem(CorralError):
    """io_error for a rename(2) between two file systems (EXDEV), which the
    caller may answer with a copy."""

    def __init__(self, op: str, path: str) -> None:
        super().__init__(
            "io_error", op=op, path=path, reason="the destination is on another file system")


def from_errno(err: int | None, op: str, path: str) -> CorralError:
    code, why = _CODES.get(err or 0, ("io_error", ""))
    return fail(code, op, path, why or f"i/o error ({os.strerror(err or errno.EIO)})")


@contextmanager
def translated(op: str, path: str) -> Iterator[None]:
    """OSError inside -> CorralError naming `op` and the caller's `path`."""
    try:
        yield
    except OSError as exc:
        raise from_errno(exc.errno, op, path) from None


def check_path(op: str, path: object, *, absolute: bool = False) -> str:
    """The caller's path if it can be resolved at all, else invalid_arguments (and,
    unless `absolute` paths are the caller's to place, outside_workspace for one).
    The one check of a path's text: every layer that takes a path calls it."""
    if not isinstance(path, str) or not path:
        raise CorralError("invalid_arguments", f"cannot {op}: the path must be a non-empty string.")
    if "\0" in path:
        raise fail("invalid_arguments", op, path, "path contains a NUL byte")
    try:  # as os.fsencode will: a lone surrogate escape names no file
        size = len(path.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        raise fail("invalid_arguments", op, path, "path is not valid text") from None
    if size >= PATH_MAX:
        why = f"path is {size} bytes, over the {PATH_MAX} byte limit"
        raise fail("invalid_arguments", op, path, why)
    if path.startswith("/") and not absolute:
        raise from_errno(errno.EXDEV, op, path)
    return path


def require_file(st: os.stat_result | None, trailing_slash: bool = False) -> None:
    """Only regular files are read or written (ENXIO maps to not_a_regular_file)."""
    if st is None:
        raise OSError(errno.ENOENT, "missing")
    if stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, "directory")
    if trailing_slash:
        raise OSError(errno.ENOTDIR, "not a directory")
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.ENXIO, "not a regular file")
