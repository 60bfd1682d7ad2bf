"""Where a workspace's history store lives: a base directory outside every root
(default: the XDG state directory), and under it one directory per workspace,
named by a hash of the workspace's real path. What is inside it is store.py's.
"""

from __future__ import annotations

import contextlib
import os

from corral.errors import CorralError
from corral.fs.version import content_version
from corral.history.store import META, write_new

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


class StoreInsideRoot(ValueError):
    """The store's base directory overlaps a root, where a tool could reach it. The
    fix is the operator's (a config says where the store lives): the caller that
    reads the config says so in its own terms."""

    def __init__(self, base: str, root: str) -> None:
        self.base, self.root = base, root
        super().__init__(f"the history store {base} overlaps the root {root}, where tools "
                         "could reach it")


def state_dir() -> str:
    """$XDG_STATE_HOME, else ~/.local/state (the XDG base directory spec)."""
    base = os.environ.get("XDG_STATE_HOME")
    if base and os.path.isabs(base):
        return base
    return os.path.join(os.path.expanduser("~"), ".local", "state")


def default_base() -> str:
    return os.path.join(state_dir(), "corral", "history")


def workspace_key(workspace: str) -> str:
    """The per-workspace subdirectory: a hash of the workspace's real path."""
    return content_version(os.fsencode(workspace))[:16]


def check_location(base: str | None, roots: list[str]) -> str:
    """The store's base directory (default: the state directory), real;
    StoreInsideRoot if it overlaps a root, where a tool could reach it."""
    base = os.path.realpath(base or default_base())
    for root in roots:
        if base == root or base.startswith(root.rstrip("/") + "/") or root.startswith(base + "/"):
            raise StoreInsideRoot(base, root)
    return base


def prepare(base: str | None, workspace: str, roots: list[str]) -> str:
    """Make (0700) and return the store directory of `workspace` under `base`
    (default: the state directory). Refused inside a root: a tool could reach it.
    Nothing in the store is followed: its own entries are opened O_NOFOLLOW."""
    base = check_location(base, roots)
    path = os.path.join(base, workspace_key(workspace))
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        fd = os.open(path, _DIR_FLAGS)
        try:
            with contextlib.suppress(FileExistsError):
                write_new(fd, META, (workspace + "\n").encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise CorralError(
            "io_error", f"the history store {path} cannot be created ({exc.strerror}); set "
            "[history] path to a writable directory outside every root, or enabled = false.",
        ) from None
    return path


def make_work(home_fd: int, name: str) -> None:
    """A work directory (store.work_name) in the store open at `home_fd`."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=home_fd)
