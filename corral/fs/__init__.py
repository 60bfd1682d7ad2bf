"""Root: a directory handle beneath which every path is resolved (hazmat layer)."""

from corral.fs._atomic import TEMP_PREFIX, temp_owner
from corral.fs._errors import CrossFilesystem
from corral.fs.root import Entry, FileInfo, Root, WriteOutcome
from corral.fs.roots import Roots
from corral.fs.version import content_version

__all__ = [
    "TEMP_PREFIX",
    "CrossFilesystem",
    "Entry",
    "FileInfo",
    "Root",
    "Roots",
    "WriteOutcome",
    "content_version",
    "temp_owner",
]
