"""Shared by the history tests: a snapshot of a tree (types, bytes, modes)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any


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
