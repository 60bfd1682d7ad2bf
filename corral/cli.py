"""The `corral` command's entry point, at the path the design names: the console
script is `corral.cli:main`. The code is corral/faces/cli.py, with the other faces."""

from __future__ import annotations

from typing import Any

from corral.faces import cli as _face
from corral.faces.cli import main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    # Every other name the module had before it moved (build_parser, the exit codes, ...).
    return getattr(_face, name)
