"""Profile -> classic BPF seccomp filter for one architecture. Pure; no kernel.

Layout: check seccomp_data.arch (a foreign ABI is killed: its numbers mean other
calls), kill x32 numbers on x86_64 (a foreign ABI as well), then a binary search
over ranges of syscall numbers that share an action. A range ends in a return, or
jumps to the syscall's argument checks. The search's far targets are reached with
`ja`, whose offset is 32 bits. Conditional jumps (8-bit offsets) stay short:
in the prologue (the x32 check skips 3), in the search (each skips the one `ja`
after it) and within one syscall's argument checks, to its next rule a few
instructions on (the shipped worker filter's skip 1, 3, 5 or 7;
tests/test_seccomp_bpf.py checks the bound). The assembler refuses any offset that
does not fit rather than emit a wrong jump.

tests/test_seccomp_libseccomp.py (and scripts/diff_seccomp.py, longer) check that
this compiler and libseccomp give identical verdicts on the same inputs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from itertools import count
from typing import NamedTuple

from corral.seccomp.arches import X32_SYSCALL_BIT, load_arch
from corral.seccomp.profile import ArgCheck, Profile, ProfileError, Rule

# classic BPF opcodes (linux/bpf_common.h)
LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
ALU_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
JA = 0x05  # BPF_JMP | BPF_JA
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K

# struct seccomp_data offsets; arguments are 64-bit little-endian words
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARGS = 16

RET_KILL_PROCESS = 0x8000_0000
RET_ERRNO = 0x0005_0000
RET_ALLOW = 0x7FFF_0000
# A call from a foreign ABI (int 0x80, arm32 compat) cannot be judged by this
# architecture's numbers: nothing legitimate in a worker makes one, so kill.
RET_BAD_ARCH = RET_KILL_PROCESS

MAX_INSNS = 4096  # BPF_MAXINSNS: the kernel refuses longer filters
_MAX_COND_JUMP = 255  # jt/jf are 8 bits
_LOW32 = 0xFFFF_FFFF
_NR_LIMIT = 1 << 32  # seccomp_data.nr is read as an unsigned 32-bit word


class Insn(NamedTuple):
    code: int
    jt: int
    jf: int
    k: int


def ret_value(action: str, err: int) -> int:
    if action == "SCMP_ACT_ALLOW":
        return RET_ALLOW
    if action == "SCMP_ACT_ERRNO":
        return RET_ERRNO | err
    return RET_KILL_PROCESS


def compile_filter(profile: Profile, arch_name: str) -> list[Insn]:
    """The filter enforcing `profile` for calls made in `arch_name`'s native ABI."""
    if arch_name not in profile.architectures:
        raise ProfileError(f"the profile does not cover architecture {arch_name!r}")
    arch = load_arch(arch_name)
    default = ret_value(profile.default_action, profile.default_errno)
    asm = _Assembler()
    asm.load(OFFSET_ARCH)
    asm.jump(JEQ_K, arch.audit_arch, jt=1, jf=0)
    asm.ret(RET_BAD_ARCH)
    asm.load(OFFSET_NR)
    if arch.has_x32:
        # x32 numbers (and anything above them) are a foreign ABI too, as libseccomp
        # treats them; -1, which a tracer writes to skip a call, gets the default
        asm.jump(JGE_K, X32_SYSCALL_BIT, jt=0, jf=3)
        asm.jump(JEQ_K, _LOW32, jt=0, jf=1)
        asm.ret(default)
        asm.ret(RET_BAD_ARCH)
    blocks: dict[str, list[Rule]] = {}
    targets: dict[int, int | str] = {}
    for name, nr in arch.syscalls.items():
        rules = profile.rules_for(name)
        if not rules:
            continue
        if len(rules) == 1 and not rules[0].args:
            targets[nr] = ret_value(rules[0].action, rules[0].errno)
        else:
            blocks[name] = rules
            targets[nr] = name
    _search(asm, _ranges(targets, default))
    for name, rules in blocks.items():
        asm.label(name)
        _rules_block(asm, rules, default)
    program = asm.assemble()
    if len(program) > MAX_INSNS:
        raise ProfileError(f"filter has {len(program)} instructions; the kernel takes {MAX_INSNS}")
    return program


def pack(program: list[Insn]) -> bytes:
    """struct sock_filter[] in the machine's byte order."""
    return b"".join(struct.pack("=HBBI", i.code, i.jt, i.jf, i.k) for i in program)


def _ranges(targets: dict[int, int | str], default: int) -> list[tuple[int, int | str]]:
    """(first number, target) for consecutive runs covering 0..2**32-1."""
    ranges: list[tuple[int, int | str]] = []
    expected = 0
    for nr in sorted(targets):
        target = targets[nr]
        if nr != expected and (not ranges or ranges[-1][1] != default):
            ranges.append((expected, default))
        if not ranges or ranges[-1][1] != target or isinstance(target, str):
            ranges.append((nr, target))
        expected = nr + 1
    if expected < _NR_LIMIT and (not ranges or ranges[-1][1] != default):
        ranges.append((expected, default))
    return ranges


def _search(asm: _Assembler, ranges: list[tuple[int, int | str]]) -> None:
    """Binary search: `jge start` picks the upper half through a 32-bit `ja`."""
    if len(ranges) == 1:
        target = ranges[0][1]
        if isinstance(target, str):
            asm.goto(target)
        else:
            asm.ret(target)
        return
    mid = len(ranges) // 2
    upper = asm.new_label()
    asm.jump(JGE_K, ranges[mid][0], jt=0, jf=1)
    asm.goto(upper)
    _search(asm, ranges[:mid])
    asm.label(upper)
    _search(asm, ranges[mid:])


def _rules_block(asm: _Assembler, rules: list[Rule], default: int) -> None:
    """First rule whose checks all hold decides; none -> the default action."""
    for rule in rules:
        next_rule = asm.new_label()
        for check in rule.args:
            _check(asm, check, fail=next_rule)
        asm.ret(ret_value(rule.action, rule.errno))
        asm.label(next_rule)
    asm.ret(default)


def _check(asm: _Assembler, check: ArgCheck, *, fail: str) -> None:
    """Fall through when the 64-bit argument passes the check, else jump to `fail`."""
    low_at = OFFSET_ARGS + 8 * check.index
    high_at = low_at + 4
    if check.op == "SCMP_CMP_NE":
        passed = asm.new_label()
        asm.load(high_at)
        asm.jump(JEQ_K, check.value >> 32, jt=0, jf=passed)
        asm.load(low_at)
        asm.jump(JEQ_K, check.value & _LOW32, jt=fail, jf=0)
        asm.label(passed)
        return
    mask = check.value if check.op == "SCMP_CMP_MASKED_EQ" else (1 << 64) - 1
    want = check.value_two if check.op == "SCMP_CMP_MASKED_EQ" else check.value
    for offset, shift in ((high_at, 32), (low_at, 0)):
        word_mask, word_want = (mask >> shift) & _LOW32, (want >> shift) & _LOW32
        if word_mask == 0 and word_want == 0:
            continue  # (x & 0) == 0 always holds
        asm.load(offset)
        if word_mask != _LOW32:
            asm.emit(ALU_AND_K, word_mask)
        asm.jump(JEQ_K, word_want, jt=0, jf=fail)


class _Assembler:
    """Instructions with symbolic jump targets, resolved in one pass at the end."""

    def __init__(self) -> None:
        self._items: list[tuple[int, int | str, int | str, int | str] | str] = []
        self._labels: Iterator[int] = count()

    def new_label(self) -> str:
        return f".L{next(self._labels)}"

    def label(self, name: str) -> None:
        self._items.append(name)

    def emit(self, code: int, k: int) -> None:
        self._items.append((code, 0, 0, k))

    def load(self, offset: int) -> None:
        self.emit(LD_ABS_W, offset)

    def ret(self, value: int) -> None:
        self.emit(RET_K, value)

    def goto(self, label: str) -> None:
        self._items.append((JA, 0, 0, label))

    def jump(self, code: int, k: int, *, jt: int | str, jf: int | str) -> None:
        self._items.append((code, jt, jf, k))

    def assemble(self) -> list[Insn]:
        where: dict[str, int] = {}
        pc = 0
        for item in self._items:
            if isinstance(item, str):
                if item in where:
                    raise ValueError(f"label {item} defined twice")
                where[item] = pc
            else:
                pc += 1
        program: list[Insn] = []
        for item in self._items:
            if isinstance(item, str):
                continue
            code, jt, jf, k = item
            here = len(program)
            if code == JA:
                program.append(Insn(JA, 0, 0, self._offset(where, here, k, 2**32 - 1)))
            else:
                jt_off = self._offset(where, here, jt, _MAX_COND_JUMP)
                jf_off = self._offset(where, here, jf, _MAX_COND_JUMP)
                program.append(Insn(code, jt_off, jf_off, int(k)))
        return program

    @staticmethod
    def _offset(where: dict[str, int], here: int, target: int | str, limit: int) -> int:
        offset = target if isinstance(target, int) else where[target] - here - 1
        if not 0 <= offset <= limit:
            raise ValueError(f"jump offset {offset} out of range at instruction {here}")
        return offset
