"""Syscall name -> number tables, one JSON file per architecture (data, not code)."""

from __future__ import annotations

import functools
import json
import os
from typing import NamedTuple

# os.uname().machine spellings -> our table names (not `platform`, nor importlib.resources
# for the tables: each costs the zygote milliseconds of imports at every start)
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
ARCHES = ("x86_64", "aarch64")
# On x86_64 the x32 ABI reuses the same entry point with this bit set in the number;
# its calls are not covered by the x86_64 table, so they are refused.
X32_SYSCALL_BIT = 0x4000_0000
HERE = os.path.dirname(os.path.abspath(__file__))  # the tables ship beside this module


class Arch(NamedTuple):
    name: str  # "x86_64" | "aarch64"
    scmp_name: str  # the OCI profile's spelling, "SCMP_ARCH_X86_64"
    audit_arch: int  # seccomp_data.arch for native calls on this architecture
    syscalls: dict[str, int]
    has_x32: bool


@functools.cache
def load_arch(name: str) -> Arch:
    """The table for `name` (one of ARCHES); KeyError for any other."""
    if name not in ARCHES:
        raise KeyError(f"no syscall table for architecture {name!r}")
    with open(os.path.join(HERE, f"syscalls_{name}.json"), encoding="utf-8") as table:
        data = json.load(table)
    return Arch(
        name=name,
        scmp_name=data["arch"],
        audit_arch=data["audit_arch"],
        syscalls=dict(data["syscalls"]),
        has_x32=name == "x86_64",
    )


def native_arch() -> str | None:
    """Our table name for the running machine, or None if we have no table for it."""
    return _MACHINES.get(os.uname().machine.lower())
