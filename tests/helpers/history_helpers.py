"""Shared by the history tests: a snapshot of a tree (types, bytes, modes), and the
store as a sandbox uses it: a worker writes in a work directory beneath the store,
the host commits (promotes) what is done there, a worker settles dead writers."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from corral.fs import Root, Roots
from corral.history import keeper, promote, recover, revert
from corral.history.store import Store
from corral.policy import Policy

WORK = "w-test"  # a work directory (the host names it after the roots its sandbox writes)


def snapshot(root: Path) -> dict[str, Any]:
    """Every entry beneath `root`: directories and files with their permission
    bits, files with their bytes, symlinks with their target."""
    tree: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                tree[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                tree[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                tree[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return tree


def work_store(store_dir: Path) -> tuple[Path, Store]:
    """The work directory under `store_dir` (made if need be) and a Store over it,
    as a writing sandbox's worker holds it."""
    work = store_dir / WORK
    work.mkdir(parents=True, exist_ok=True)
    return work, Store.open(str(work))


def commit_done(store: Store, work: Path, *roots: Path | str) -> dict[str, str]:
    """What the host does with a call's answer, or at its sweep: commit every done
    record and checkpoint of the work directory, whose writers may write `roots`;
    those it refused, and why."""
    return promote.promote(store, work.name, promote.done(store),
                           promote.Expect(frozenset(str(root) for root in roots)))


def promoted(store: Store, work: Path, *roots: Path | str) -> Store:
    """commit_done, where each must check out: a record the host refuses is a
    test's failure."""
    refused = commit_done(store, work, *roots)
    assert refused == {}, refused
    return store


def settled(workspace: Path, work: Path, pids: list[int] | None) -> Store:
    """What the host has done after a crash: a worker settled the dead writers'
    records (`pids`; None: every orphan), the host promoted what was done."""
    store = Store.open(str(work))
    with Root(str(workspace)) as root:
        restorer = revert.Restorer(Roots(root), store, Policy(), 1 << 20, "settle")
        with store.settling():
            recover.settle(restorer, pids)
    return promoted(store, work, workspace)


def left(work: Path, *endings: str) -> list[str]:
    """The names in the work directory ending so (e.g. records not yet committed)."""
    return sorted(p.name for p in work.iterdir() if p.name.endswith(endings))


def renames_into_the_store_cross_mounts() -> None:
    """In this (forked) process, renames into the store fail as across mounts
    (EXDEV), as in a confined worker: what is kept is copied in."""
    real = os.rename

    def rename(src: Any, dst: Any, *, src_dir_fd: Any = None, dst_dir_fd: Any = None) -> None:
        if str(dst).startswith("b-"):
            raise OSError(errno.EXDEV, "cross-device")
        real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    keeper.os.rename = rename  # type: ignore[assignment]


def die_after(target: Any, name: str) -> None:
    """In a forked child: `target.name` runs, then the process dies (kill -9 there)."""
    real = getattr(target, name)

    def dying(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        os._exit(9)

    setattr(target, name, dying)
