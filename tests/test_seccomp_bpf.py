"""The BPF compiler, run in a small classic-BPF interpreter (no kernel): the
architecture check, x32 numbers, unknown syscalls, argument filters, and agreement
with the profile's reference semantics on random profiles."""

from __future__ import annotations

import errno
import random
import struct

import pytest

from corral.seccomp import bpf
from corral.seccomp.arches import ARCHES, X32_SYSCALL_BIT, load_arch
from corral.seccomp.profile import ArgCheck, Profile, Rule, load_profile

EPERM = bpf.RET_ERRNO | errno.EPERM
AUDIT_ARCH_I386 = 0x4000_0003
AUDIT_ARCH_ARM = 0x4000_0028
CLONE_THREAD_FLAGS = 0x3D0F00  # what glibc's pthread_create passes (VM|FS|FILES|SIGHAND|THREAD...)
FORK_FLAGS = 0x0120_0011  # glibc fork: CHILD_SETTID|CHILD_CLEARTID|SIGCHLD
VFORK_FLAGS = 0x4111  # posix_spawn: CLONE_VM|CLONE_VFORK|SIGCHLD
CLONE_NEWUSER = 0x1000_0000
TCGETS, TIOCSTI, FIOCLEX, FIONCLEX, FIONBIO = 0x5401, 0x5412, 0x5451, 0x5450, 0x5421
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC = 0, 1, 2, 3, 4, 1030
F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY, F_SETLK = 8, 10, 15, 1024, 1026, 6
S_ISUID, S_ISGID, S_ISVTX = 0o4000, 0o2000, 0o1000


def run(program: list[bpf.Insn], *, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """Classic BPF as the kernel runs a seccomp filter, for the opcodes we emit."""
    data = struct.pack("<IIQ6Q", nr & 0xFFFF_FFFF, arch, 0, *args)
    acc, pc = 0, 0
    while True:
        assert 0 <= pc < len(program), "jumped out of the program"
        insn = program[pc]
        pc += 1
        if insn.code == bpf.LD_ABS_W:
            acc = struct.unpack_from("<I", data, insn.k)[0]
        elif insn.code == bpf.ALU_AND_K:
            acc &= insn.k
        elif insn.code == bpf.JA:
            pc += insn.k
        elif insn.code == bpf.JEQ_K:
            pc += insn.jt if acc == insn.k else insn.jf
        elif insn.code == bpf.JGE_K:
            pc += insn.jt if acc >= insn.k else insn.jf
        elif insn.code == bpf.RET_K:
            return insn.k
        else:
            raise AssertionError(f"unexpected opcode {insn.code:#x}")


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile()


@pytest.fixture(scope="module", params=ARCHES)
def compiled(request: pytest.FixtureRequest, profile: Profile):
    arch = load_arch(request.param)
    program = bpf.compile_filter(profile, arch.name)

    def call(name: str, *args: int) -> int:
        padded = (*args, *(0,) * (6 - len(args)))
        return run(program, nr=arch.syscalls[name], arch=arch.audit_arch, args=padded)

    call.arch = arch  # type: ignore[attr-defined]
    call.program = program  # type: ignore[attr-defined]
    return call


def test_foreign_architecture_is_killed(compiled) -> None:
    program, arch = compiled.program, compiled.arch
    for foreign in (AUDIT_ARCH_I386, AUDIT_ARCH_ARM, 0xC000_003E ^ arch.audit_arch ^ 0xC000_00B7):
        assert foreign != arch.audit_arch
        assert run(program, nr=arch.syscalls["read"], arch=foreign) == bpf.RET_KILL_PROCESS


def test_native_architecture_passes_the_check(compiled) -> None:
    assert compiled("read") == bpf.RET_ALLOW


def test_x32_numbers_are_killed_on_x86_64(profile: Profile) -> None:
    arch = load_arch("x86_64")
    program = bpf.compile_filter(profile, "x86_64")
    for name in ("read", "write", "getpid", "openat"):
        nr = X32_SYSCALL_BIT | arch.syscalls[name]
        assert run(program, nr=nr, arch=arch.audit_arch) == bpf.RET_KILL_PROCESS
    for nr in (X32_SYSCALL_BIT | 512, 0x8000_0000):  # x32 execve; above the x32 range
        assert run(program, nr=nr, arch=arch.audit_arch) == bpf.RET_KILL_PROCESS
    assert run(program, nr=0xFFFF_FFFF, arch=arch.audit_arch) == EPERM  # -1: a skipped call


@pytest.mark.parametrize("nr", [470, 499, 512, 1000, 0x3FFF_FFFF, 0xFFFF_FFFF])
def test_unknown_numbers_get_eperm(compiled, nr: int) -> None:
    assert run(compiled.program, nr=nr, arch=compiled.arch.audit_arch) == EPERM


def test_every_number_without_a_rule_gets_eperm(compiled, profile: Profile) -> None:
    arch = compiled.arch
    by_number = {nr: name for name, nr in arch.syscalls.items()}
    for nr in range(max(by_number) + 64):
        name = by_number.get(nr)
        if name is None or not profile.rules_for(name):
            assert run(compiled.program, nr=nr, arch=arch.audit_arch) == EPERM, (nr, name)


ALLOWED_PLAIN = (
    "read", "write", "pread64", "pwrite64", "openat", "openat2", "close", "close_range",
    "newfstatat", "statx", "lseek", "getdents64", "mkdirat", "unlinkat", "renameat", "renameat2",
    "readlinkat", "flock", "fsync", "fdatasync", "dup", "dup3", "brk", "munmap", "mremap",
    "futex", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "exit", "exit_group",
    "getpid", "gettid", "clock_gettime", "getrandom", "ppoll", "sched_yield", "ftruncate"
)


@pytest.mark.parametrize("name", ALLOWED_PLAIN)
def test_worker_calls_are_allowed(compiled, name: str) -> None:
    assert compiled(name) == bpf.RET_ALLOW


DENIED = (
    "execve", "execveat", "fork", "vfork", "socket", "socketpair", "connect", "bind", "listen",
    "accept", "accept4", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmodat",
    "fchmodat2", "chown", "fchown", "lchown", "fchownat", "setxattr", "lsetxattr", "fsetxattr",
    "getxattr", "removexattr", "utime", "utimes", "utimensat", "futimesat", "personality",
    "kill", "tgkill", "tkill", "setrlimit", "setuid", "capset", "sendmsg", "recvmsg", "mknodat",
    "sendto", "recvfrom", "memfd_create", "splice", "vmsplice", "sendfile", "copy_file_range",
    "pkey_mprotect", "epoll_create1", "pselect6", "kcmp", "process_madvise", "pidfd_getfd",
    "pidfd_send_signal", "uname", "sysinfo", "open", "mkdir", "unlink", "rmdir", "rename",
    "stat", "lstat", "statmount", "listmount",
)
KILLED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "fsopen", "fsmount", "move_mount", "open_tree", "fsconfig", "fspick",
    "mount_setattr", "unshare", "setns", "bpf", "perf_event_open", "userfaultfd", "keyctl",
    "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "name_to_handle_at", "open_by_handle_at", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "iopl", "ioperm",
)


@pytest.mark.parametrize("name", KILLED)
def test_calls_corral_never_makes_kill(profile: Profile, name: str) -> None:
    present = [a for a in ARCHES if name in load_arch(a).syscalls]
    assert present, f"{name} is in no syscall table"
    for arch_name in present:
        arch = load_arch(arch_name)
        program = bpf.compile_filter(profile, arch_name)
        for args in ((0,) * 6, (0xFFFF_FFFF_FFFF_FFFF,) * 6):
            got = run(program, nr=arch.syscalls[name], arch=arch.audit_arch, args=args)
            assert got == bpf.RET_KILL_PROCESS


def test_madvise_only_the_advice_malloc_gives(compiled) -> None:
    MADV_DONTNEED = 4
    assert compiled("madvise", 0, 4096, MADV_DONTNEED) == bpf.RET_ALLOW
    # MADV_FREE, MERGEABLE (KSM), DONTFORK, WIPEONFORK, PAGEOUT, HWPOISON, a high word
    for advice in (8, 12, 10, 18, 21, 100, (1 << 32) | MADV_DONTNEED):
        assert compiled("madvise", 0, 4096, advice) == EPERM


@pytest.mark.parametrize("name", DENIED)
def test_dangerous_calls_get_eperm(profile: Profile, name: str) -> None:
    present = [a for a in ARCHES if name in load_arch(a).syscalls]
    assert present, f"{name} is in no syscall table"
    for arch_name in present:
        arch = load_arch(arch_name)
        program = bpf.compile_filter(profile, arch_name)
        for args in ((0,) * 6, (0xFFFF_FFFF_FFFF_FFFF,) * 6):
            assert run(program, nr=arch.syscalls[name], arch=arch.audit_arch, args=args) == EPERM


def test_clone_refuses_threads_too(compiled) -> None:
    for flags in (CLONE_THREAD_FLAGS, FORK_FLAGS, VFORK_FLAGS, CLONE_THREAD_FLAGS | CLONE_NEWUSER):
        assert compiled("clone", flags) == EPERM
    assert compiled("clone3", 0) == EPERM


def test_ioctl_only_the_requests_python_needs(compiled) -> None:
    for request in (TCGETS, FIOCLEX, FIONCLEX, FIONBIO):
        assert compiled("ioctl", 0, request) == bpf.RET_ALLOW
    assert compiled("ioctl", 0, TIOCSTI) == EPERM
    # the high word counts too: the filter never widens what it allows
    assert compiled("ioctl", 0, (1 << 32) | TCGETS) == EPERM


def test_no_executable_mappings(compiled) -> None:
    for name in ("mmap", "mprotect"):
        assert compiled(name, 0, 4096, PROT_READ | PROT_WRITE) == bpf.RET_ALLOW
        assert compiled(name, 0, 4096, PROT_READ | PROT_EXEC) == EPERM
    assert compiled("pkey_mprotect", 0, 4096, PROT_READ) == EPERM


def test_prlimit64_reads_own_limits_only(compiled) -> None:
    assert compiled("prlimit64", 0, 7, 0, 0x7FFF_0000) == bpf.RET_ALLOW
    assert compiled("prlimit64", 0, 7, 0x7FFF_0000, 0) == EPERM  # sets a limit
    assert compiled("prlimit64", 1234, 7, 0, 0x7FFF_0000) == EPERM  # another process


def test_prctl_only_reads_confinement(compiled) -> None:
    assert compiled("prctl", 21) == bpf.RET_ALLOW  # PR_GET_SECCOMP
    assert compiled("prctl", 39) == bpf.RET_ALLOW  # PR_GET_NO_NEW_PRIVS
    assert compiled("prctl", 22, 2) == EPERM  # PR_SET_SECCOMP
    assert compiled("prctl", 4, 1) == EPERM  # PR_SET_DUMPABLE


def test_program_is_within_kernel_limits(compiled) -> None:
    program = compiled.program
    assert len(program) <= bpf.MAX_INSNS
    assert program[-1].code == bpf.RET_K
    assert len(bpf.pack(program)) == 8 * len(program)


def test_conditional_jumps_stay_short_as_the_docstring_says(compiled) -> None:
    """bpf.py's layout: far targets by `ja`; a conditional jump skips a few
    instructions at most (the prologue's 3, one syscall's argument rules)."""
    skips = {max(i.jt, i.jf) for i in compiled.program if i.code in (bpf.JEQ_K, bpf.JGE_K)}
    assert skips <= {0, 1, 3, 5, 7}, skips


def _expected(profile: Profile, name: str, args: tuple[int, ...]) -> int:
    for rule in profile.rules_for(name):
        if all(check.matches(args) for check in rule.args):
            return bpf.ret_value(rule.action, rule.errno)
    return bpf.ret_value(profile.default_action, profile.default_errno)


def _random_value(rng: random.Random) -> int:
    return rng.choice([
        0, 1, 0xFFFF_FFFF, 1 << 32, (1 << 64) - 1, rng.getrandbits(64), rng.getrandbits(32),
        rng.getrandbits(32) << 32,
    ])


def _random_profile(rng: random.Random, names: list[str]) -> Profile:
    actions = [("SCMP_ACT_ALLOW", 1), ("SCMP_ACT_ERRNO", 13), ("SCMP_ACT_ERRNO", 38),
               ("SCMP_ACT_KILL_PROCESS", 1)]
    rules = []
    for name in rng.sample(names, 40):
        for _ in range(rng.randint(0, 3)):
            checks = tuple(
                ArgCheck(index, rng.choice(["SCMP_CMP_EQ", "SCMP_CMP_NE", "SCMP_CMP_MASKED_EQ"]),
                         _random_value(rng), _random_value(rng))
                for index in rng.sample(range(6), rng.randint(1, 3))
            )
            rules.append(Rule((name,), *rng.choice(actions), checks))
        if rng.random() < 0.5:
            rules.append(Rule((name,), *rng.choice(actions)))
    return Profile("SCMP_ACT_ERRNO", errno.EPERM, ARCHES, tuple(rules))


def _satisfying(check: ArgCheck, rng: random.Random) -> int:
    """An argument that passes an EQ or MASKED_EQ check (NE: almost any does)."""
    if check.op == "SCMP_CMP_MASKED_EQ":
        return (check.value_two & check.value) | (rng.getrandbits(64) & ~check.value)
    return check.value


@pytest.mark.parametrize("seed", range(8))
def test_compiler_agrees_with_reference_semantics(seed: int) -> None:
    rng = random.Random(seed)
    arch = load_arch(ARCHES[seed % 2])
    profile = _random_profile(rng, sorted(arch.syscalls))
    program = bpf.compile_filter(profile, arch.name)
    seen = set()
    for name in {name for rule in profile.rules for name in rule.names}:
        for rule in profile.rules_for(name):
            for _ in range(6):
                args = [_random_value(rng) for _ in range(6)]
                for check in rule.args:
                    if rng.random() < 0.7:
                        args[check.index] = _satisfying(check, rng)
                got = run(program, nr=arch.syscalls[name], arch=arch.audit_arch, args=tuple(args))
                assert got == _expected(profile, name, tuple(args)), (name, args)
                seen.add(got == bpf.ret_value(profile.default_action, profile.default_errno))
    assert seen == {True, False}  # both matching and falling through were exercised


def test_a_profile_allowing_everything_still_compiles() -> None:
    arch = load_arch("x86_64")
    profile = Profile("SCMP_ACT_ERRNO", errno.EPERM, ARCHES,
                      (Rule(tuple(arch.syscalls), "SCMP_ACT_ALLOW", errno.EPERM),))
    program = bpf.compile_filter(profile, "x86_64")
    for nr in arch.syscalls.values():
        assert run(program, nr=nr, arch=arch.audit_arch) == bpf.RET_ALLOW
    assert run(program, nr=max(arch.syscalls.values()) + 1, arch=arch.audit_arch) == EPERM


def test_fcntl_only_fd_flags_and_duplicates(compiled) -> None:
    for command in (F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC):
        assert compiled("fcntl", 3, command) == bpf.RET_ALLOW
    # SIGIO to a pid of the worker's choosing, leases and dnotify stall or signal others
    for command in (F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY, F_SETLK):
        assert compiled("fcntl", 3, command) == EPERM


def test_fchmod_never_sets_a_set_id_bit(compiled) -> None:
    for mode in (0o644, 0o600, 0o755, 0o777 | S_ISVTX):
        assert compiled("fchmod", 3, mode) == bpf.RET_ALLOW
    for mode in (S_ISUID | 0o755, S_ISGID | 0o755, S_ISUID | S_ISGID | 0o777):
        assert compiled("fchmod", 3, mode) == EPERM
