"""The worker's syscall profile (data: worker.json, OCI/Docker seccomp format) and
the compiler that turns it into a classic BPF filter for the running architecture.

Hazmat: `install()` is irreversible for the calling process and its future
children. Unknown syscalls fail with the profile's errno (EPERM); calls from a
foreign ABI (x86 int 0x80, arm32 compat) kill the process.
"""

from __future__ import annotations

import functools

from corral._prctl import set_no_new_privs
from corral.seccomp import _kernel
from corral.seccomp.arches import native_arch
from corral.seccomp.bpf import compile_filter, pack
from corral.seccomp.profile import Profile, ProfileError, load_profile, refusing

__all__ = [
    "MODE_CHANGES", "Profile", "ProfileError", "SeccompError", "compile_native", "install",
    "load_profile", "supported",
]

# Every call that changes a file's mode or owner. Landlock governs none of them, so
# the worker profile allows only fchmod (an atomic write keeps the old mode); a
# worker with no writable root has no use for even that, and gets none.
MODE_CHANGES = (
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
)


class SeccompError(RuntimeError):
    """The filter could not be installed."""


def supported() -> bool:
    """True if this machine has a syscall table and its kernel takes seccomp filters."""
    arch = native_arch()
    return arch is not None and _kernel.filters_available(arch)


def compile_native(profile: Profile | None = None, *, writable: bool = True) -> bytes:
    """The packed filter for this machine; `profile` defaults to the worker profile
    (without `writable`: refusing MODE_CHANGES), compiled once per process (a zygote
    that calls this first spares every forked worker the work). Reads files: do it
    before Landlock closes them off."""
    if profile is None:
        return _worker_program(writable)
    arch = native_arch()
    if arch is None:
        raise SeccompError("no syscall table for this machine's architecture")
    return pack(compile_filter(profile, arch))


@functools.cache
def _worker_program(writable: bool) -> bytes:
    profile = load_profile()
    return compile_native(profile if writable else refusing(profile, MODE_CHANGES))


def install(program: bytes | None = None) -> None:
    """Sets no_new_privs (the kernel requires it of unprivileged callers) and loads
    `program` (compile_native()'s output; the worker profile's by default) on every
    thread."""
    arch = native_arch()
    if arch is None:
        raise SeccompError("no syscall table for this machine's architecture")
    if program is None:
        program = compile_native()
    try:
        set_no_new_privs()
        _kernel.load_filter(arch, program)
    except OSError as exc:
        raise SeccompError(f"loading the seccomp filter failed: {exc.strerror}") from exc
