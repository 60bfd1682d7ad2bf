"""Capability sets of this process: capget/capset (ctypes, version 3 structs, two
32-bit words per set). Private plumbing for confine.py and the tests; the
bounding and ambient sets go through _prctl."""

from __future__ import annotations

import ctypes
from typing import NamedTuple

from corral._syscall import LIBC, call

_LINUX_CAPABILITY_VERSION_3 = 0x2008_0522
_WORDS = 2  # version 3: capabilities 0..63

CAP_CHOWN = 0
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
CAP_FOWNER = 3
CAP_FSETID = 4
CAP_SETPCAP = 8
CAP_SYS_ADMIN = 21


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class CapSets(NamedTuple):
    """Bit masks: bit n is capability n."""

    effective: int
    permitted: int
    inheritable: int


def current() -> CapSets:
    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * _WORDS)()
    call(LIBC.capget, ctypes.byref(header), data)
    return CapSets(*(
        sum(getattr(data[word], name) << (32 * word) for word in range(_WORDS))
        for name in CapSets._fields
    ))


def apply(sets: CapSets) -> None:
    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * _WORDS)()
    for word in range(_WORDS):
        for name, mask in zip(CapSets._fields, sets, strict=True):
            setattr(data[word], name, (mask >> (32 * word)) & 0xFFFF_FFFF)
    call(LIBC.capset, ctypes.byref(header), data)
