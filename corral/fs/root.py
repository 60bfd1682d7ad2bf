"""INTERFACE STUB — the fs helper replaces the bodies; signatures are the contract
that corral/tools codes against. Every method raises CorralError (never OSError)
with the path *as the caller gave it* in the message.

`guard` on every operation: called with the root-relative resolved path
(posix, "." for the root itself, no leading "./") of the object the operation is
about to touch, computed from the fd actually opened (race-free), after
resolution and before any read or change. Tools pass a guard that applies the
policy and raises CorralError("path_denied"/"approval_required").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

Guard = Callable[[str], None] | None


@dataclass(frozen=True)
class FileInfo:
    type: str  # "file" | "dir" | "symlink" | "other"
    size: int
    modified: float  # st_mtime
    mode: int  # permission bits only (st_mode & 0o7777)
    nlink: int
    symlink_target: str | None = None  # readlink text when type == "symlink"


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the directory listed/walked ("a/b.txt")
    type: str  # "file" | "dir" | "symlink" | "other" (never follows symlinks)
    size: int
    modified: float


@dataclass(frozen=True)
class WriteOutcome:
    created: bool
    version: str  # content_version of the bytes now in the file


class Root:
    """A directory handle. Modes: "rw" or "ro" (ro refuses every change: read_only)."""

    path: str  # the root's real absolute path
    mode: str
    fd: int  # O_PATH|O_DIRECTORY fd of the root

    def __init__(self, path: str, *, mode: str = "rw", resolver: str = "auto") -> None:
        """resolver: "auto" (openat2, else walk), "openat2" or "walk" (the fallback)."""
        raise NotImplementedError

    @classmethod
    def from_fd(cls, fd: int, path: str, *, mode: str = "rw", resolver: str = "auto") -> Root:
        """Adopt an fd opened elsewhere (the zygote opens roots, workers inherit them)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def resolve(self, rel: str, *, follow: bool = True) -> str:
        """The resolved root-relative path `rel` names (a missing leaf is allowed:
        resolved parent + leaf). Raises outside_workspace, symlink_loop, not_found
        (missing parent), not_a_directory."""
        raise NotImplementedError

    def info(self, rel: str, *, follow: bool = False, guard: Guard = None) -> FileInfo | None:
        """lstat-like (stat if follow) through the parent fd; None if it does not exist."""
        raise NotImplementedError

    def read_bytes(self, rel: str, *, max_file_bytes: int, guard: Guard = None) -> bytes:
        """Whole regular file (follows symlinks beneath the root). Opens O_NONBLOCK and
        decides from fstat: dir -> is_a_directory, FIFO/socket/device ->
        not_a_regular_file (never blocks), size > max_file_bytes -> too_large naming
        both sizes."""
        raise NotImplementedError

    def write_atomic(
        self,
        rel: str,
        data: bytes,
        *,
        expected_version: str | None = None,
        exclusive: bool = False,
        make_parents: bool = True,
        guard: Guard = None,
    ) -> WriteOutcome:
        """Temp file (O_CREAT|O_EXCL|O_NOFOLLOW) in the target's directory, write,
        fsync, old file's mode, rename over the target, fsync the directory. A final
        symlink is written through to its target beneath the root (stays a link).
        expected_version: under an flock of the parent directory, the current
        content's version must equal it (missing file -> conflict), else conflict.
        exclusive: fail already_exists if the target exists (copy/move without
        overwrite). On any failure the temp file is removed, the target untouched."""
        raise NotImplementedError

    def append(self, rel: str, data: bytes, *, max_file_bytes: int, guard: Guard = None) -> int:
        """One O_APPEND write (creates the file and parents if missing); refuses
        nlink > 1 with path_denied; too_large if the result would pass
        max_file_bytes. Returns the new size."""
        raise NotImplementedError

    def mkdir(self, rel: str, *, parents: bool = True, guard: Guard = None) -> bool:
        """Returns False if it already existed as a directory; already_exists if a
        non-directory is there."""
        raise NotImplementedError

    def unlink(self, rel: str, *, guard: Guard = None) -> None:
        """Regular files and symlinks (the link, not its target) only; a directory
        -> is_a_directory."""
        raise NotImplementedError

    def rename(
        self, src: str, dst_root: Root, dst: str, *, overwrite: bool = False,
        guard_src: Guard = None, guard_dst: Guard = None,
    ) -> None:
        """renameat2 between two parent fds; RENAME_NOREPLACE unless overwrite
        (already_exists); a directory into itself -> invalid_arguments."""
        raise NotImplementedError

    def scandir(self, rel: str, *, guard: Guard = None) -> list[Entry]:
        """One directory's entries (names only in Entry.path), never following symlinks."""
        raise NotImplementedError

    def walk(self, rel: str, *, guard: Guard = None) -> Iterator[Entry]:
        """Depth-first, sorted by name, paths relative to `rel`; never descends into
        symlinks; opens each subdirectory beneath its parent fd with O_NOFOLLOW."""
        raise NotImplementedError
