"""corral's BPF compiler against libseccomp: the shipped profile and random
profiles, compiled by both, run in one classic-BPF interpreter on the same
inputs (random architectures, syscall numbers and 64-bit arguments): identical
verdicts. scripts/diff_seccomp.py runs the long version."""

from __future__ import annotations

import random

import pytest

from corral.seccomp import MODE_CHANGES, bpf
from corral.seccomp.arches import ARCHES, X32_SYSCALL_BIT, load_arch
from corral.seccomp.profile import ProfileError, load_profile, parse_profile, refusing
from tests.helpers import seccomp_diff


@pytest.mark.parametrize("arch", ARCHES)
def test_shipped_profile_agrees_with_libseccomp(arch: str) -> None:
    profile = load_profile()
    tried, differ = seccomp_diff.differences(profile, arch, random.Random(arch), 4000)
    assert tried > 4000
    assert differ == []
    # the verdicts reached include every kind, so this is not agreement on one answer
    program = bpf.compile_filter(profile, arch)
    kinds = {
        seccomp_diff.run(program, sample.pack()) & 0xFFFF_0000
        for sample in seccomp_diff.inputs(profile, arch, random.Random(arch), 500)
    }
    assert kinds == {bpf.RET_ALLOW, bpf.RET_ERRNO, bpf.RET_KILL_PROCESS}


@pytest.mark.parametrize("arch", ARCHES)
def test_the_profile_with_no_writable_root_agrees_with_libseccomp(arch: str) -> None:
    profile = refusing(load_profile(), MODE_CHANGES)
    tried, differ = seccomp_diff.differences(profile, arch, random.Random(arch), 2000)
    assert tried > 2000
    assert differ == []
    # and it refuses what the shipped profile allowed: fchmod without set-id bits
    table = load_arch(arch)
    for rules, verdict in ((load_profile(), bpf.RET_ALLOW), (profile, bpf.RET_ERRNO)):
        program = bpf.compile_filter(rules, arch)
        sample = seccomp_diff.Input(table.syscalls["fchmod"], table.audit_arch,
                                    (3, 0o644, 0, 0, 0, 0))
        assert seccomp_diff.run(program, sample.pack()) & 0xFFFF_0000 == verdict


@pytest.mark.parametrize("seed", range(6))
def test_random_profiles_agree_with_libseccomp(seed: int) -> None:
    rng = random.Random(seed)
    arch = ARCHES[seed % len(ARCHES)]
    profile = seccomp_diff.random_profile(rng, arch)
    _, differ = seccomp_diff.differences(profile, arch, rng, 1500)
    # where they differ, libseccomp lost a rule (see seccomp_diff); corral must not
    assert [d for d in differ if d.corral_wrong] == []


def test_x32_numbers_are_killed_like_libseccomp() -> None:
    """The difference the comparison first found: x32 numbers were EPERM, libseccomp
    kills them as a foreign ABI; -1 (a tracer's skipped call) gets the default."""
    arch = load_arch("x86_64")
    program = bpf.compile_filter(load_profile(), "x86_64")
    for nr in (X32_SYSCALL_BIT | arch.syscalls["read"], X32_SYSCALL_BIT, 0x8000_0000):
        data = seccomp_diff.Input(nr, arch.audit_arch, (0,) * 6).pack()
        assert seccomp_diff.run(program, data) == bpf.RET_KILL_PROCESS
    data = seccomp_diff.Input(0xFFFF_FFFF, arch.audit_arch, (0,) * 6).pack()
    assert seccomp_diff.run(program, data) == bpf.RET_ERRNO | 1


def test_masked_eq_with_bits_outside_the_mask_is_refused() -> None:
    """The other difference found: (arg & 4) == 5 never holds as documented, but
    libseccomp masks 5 to 4 and lets it hold. The profile refuses the ambiguity."""
    check = {"index": 2, "op": "SCMP_CMP_MASKED_EQ", "value": 4, "valueTwo": 5}
    data = {
        "defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["mmap"], "action": "SCMP_ACT_ALLOW", "args": [check]}],
    }
    with pytest.raises(ProfileError, match="valueTwo has bits outside the mask"):
        parse_profile(data)
    check["valueTwo"] = 4
    parse_profile(data)
