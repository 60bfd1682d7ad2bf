"""seccomp inside a confined child, asserting the kernel's errno. Each denial has
a control run with the seccomp layer dropped where the call gets through (or
fails with another errno, from another layer), so the test fails if seccomp is
ever lost."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import resource
import signal
import socket
import stat
import threading
from pathlib import Path

import pytest

from corral import seccomp
from corral.seccomp.arches import X32_SYSCALL_BIT, load_arch, native_arch
from tests.helpers.confined import run_confined

pytestmark = pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filters")
NR = load_arch(native_arch() or "x86_64").syscalls
TIOCSTI = 0x5412
UNKNOWN_SYSCALL = 1000  # above every table: no kernel has it (yet)
_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture
def roots(workspace: Path) -> list[tuple[str, str]]:
    return [(str(workspace), "rw")]


def _syscall(name_or_nr: str | int, *args: int) -> int:
    nr = NR[name_or_nr] if isinstance(name_or_nr, str) else name_or_nr
    ctypes.set_errno(0)
    result = _libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _eperm_then(roots, fn, *args, drop=("seccomp",)):
    confined = run_confined(fn, *args, roots=roots)
    assert confined.errno == errno.EPERM, confined
    return run_confined(fn, *args, roots=roots, drop=drop)


def _socket() -> str:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    return "made"


def test_socket(roots) -> None:
    assert _eperm_then(roots, _socket).ok
    assert run_confined(socket.socketpair, roots=roots).errno == errno.EPERM


def test_execve(roots) -> None:
    control = _eperm_then(roots, os.execv, "/bin/true", ["true"],
                          drop=("seccomp", "mount_namespace"))
    assert control.errno == errno.EACCES  # without seccomp, Landlock still refuses to execute


def _traceme() -> int:
    return _syscall("ptrace", 0, 0, 0, 0)  # PTRACE_TRACEME: the parent would trace us


def test_ptrace_kills_the_process(roots) -> None:
    with pytest.raises(ChildProcessError, match=f"signal {signal.SIGSYS}"):
        run_confined(_traceme, roots=roots)
    assert run_confined(_traceme, roots=roots, drop=("seccomp",)).value == 0


def _fork() -> str:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return "forked"


def test_fork(roots) -> None:
    assert _eperm_then(roots, _fork).ok


def _start_thread() -> str:
    box: list[str] = []
    thread = threading.Thread(target=box.append, args=("ran",))
    thread.start()
    thread.join()
    return box[0]


def test_threads_are_refused_and_the_worker_survives(roots) -> None:
    refused = run_confined(_start_thread, roots=roots)
    assert refused.error == "RuntimeError"  # "can't start new thread"
    assert run_confined(_start_thread, roots=roots, drop=("seccomp",)).value == "ran"
    assert run_confined(_syscall, "clone3", 0, 0, roots=roots).errno == errno.EPERM


def test_symlink_link_and_chmod(roots, workspace: Path) -> None:
    target = str(workspace / "hello.txt")
    symlink = _eperm_then(roots, os.symlink, "hello.txt", str(workspace / "link"))
    assert symlink.errno == errno.EACCES  # Landlock grants no MAKE_SYM either
    assert _eperm_then(roots, os.link, target, str(workspace / "hard")).ok
    assert _eperm_then(roots, os.chmod, target, 0o600).ok
    assert _eperm_then(roots, os.chown, target, os.getuid(), os.getgid()).ok
    assert _eperm_then(roots, os.utime, target).ok
    fifo = _eperm_then(roots, os.mknod, str(workspace / "fifo"), stat.S_IFIFO | 0o600)
    assert fifo.errno == errno.EACCES  # Landlock grants no MAKE_FIFO either


def _fchmod(path: str) -> int:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fchmod(fd, 0o640)
        return os.fstat(fd).st_mode & 0o777
    finally:
        os.close(fd)


def test_fchmod_on_an_fd_is_allowed(roots, workspace: Path) -> None:
    assert run_confined(_fchmod, str(workspace / "hello.txt"), roots=roots).value == 0o640


def _calls_then_survives(calls: list[tuple[str | int, tuple[int, ...]]]) -> list[int | str]:
    results: list[int | str] = []
    for name, args in calls:
        try:
            results.append(_syscall(name, *args))
        except OSError as exc:
            results.append(errno.errorcode[exc.errno])
    results.append(os.getpid())  # still alive and serving
    return results


# zero or invalid arguments (kexec_load: invalid flags): harmless if they ever got through
# (the control run does)
KERNEL_SURFACE = [
    ("pidfd_open", (1, 0)), ("kill", (1, 0)),
    ("setrlimit", (99, 0)), ("linkat", (-1, 0, -1, 0, 0)), ("symlinkat", (0, -1, 0)),
    ("fchmodat", (-1, 0, 0)), ("fchownat", (-1, 0, 0, 0, 0)), ("utimensat", (-1, 0, 0, 0)),
    ("setxattr", (0, 0, 0, 0, 0)), ("getxattr", (0, 0, 0, 0)), ("prctl", (4, 1, 0, 0, 0)),
    ("seccomp", (2, 0, 0)), ("uname", (0,)), ("sysinfo", (0,)), ("madvise", (0, 4096, 12)),
    ("open", (0, 0)), ("stat", (0, 0)), ("lstat", (0, 0)), ("mkdir", (0, 0)),
    ("unlink", (0,)), ("rmdir", (0,)), ("rename", (0, 0)), ("statmount", (0, 0, 0, 0)),
    (UNKNOWN_SYSCALL, ()),
]
# calls corral never makes: the first attempt kills the worker (SIGSYS)
KILLED_ON_ATTEMPT = [
    ("mount", (0, 0, 0, 0, 0)), ("umount2", (0, 0)), ("pivot_root", (0, 0)), ("chroot", (0,)),
    ("fsopen", (0, 0)), ("open_tree", (-1, 0, 0)), ("move_mount", (-1, 0, -1, 0, 0)),
    ("unshare", (0,)), ("setns", (-1, 0)), ("bpf", (0, 0, 0)), ("userfaultfd", (0,)),
    ("keyctl", (0, 0, 0)), ("add_key", (0, 0, 0, 0, 0)), ("request_key", (0, 0, 0, 0)),
    ("io_uring_setup", (0, 0)), ("io_uring_enter", (-1, 0, 0, 0)),
    ("io_uring_register", (-1, 0, 0, 0)), ("process_vm_readv", (1, 0, 0, 0, 0, 0)),
    ("name_to_handle_at", (-1, 0, 0, 0, 0)), ("open_by_handle_at", (-1, 0, 0)),
    ("init_module", (0, 0, 0)), ("finit_module", (-1, 0, 0)), ("delete_module", (0, 0)),
    ("kexec_load", (0, 0, 0, 0xFFFF)), ("reboot", (0, 0, 0, 0)), ("swapoff", (0,)),
    ("perf_event_open", (0, 0, -1, -1, 0)),
]


def test_the_kernel_surface_is_closed_and_the_worker_survives(roots) -> None:
    calls = [(name, args) for name, args in KERNEL_SURFACE if not isinstance(name, str)
             or name in NR]
    confined = run_confined(_calls_then_survives, calls, roots=roots)
    assert confined.value[:-1] == ["EPERM"] * len(calls), confined.value
    control = run_confined(
        _calls_then_survives, calls, roots=roots, drop=("seccomp", "landlock", "capabilities")
    )
    refused = [name for (name, _), got in zip(calls, control.value, strict=False) if got == "EPERM"]
    assert not refused, "refused by something other than seccomp"


@pytest.mark.parametrize(("name", "args"), [c for c in KILLED_ON_ATTEMPT if c[0] in NR])
def test_calls_corral_never_makes_kill_the_worker(roots, name: str, args: tuple) -> None:
    with pytest.raises(ChildProcessError, match=f"signal {signal.SIGSYS}"):
        run_confined(_calls_then_survives, [(name, args)], roots=roots)
    # control: without seccomp the same call returns (an error of its own, or success)
    control = run_confined(
        _calls_then_survives, [(name, args)], roots=roots,
        drop=("seccomp", "landlock", "capabilities"),
    )
    assert control.ok and len(control.value) == 2, control


@pytest.mark.skipif(native_arch() != "x86_64", reason="x32 exists on x86_64 only")
def test_x32_numbers_kill_the_process(roots) -> None:
    with pytest.raises(ChildProcessError, match=f"signal {signal.SIGSYS}"):
        run_confined(_syscall, X32_SYSCALL_BIT | NR["getpid"], roots=roots)
    control = run_confined(_syscall, X32_SYSCALL_BIT | NR["getpid"], roots=roots,
                           drop=("seccomp",))
    assert control.ok or control.errno == errno.ENOSYS  # x32 is often compiled out


def _ioctl(fd: int, request: int) -> int:
    return _syscall("ioctl", fd, request, 0)


def test_ioctl_other_than_what_python_needs(roots) -> None:
    control = _eperm_then(roots, _ioctl, 0, TIOCSTI)  # fd 0 is /dev/null in the child
    assert control.errno == errno.ENOTTY

    def set_inheritable() -> bool:
        fd = os.dup(0)
        os.set_inheritable(fd, True)  # FIONCLEX
        os.set_inheritable(fd, False)  # FIOCLEX
        return os.get_inheritable(fd) or os.isatty(fd)  # TCGETS

    assert run_confined(set_inheritable, roots=roots).value is False


def _map_executable() -> int:
    with mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC) as area:
        return len(area)


def test_no_executable_memory(roots) -> None:
    assert _eperm_then(roots, _map_executable).value == 4096


class _Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]


def _lower_nofile() -> int:
    # resource.setrlimit turns EPERM into ValueError; the raw call shows the errno
    new = _Rlimit(64, 64)
    _syscall("prlimit64", 0, resource.RLIMIT_NOFILE, ctypes.addressof(new), 0)
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_limits_can_be_read_not_changed(roots) -> None:
    assert _eperm_then(roots, _lower_nofile).value == 64
    assert run_confined(resource.getrlimit, resource.RLIMIT_NOFILE, roots=roots).ok


I386_GETPID = bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20; int 0x80; ret


@pytest.mark.skipif(native_arch() != "x86_64", reason="int 0x80 is x86")
def test_a_foreign_abi_call_kills_the_process(roots) -> None:
    # mapped before confinement: the confined child can no longer make code executable
    with mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC) as area:
        area.write(I386_GETPID)
        address = ctypes.addressof(ctypes.c_char.from_buffer(area))
        int80_getpid = ctypes.CFUNCTYPE(ctypes.c_int)(address)
        # SIGSYS comes only from a seccomp filter: without one the call works (ia32
        # emulation) or faults with SIGSEGV; without the arch check, i386 getpid (20)
        # would be judged as x86_64's writev and allowed
        with pytest.raises(ChildProcessError, match=f"signal {signal.SIGSYS}"):
            run_confined(int80_getpid, roots=roots)
        del int80_getpid
