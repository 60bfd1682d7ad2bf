"""INTERFACE STUB — the fs helper implements. Pure lexical mapping of a caller's
path to (Root, path-relative-to-that-root); resolution then happens beneath it."""

from __future__ import annotations

from corral.fs.root import Root


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
        raise NotImplementedError

    def all(self) -> list[Root]:
        return [self.workspace, *self.others]
