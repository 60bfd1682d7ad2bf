"""The profile as data: the shipped worker profile's shape, the syscall tables,
and a clear ProfileError for anything the compiler could not enforce as written."""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import json
from importlib import resources

import pytest

from corral.seccomp.arches import ARCHES, load_arch
from corral.seccomp.profile import ProfileError, load_profile, parse_profile

MINIMAL = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "architectures": ["SCMP_ARCH_X86_64"],
    "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}],
}


def _with(**changes: object) -> dict:
    data = copy.deepcopy(MINIMAL)
    data.update(changes)
    return data


def test_worker_profile_is_oci_shaped_json() -> None:
    text = resources.files("corral.seccomp").joinpath("worker.json").read_text()
    data = json.loads(text)
    assert data["defaultAction"] == "SCMP_ACT_ERRNO"
    assert data["defaultErrnoRet"] == 1  # EPERM
    assert set(data["architectures"]) == {"SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"}
    for entry in data["syscalls"]:
        assert set(entry) <= {"names", "action", "args", "errnoRet", "comment"}
        assert entry["comment"], "every entry says why it is there"


def test_no_name_is_both_allowed_and_listed_as_denied() -> None:
    profile = load_profile()
    allowed = {n for r in profile.rules if r.action == "SCMP_ACT_ALLOW" for n in r.names}
    denied = {n for r in profile.rules if r.action != "SCMP_ACT_ALLOW" for n in r.names}
    assert not allowed & denied - {"clone3"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"defaultAction": "SCMP_ACT_LOG"}, "defaultAction"),
        ({"defaultErrnoRet": 0}, "defaultErrnoRet"),
        ({"architectures": ["SCMP_ARCH_PPC64LE"]}, "unsupported architectures"),
        ({"architectures": []}, "architectures"),
        ({"syscalls": {"read": 1}}, "syscalls must be a list"),
        ({"syscalls": [{"names": ["raed"], "action": "SCMP_ACT_ALLOW"}]}, "unknown syscall names"),
        ({"syscalls": [{"names": [], "action": "SCMP_ACT_ALLOW"}]}, "names"),
        ({"syscalls": [{"names": ["read"], "action": "SCMP_ACT_TRACE"}]}, "action"),
        ({"syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
                        "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}]}, "index"),
        ({"syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
                        "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_GT"}]}]}, "op"),
        ({"syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
                        "args": [{"index": 0, "value": -1, "op": "SCMP_CMP_EQ"}]}]}, "value"),
        ({"syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
                        "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"},
                                 {"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]}]},
         "checks one argument twice"),
        ({"syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                       {"names": ["read"], "action": "SCMP_ACT_ERRNO"}]}, "unconditional"),
        ({"syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": 70000}]},
         "errnoRet"),
    ],
)
def test_profile_errors_are_clear(changes: dict, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile(_with(**changes))


def test_invalid_json_is_a_profile_error(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(path)


def test_minimal_profile_parses() -> None:
    profile = parse_profile(MINIMAL)
    assert profile.architectures == ("x86_64",)
    assert profile.rules_for("read")[0].action == "SCMP_ACT_ALLOW"


@pytest.mark.parametrize(
    ("arch", "name", "nr"),
    [
        ("x86_64", "read", 0), ("x86_64", "execve", 59), ("x86_64", "seccomp", 317),
        ("x86_64", "openat2", 437), ("x86_64", "fchmodat2", 452), ("x86_64", "mseal", 462),
        ("aarch64", "read", 63), ("aarch64", "execve", 221), ("aarch64", "seccomp", 277),
        ("aarch64", "openat2", 437), ("aarch64", "clone", 220), ("aarch64", "file_setattr", 469),
    ],
)
def test_tables_hold_known_numbers(arch: str, name: str, nr: int) -> None:
    assert load_arch(arch).syscalls[name] == nr


@pytest.mark.parametrize("arch", ARCHES)
def test_tables_have_one_name_per_number(arch: str) -> None:
    numbers = list(load_arch(arch).syscalls.values())
    assert len(numbers) == len(set(numbers))


@pytest.mark.parametrize("arch", ARCHES)
def test_tables_match_libseccomp_where_it_knows_the_call(arch: str) -> None:
    found = ctypes.util.find_library("seccomp")
    if found is None:
        pytest.skip("libseccomp is not installed")
    lib = ctypes.CDLL(found)
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    token = lib.seccomp_arch_resolve_name(arch.encode())
    checked = 0
    for name, nr in load_arch(arch).syscalls.items():
        theirs = lib.seccomp_syscall_resolve_name_arch(token, name.encode())
        if theirs >= 0:
            assert theirs == nr, name
            checked += 1
    assert checked > 300
