"""Root: a directory handle beneath which every path is resolved (hazmat layer)."""

from corral.fs._atomic import Expect, temp_owner
from corral.fs._errors import READ_ONLY_FS, CrossFilesystem
from corral.fs.root import NO_KEEP, Entry, FileInfo, Keep, MoveGuard, Root, WriteOutcome
from corral.fs.roots import Roots
from corral.fs.syscalls import TEMP_PREFIX
from corral.fs.version import content_version

__all__ = [
    "NO_KEEP",
    "READ_ONLY_FS",
    "TEMP_PREFIX",
    "CrossFilesystem",
    "Entry",
    "Expect",
    "FileInfo",
    "Keep",
    "MoveGuard",
    "Root",
    "Roots",
    "WriteOutcome",
    "content_version",
    "temp_owner",
]
