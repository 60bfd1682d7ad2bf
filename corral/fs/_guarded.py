"""Resolution as Root does it (Go's root_openat.go above the loop in _resolve.py):
the resolver a root picks, and a lookup that gives the guard its say on the way.

A guard is told of every directory a path passes through before anything about
it is answered, whether the directory exists or not: "missing" must not say more
than "denied" (a policy that hides `.ssh` must not let `.ssh/x` tell whether it
exists). `guard.through` is optional; a plain callable guard is only asked
about the resolved path.
"""

from __future__ import annotations

import errno
import os

import corral.fs._resolve as _resolve
from corral.errors import CorralError
from corral.fs.types import Guard


def guard_at(guard: Guard, rel: str) -> None:
    if guard is not None:
        guard(rel)


def pick_resolver(choice: str, fd: int) -> _resolve.Resolver:
    """The resolver named by `choice` ("auto": openat2 where the kernel has it)."""
    if choice not in ("auto", "openat2", "walk"):
        raise ValueError(f"resolver must be auto, openat2 or walk, not {choice!r}")
    if choice == "walk":
        return _resolve.WalkResolver(fd)
    resolver = _resolve.Openat2Resolver(fd)
    try:
        os.close(resolver.open_dir(".")[0])  # needs openat2 and /proc/self/fd
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.fstat(fd).st_nlink == 0:
            # openat2 answered; the root is a removed directory (its calls fail
            # not_found either way), and a pool's workers must all resolve alike
            return resolver
        if choice == "openat2":
            raise CorralError("io_error", f"openat2 resolver unavailable: {exc.strerror}") from None
        return _resolve.WalkResolver(fd)
    return resolver


def target(
    resolver: _resolve.Resolver, path: str, *, follow: bool, make_parents: bool = False,
    guard: Guard = None, made: list[str] | None = None,
) -> _resolve.Target:
    """Resolve `path`. A missing parent directory is first guarded at the path
    the target would resolve to, then created (make_parents; their resolved paths
    go into `made`) or reported (not_found). Directories the path passes through
    by "." or "..", or that are missing or not directories on its way, go to the
    guard's `through` first."""
    if guard is not None:
        _spelled_through(path, guard)

    def missing(head: str, leaf: str) -> None:
        _missing_through(resolver, _resolve.join(head, leaf), guard)
        if not make_parents:
            guard_at(guard, _resolve.predict(resolver, head, leaf))
            raise FileNotFoundError(errno.ENOENT, "missing")
        created = _resolve.make_dirs(
            resolver, head, lambda deepest: guard_at(guard, _resolve.join(deepest, leaf))
        )
        if made is not None:
            made.extend(created)

    hook = missing if make_parents or guard is not None else None
    try:
        return _resolve.lookup(resolver, path, follow=follow, missing_parent=hook)
    except (FileNotFoundError, NotADirectoryError):
        _missing_through(resolver, path, guard)
        raise


def _spelled_through(path: str, guard: Guard) -> None:
    """guard.through for each directory the path as spelled steps into and back out
    of, or names with a "." (`.ssh/.`, `.ssh/x/..`): whether it exists or not, the
    answer is the policy's."""
    through = getattr(guard, "through", None)
    if through is None or ("/." not in path and not path.startswith(".")):
        return
    names: list[str] = []
    for name in path.split("/"):
        if name in (".", "..") and names:
            through("/".join(names))
            if name == "..":
                names.pop()
        elif name not in ("", ".", ".."):
            names.append(name)


def _missing_through(resolver: _resolve.Resolver, path: str, guard: Guard) -> None:
    """guard.through for each name of `path` below its deepest existing directory
    (a missing name, or one that is not a directory), as it would resolve."""
    through = getattr(guard, "through", None)
    if through is None:
        return
    parts = [part for part in path.split("/") if part not in ("", ".")]
    for depth in range(len(parts), -1, -1):
        try:
            fd, base = resolver.open_dir("/".join(parts[:depth]) or ".")
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return  # outside the roots, a loop: the caller's own error says so
        os.close(fd)
        break
    else:
        return
    names = [] if base == "." else base.split("/")
    on_the_way = []
    for name in parts[depth:]:
        if name == "..":
            if names:
                names.pop()
            continue
        names.append(name)
        on_the_way.append("/".join(names))
    for name in on_the_way:  # each decided with the path it leads to (the last)
        through(name, on_the_way[-1])
