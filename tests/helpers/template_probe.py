"""Test helper, not production: a zygote entry for the template (launcher.launch_zygote)
that, instead of serving, reports what it inherited from the template's prepare():
the seccomp programs, and whether they (and the built-in rules' regexes) were
compiled before it was forked."""

from __future__ import annotations

from corral.policy import _builtin_matcher
from corral.sandbox import zygote
from corral.sandbox.protocol import write_frame
from corral.seccomp import _worker_program

prepare = zygote.prepare


def main(fd: int) -> None:
    cached = _worker_program.cache_info().currsize  # before this zygote asks for any
    builtins = _builtin_matcher.cache_info().currsize
    programs = {str(writable): _worker_program(writable).hex() for writable in (True, False)}
    write_frame(fd, {"cached": cached, "builtins": builtins, "programs": programs}, 1 << 20)
