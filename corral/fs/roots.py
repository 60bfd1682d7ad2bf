"""Pure lexical mapping of a caller's path to (Root, path-relative-to-that-root);
resolution then happens beneath it."""

from __future__ import annotations

import posixpath

from corral.errors import CorralError, shown_path
from corral.fs._errors import check_path
from corral.fs.root import Root


def _parts(path: str) -> list[str]:
    """Components without "" and "." (so `//` and `/./` do not matter); ".." kept."""
    return [p for p in path.split("/") if p not in ("", ".")]


class Roots:
    def __init__(self, workspace: Root, others: list[Root] | None = None) -> None:
        self.workspace = workspace
        self.others = others or []

    def locate(self, path: str) -> tuple[Root, str]:
        """Relative -> workspace. Absolute -> the root it lies under by whole path
        components (/w/proj never matches /w/proj_backup), deepest first; else
        outside_workspace. NUL, "" and len > PATH_MAX (4096) -> invalid_arguments.
        The returned rel may still hold ".." (resolution beneath the root refuses
        escapes)."""
        check_path("use", path, absolute=True)
        if not path.startswith("/"):
            return self.workspace, path
        parts = _parts(path)
        candidates = []
        for root in self.all():
            for name in (root.path, root.given_path):
                prefix = _parts(name)
                if parts[: len(prefix)] == prefix:
                    candidates.append((len(prefix), root, parts[len(prefix):]))
        if not candidates:
            raise CorralError(
                "outside_workspace", f"{shown_path(path)} is outside the workspace roots."
            )
        _, root, rest = max(candidates, key=lambda c: c[0])
        return root, "/".join(rest) or "."

    def all(self) -> list[Root]:
        return [self.workspace, *self.others]

    def narrow(self, within: list[object]) -> dict[str, list[str]]:
        """Each root's directories that also lie in one of `within` (absolute paths,
        compared component by component against the root's real and given path): a
        directory inside the root narrows it to that directory, one that holds the
        root leaves it whole, one elsewhere adds nothing. Never wider than the roots."""
        narrowed: dict[str, list[str]] = {}
        for root in self.all():
            inside: list[str] = []
            for path in within:
                if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
                    continue
                parts = _parts(posixpath.normpath(path))
                for name in (root.path, root.given_path):
                    prefix = _parts(name)
                    if parts[: len(prefix)] == prefix:
                        inside.append("/".join(parts[len(prefix):]) or ".")
                    elif prefix[: len(parts)] == parts:
                        inside.append(".")
            narrowed[root.path] = sorted(set(inside))
        return narrowed
