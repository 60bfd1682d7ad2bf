"""Root: a directory handle beneath which every path is resolved (hazmat layer)."""

from corral.fs.root import Entry, FileInfo, Root, WriteOutcome
from corral.fs.roots import Roots
from corral.fs.version import content_version

__all__ = ["Entry", "FileInfo", "Root", "Roots", "WriteOutcome", "content_version"]
