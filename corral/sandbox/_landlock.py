"""Landlock plumbing: one ruleset handling every filesystem right the kernel's ABI
knows (the `landlock` package's flags, rule struct and add_rule), TCP bind and
connect (ABI 4+) and cross-domain abstract sockets and signals (ABI 6+).

Why not the package's Ruleset: it handles filesystem rights only, and a second,
stacked ruleset for network and scope would deny REFER (renames between
directories) everywhere, since every layer denies REFER unless a rule grants it.
The package reads ctypes' saved errno after each call and takes any non-zero
value for a failure, so every call into it starts from errno 0.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

import landlock
from landlock import plumbing
from landlock.plumbing import FSAccess, PathBeneathAttr

from corral._syscall import syscall

NET_ABI = 4  # first ABI with handled_access_net
SCOPE_ABI = 6  # first ABI with scoped
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1
RULE_PATH_BENEATH = 1

READ = FSAccess.READ_FILE | FSAccess.READ_DIR
# What corral.fs does in a rw root: read, write in place (append), atomic temp +
# rename (REFER moves between directories), mkdir, unlink, rmdir, truncate.
# Never: execute, symlinks, device nodes, FIFOs, sockets, device ioctls.
READ_WRITE = (
    READ | FSAccess.WRITE_FILE | FSAccess.TRUNCATE | FSAccess.MAKE_REG | FSAccess.MAKE_DIR
    | FSAccess.REMOVE_FILE | FSAccess.REMOVE_DIR | FSAccess.REFER
)
# A history work directory: what a rw root gets (never symlinks: a deleted one's
# target is kept in its record, not the link itself).
STORE = READ_WRITE
ERRORS = (OSError, landlock.LandlockError)  # what a failed restriction raises


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


def abi_version() -> int:
    """The kernel's Landlock ABI; 0 where Landlock is missing or disabled."""
    ctypes.set_errno(0)
    try:
        return int(plumbing.landlock_abi_version())
    except ERRORS:
        return 0


def handled_fs() -> FSAccess:
    """Every filesystem right this kernel's ABI knows: whatever a rule omits is denied."""
    ctypes.set_errno(0)
    return FSAccess.all()


def restrict(rules: Iterable[tuple[str, FSAccess]], abi: int) -> None:
    """Enter a new domain where only `rules` ((path, rights) beneath each path) hold."""
    # Older kernels' structs end before `scoped` (or `handled_access_net`); they take
    # the larger size as long as the fields they lack are zero.
    attr = _RulesetAttr(
        handled_fs(),
        NET_BIND_TCP | NET_CONNECT_TCP if abi >= NET_ABI else 0,
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= SCOPE_ABI else 0,
    )
    ruleset = syscall(plumbing.SYSCALL_CREATE_RULESET, ctypes.byref(attr),
                      ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    try:
        for path, rights in rules:
            _allow(ruleset, path, rights)
        syscall(plumbing.SYSCALL_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, rights: FSAccess) -> None:
    target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        attr = PathBeneathAttr(rights, target)
        ctypes.set_errno(0)
        plumbing.get_add_rule()(ruleset, RULE_PATH_BENEATH, ctypes.byref(attr), 0)
    finally:
        os.close(target)
