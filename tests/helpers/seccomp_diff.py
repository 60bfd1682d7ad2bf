"""Test helper, not production: differential check of corral's BPF compiler
against libseccomp (through pyseccomp). The same profile is compiled by both;
neither program is loaded: both run in a classic-BPF interpreter on the same
seccomp_data inputs (random architectures, syscall numbers and arguments, plus
every number in the table and every value an argument check names), and their
verdicts must be identical, bit for bit.

libseccomp's rule semantics are order-free (the union of a syscall's rules), the
profile's first-match-wins: they agree on profiles where, per syscall, either one
unconditional rule or only conditional rules of one action appear. The shipped
profile is such a profile; `random_profile` draws only such profiles.

libseccomp 2.5 itself is not always right: a rule with SCMP_CMP_NE checks added
after a rule on the same argument can be lost from its tree (e.g. lseek allowed
if a1 == 4, then if a0 != X and a1 != 4: the second rule vanishes). So every
difference also carries the verdict of the profile's reference semantics, and
tests accept a difference only where corral has that verdict and libseccomp not.
"""

from __future__ import annotations

import errno
import os
import random
import select
import signal
import struct
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyseccomp as libseccomp

from corral.seccomp import bpf
from corral.seccomp.arches import ARCHES, X32_SYSCALL_BIT, load_arch
from corral.seccomp.profile import ArgCheck, Profile, Rule

AUDIT_ARCH_I386 = 0x4000_0003
AUDIT_ARCH_ARM = 0x4000_0028
_LIB_ARCH = {"x86_64": libseccomp.Arch.X86_64, "aarch64": libseccomp.Arch.AARCH64}
_LIB_OP = {"SCMP_CMP_EQ": libseccomp.EQ, "SCMP_CMP_NE": libseccomp.NE,
           "SCMP_CMP_MASKED_EQ": libseccomp.MASKED_EQ}
_U32 = 0xFFFF_FFFF
_U64 = (1 << 64) - 1
_INSN = struct.Struct("=HBBI")
_MEMWORDS = 16  # BPF_MEMWORDS


@dataclass(frozen=True)
class Input:
    """One struct seccomp_data (the instruction pointer plays no part)."""

    nr: int
    arch: int
    args: tuple[int, ...]

    def pack(self) -> bytes:
        return struct.pack("<IIQ6Q", self.nr & _U32, self.arch, 0, *self.args)


def run(program: list[bpf.Insn], data: bytes) -> int:
    """Classic BPF as the kernel's seccomp runs it (the opcodes it accepts): the
    return value. Anything the kernel would refuse to load fails the assertion."""
    acc = index = 0
    memory = [0] * _MEMWORDS
    pc = 0
    while True:
        assert 0 <= pc < len(program), "jumped out of the program"
        insn = program[pc]
        code, jt, jf, k = insn.code, insn.jt, insn.jf, insn.k
        pc += 1
        cls = code & 0x07
        if cls == 0x00:  # BPF_LD
            acc = _load(code, k, data, memory, index)
        elif cls == 0x01:  # BPF_LDX
            index = _load(code, k, data, memory, index)
        elif cls == 0x02:  # BPF_ST
            memory[k] = acc
        elif cls == 0x03:  # BPF_STX
            memory[k] = index
        elif cls == 0x04:  # BPF_ALU
            acc = _alu(code & 0xF0, acc, index if code & 0x08 else k)
        elif cls == 0x05:  # BPF_JMP
            pc += _jump(code, acc, index, jt, jf, k)
        elif cls == 0x06:  # BPF_RET
            return acc if code & 0x18 == 0x10 else k
        elif code == 0x07:  # BPF_MISC | BPF_TAX
            index = acc
        elif code == 0x87:  # BPF_MISC | BPF_TXA
            acc = index
        else:
            raise AssertionError(f"opcode {code:#x} is not classic BPF")


def _load(code: int, k: int, data: bytes, memory: list[int], index: int) -> int:
    mode, size = code & 0xE0, code & 0x18
    if mode == 0x00:  # BPF_IMM
        return k
    if mode == 0x60:  # BPF_MEM
        return memory[k]
    if mode == 0x80:  # BPF_LEN
        return len(data)
    # seccomp takes only aligned 32-bit absolute loads within seccomp_data
    assert mode == 0x20 and size == 0x00, f"load {code:#x} is refused by seccomp"
    assert k % 4 == 0 and k + 4 <= len(data), f"load at {k} is refused by seccomp"
    return int(struct.unpack_from("<I", data, k)[0])


def _alu(op: int, acc: int, operand: int) -> int:
    if op == 0x80:  # BPF_NEG
        return -acc & _U32
    if op in (0x30, 0x90):  # BPF_DIV, BPF_MOD
        assert operand, "division by zero"
    results = {
        0x00: acc + operand, 0x10: acc - operand, 0x20: acc * operand,
        0x30: acc // operand if operand else 0, 0x90: acc % operand if operand else 0,
        0x40: acc | operand, 0x50: acc & operand, 0x60: acc << (operand & 31),
        0x70: acc >> (operand & 31), 0xA0: acc ^ operand,
    }
    return results[op] & _U32


def _jump(code: int, acc: int, index: int, jt: int, jf: int, k: int) -> int:
    op = code & 0xF0
    if op == 0x00:  # BPF_JA
        return k
    operand = index if code & 0x08 else k
    taken = {0x10: acc == operand, 0x20: acc > operand, 0x30: acc >= operand,
             0x40: bool(acc & operand)}[op]
    return jt if taken else jf


def unpack(blob: bytes) -> list[bpf.Insn]:
    return [bpf.Insn(*_INSN.unpack_from(blob, at)) for at in range(0, len(blob), _INSN.size)]


def _action(action: str, err: int) -> int:
    if action == "SCMP_ACT_ALLOW":
        return int(libseccomp.ALLOW)
    if action == "SCMP_ACT_ERRNO":
        return int(libseccomp.ERRNO(err))
    return int(libseccomp.KILL_PROCESS)


def libseccomp_program(profile: Profile, arch_name: str) -> list[bpf.Insn]:
    """libseccomp's filter for `profile` on one architecture, exported, not loaded.
    Rules go in by name where libseccomp knows the name (so its tables check ours),
    by our number where it does not (calls newer than the installed libseccomp)."""
    default = _action(profile.default_action, profile.default_errno)
    lib_arch = _LIB_ARCH[arch_name]
    scmp = libseccomp.SyscallFilter(default)
    scmp.set_attr(libseccomp.Attr.ACT_BADARCH, libseccomp.KILL_PROCESS)
    if libseccomp.system_arch() != lib_arch:
        scmp.add_arch(lib_arch)
        scmp.remove_arch(libseccomp.Arch.NATIVE)
    table = load_arch(arch_name).syscalls
    for rule in profile.rules:
        action = _action(rule.action, rule.errno)
        if action == default:
            continue  # libseccomp refuses a rule that repeats the default (it is implied)
        checks = [
            libseccomp.Arg(c.index, _LIB_OP[c.op], c.value, c.value_two) for c in rule.args
        ]
        for name in dict.fromkeys(rule.names):
            if name not in table:
                continue
            known = libseccomp.resolve_syscall(lib_arch, name)
            if known >= 0:
                assert known == table[name], f"{arch_name} {name}: {table[name]} != {known}"
            scmp.add_rule_exactly(action, name if known >= 0 else table[name], *checks)
    with tempfile.TemporaryFile() as out:
        scmp.export_bpf(out)
        out.seek(0)
        return unpack(out.read())


class LibseccompHung(Exception):
    """libseccomp did not finish building a filter (its tree merge can loop)."""


def libseccomp_program_bounded(
    profile: Profile, arch_name: str, timeout: float = 10.0
) -> list[bpf.Insn]:
    """libseccomp_program in a forked child, killed after `timeout` seconds: some
    profiles with several SCMP_CMP_NE rules on one syscall make libseccomp 2.5 spin."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            blob = b"".join(_INSN.pack(*i) for i in libseccomp_program(profile, arch_name))
            with os.fdopen(write_end, "wb") as out:
                out.write(blob)
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + timeout
    with os.fdopen(read_end, "rb", buffering=0) as source:
        while (left := deadline - time.monotonic()) > 0 and select.select(
            [source], [], [], left
        )[0]:
            chunk = source.read(65536)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise LibseccompHung(f"libseccomp took over {timeout:g} s")
    os.waitpid(pid, 0)
    assert chunks, "libseccomp produced no filter"
    return unpack(b"".join(chunks))


def inputs(profile: Profile, arch_name: str, rng: random.Random, count: int) -> Iterator[Input]:
    """Every number in the table with interesting arguments, then `count` random inputs."""
    arch = load_arch(arch_name)
    values = _interesting_values(profile)
    numbers = sorted(arch.syscalls.values())
    for nr in [*numbers, *range(max(numbers) + 1, max(numbers) + 64)]:
        yield Input(nr, arch.audit_arch, _args(rng, values))
    foreign = [AUDIT_ARCH_I386, AUDIT_ARCH_ARM, *(load_arch(a).audit_arch for a in ARCHES)]
    for _ in range(count):
        nr = rng.choice([
            rng.choice(numbers), rng.choice(numbers), rng.choice(numbers),
            rng.choice(numbers) | X32_SYSCALL_BIT, rng.getrandbits(32), rng.randrange(1024),
            _U32, X32_SYSCALL_BIT, X32_SYSCALL_BIT - 1,
        ])
        audit = arch.audit_arch if rng.random() < 0.9 else rng.choice(
            [*foreign, rng.getrandbits(32)])
        yield Input(nr, audit, _args(rng, values))


def _interesting_values(profile: Profile) -> list[int]:
    """Every value a check names, its neighbours and its halves, and extremes."""
    values = {0, 1, _U32, _U32 + 1, _U64, 1 << 63}
    for rule in profile.rules:
        for check in rule.args:
            for v in (check.value, check.value_two, check.value & check.value_two):
                values.update({v, (v + 1) & _U64, (v - 1) & _U64, v ^ (1 << 32), v & _U32,
                               v | (_U32 << 32), ~v & _U64})
    return sorted(values)


def _args(rng: random.Random, values: list[int]) -> tuple[int, ...]:
    return tuple(
        rng.choice(values) if rng.random() < 0.7 else rng.getrandbits(rng.choice([8, 32, 64]))
        for _ in range(6)
    )


def random_profile(rng: random.Random, arch_name: str, size: int = 40) -> Profile:
    """A profile of the order-free kind (see the module doc), over `size` syscalls."""
    names = sorted(load_arch(arch_name).syscalls)
    actions = [("SCMP_ACT_ALLOW", errno.EPERM), ("SCMP_ACT_ERRNO", errno.EACCES),
               ("SCMP_ACT_ERRNO", errno.ENOSYS), ("SCMP_ACT_KILL_PROCESS", errno.EPERM)]
    rules: list[Rule] = []
    for name in rng.sample(names, size):
        action = rng.choice(actions)
        if rng.random() < 0.4:
            rules.append(Rule((name,), *action))
            continue
        for _ in range(rng.randint(1, 4)):
            checks = tuple(
                _random_check(rng, index) for index in rng.sample(range(6), rng.randint(1, 3))
            )
            rules.append(Rule((name,), *action, checks))
    default = rng.choice([("SCMP_ACT_ERRNO", errno.EPERM), ("SCMP_ACT_KILL_PROCESS", 1)])
    return Profile(*default, ARCHES, tuple(rules))


def _random_check(rng: random.Random, index: int) -> ArgCheck:
    op = rng.choice(sorted(_LIB_OP))
    value = rng.choice([0, 1, 4, 0x5401, _U32, 1 << 32, _U64, rng.getrandbits(64),
                        rng.getrandbits(32), rng.getrandbits(32) << 32])
    # bits of valueTwo outside the mask are refused by the profile (see profile.py)
    two = rng.choice([0, value, rng.getrandbits(64)]) & value
    return ArgCheck(index, op, value, two if op == "SCMP_CMP_MASKED_EQ" else 0)


def placeable(profile: Profile, arch_name: str) -> Profile:
    """`profile` without the names libseccomp cannot place in a filter for `arch_name`:
    a number it does not know works only for the machine's own architecture (it
    translates numbers from there), so on another one such names are left out."""
    lib_arch = _LIB_ARCH[arch_name]
    if libseccomp.system_arch() == lib_arch:
        return profile
    rules = []
    for rule in profile.rules:
        names = tuple(n for n in rule.names if libseccomp.resolve_syscall(lib_arch, n) >= 0)
        if names:
            rules.append(Rule(names, rule.action, rule.errno, rule.args))
    return Profile(profile.default_action, profile.default_errno, profile.architectures,
                   tuple(rules))


@dataclass(frozen=True)
class Difference:
    sample: Input
    ours: int
    libseccomp: int
    reference: int  # what the profile's documented semantics say

    @property
    def corral_wrong(self) -> bool:
        return self.ours != self.reference


def reference(profile: Profile, arch_name: str, sample: Input) -> int:
    """The verdict by the profile's reference semantics (profile.ArgCheck.matches,
    first match wins), independent of either compiler."""
    arch = load_arch(arch_name)
    default = bpf.ret_value(profile.default_action, profile.default_errno)
    if sample.arch != arch.audit_arch:
        return bpf.RET_BAD_ARCH
    if arch.has_x32 and sample.nr >= X32_SYSCALL_BIT:
        return default if sample.nr == _U32 else bpf.RET_BAD_ARCH
    names = [name for name, nr in arch.syscalls.items() if nr == sample.nr]
    for rule in profile.rules_for(names[0]) if names else []:
        if all(check.matches(sample.args) for check in rule.args):
            return bpf.ret_value(rule.action, rule.errno)
    return default


def differences(
    profile: Profile, arch_name: str, rng: random.Random, count: int
) -> tuple[int, list[Difference]]:
    """(inputs tried, the inputs where corral's and libseccomp's verdicts differ)."""
    profile = placeable(profile, arch_name)
    ours = bpf.compile_filter(profile, arch_name)
    theirs = libseccomp_program_bounded(profile, arch_name)
    tried, differ = 0, []
    for sample in inputs(profile, arch_name, rng, count):
        data = sample.pack()
        mine, lib = run(ours, data), run(theirs, data)
        tried += 1
        if mine != lib:
            differ.append(Difference(sample, mine, lib, reference(profile, arch_name, sample)))
    return tried, differ
