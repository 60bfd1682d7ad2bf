"""The `corral` command's entry point, at the path the design names: the console
script is `corral.cli:main`. The code is corral/faces/cli.py, with the other faces."""

from __future__ import annotations

import gc
import os
import sys

import corral

__all__ = ["main"]

# The commands that open a sandbox: the zygote template starts before anything else,
# so that its imports run beside the command's own on another core.
SANDBOX_COMMANDS = ("call", "tools", "serve")


def main(argv: list[str] | None = None) -> int:
    program = argv is None  # the program itself (a caller passes argv)
    if program:
        # No garbage collection while corral loads: imports allocate much and free
        # little, and its passes cost ~10% of their CPU for nothing.
        gc.disable()
        _open_standard_fds()
        if sys.argv[1:2] and sys.argv[1] in SANDBOX_COMMANDS and not (
                {"-h", "--help"} & set(sys.argv[2:])):  # help starts no sandbox
            corral.prestart()
    from corral.faces.cli import leave
    from corral.faces.cli import main as run  # after prestart(): it imports most of corral

    if program:
        gc.enable()
    code = run(argv)
    if program:  # a server too: its sandbox is closed, a reader may still block on input
        leave(code)
    return code


def _open_standard_fds() -> None:
    """/dev/null on whichever of fds 0-2 the program was started without (`2>&-`):
    else the first fd it opens lands there (the zygote template's channel on 2, which
    a server then copies onto 1). sys.stdin/stdout/stderr stay None: the command says
    so (faces/cli.closed_streams)."""
    for fd in range(3):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free fd: this one

