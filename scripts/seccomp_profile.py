"""Writes deploy/seccomp.json: the seccomp profile of corral's container, in the
OCI JSON format that podman (--security-opt seccomp=FILE) and Kubernetes
(`seccompProfile: {type: Localhost}`) load.

An allow-list, every other call failing EPERM: the calls of corral's own worker
profile (corral/seccomp/worker.json: what a worker does before and after it
confines itself), those the server's other processes make (SERVER: measured
with `strace -f` of `corral serve --http` serving every tool, a drain at
SIGTERM, `corral doctor`, `corral call` and `corral undo`), and a few on paths
such a run need not take, or of the runtime's own start (PATHS). Among them
the calls that confine a worker (landlock_*, seccomp, prctl) and that build its
mount namespace (unshare, mount, pivot_root, umount2, mount_setattr): with them
a worker has every layer corral knows. Never in it: DENIED (none of corral's
processes makes them; most runtimes' default profiles refuse them too).

    python scripts/seccomp_profile.py          # write deploy/seccomp.json
    python scripts/seccomp_profile.py --check  # exit 1 if the file is not what it writes
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "deploy" / "seccomp.json"
WORKER = REPO / "corral" / "seccomp" / "worker.json"

SERVER = (  # beyond the worker's: measured (see the docstring)
    "accept4", "access", "arch_prctl", "bind", "capget", "capset", "chdir", "clone", "clone3",
    "epoll_create1", "epoll_ctl", "epoll_wait", "execve", "getpeername", "getsockname",
    "getsockopt", "kill", "landlock_add_rule", "landlock_create_ruleset",
    "landlock_restrict_self", "listen", "mkdir", "mount", "mount_setattr", "pidfd_open",
    "pidfd_send_signal", "pipe2", "pivot_root", "recvfrom", "recvmsg", "rmdir", "seccomp",
    "sendmsg", "sendto", "setsockopt", "socket", "socketpair", "sysinfo", "umount2", "uname",
    "unlink", "unshare", "vfork", "wait4",
)
PATHS = (  # the same kinds of work on other paths: errors, signals, waits, links
    "connect", "epoll_pwait", "eventfd2", "faccessat", "faccessat2", "fadvise64", "fallocate",
    "fchdir", "fchmodat", "fchown", "fchownat", "fstatfs", "getdents", "getpgrp", "getpgid",
    "getresgid", "getresuid", "getsid", "getgroups", "linkat", "membarrier", "mknodat",
    "pause", "pidfd_getfd", "pipe", "pselect6", "readlink", "rename", "rt_sigpending",
    "rt_sigqueueinfo", "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo",
    "sched_getparam", "sched_getscheduler", "select", "setpgid", "setrlimit", "setsid",
    "shutdown", "statfs", "symlinkat", "sync_file_range", "tgkill", "tkill", "umask",
    "utimensat", "waitid",
    # the runtime's own start of a container without no_new_privs (root in it, say): runc
    # loads the profile before it sets the container's user and groups
    "setgid", "setgroups", "setresgid", "setresuid", "setuid",
)
DENIED = (  # none of corral's processes makes them
    "acct", "add_key", "bpf", "delete_module", "finit_module", "init_module", "io_uring_enter",
    "io_uring_register", "io_uring_setup", "kexec_file_load", "kexec_load", "keyctl",
    "move_mount", "name_to_handle_at", "open_by_handle_at", "open_tree", "perf_event_open",
    "process_vm_readv", "process_vm_writev", "ptrace", "quotactl", "reboot", "request_key",
    "setns", "swapoff", "swapon", "syslog", "userfaultfd",
)


def profile() -> dict[str, Any]:
    worker = json.loads(WORKER.read_text())
    allowed = {name for rule in worker["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW"
               for name in rule["names"]}
    names = sorted(allowed | set(SERVER) | set(PATHS))
    clash = sorted(set(names) & set(DENIED))
    if clash:
        raise SystemExit(f"allowed and denied at once: {', '.join(clash)}")
    return {
        "comment": "corral's container (written by scripts/seccomp_profile.py): the calls of "
                   "its server, zygotes and workers; every other call fails EPERM.",
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        "syscalls": [{"names": names, "action": "SCMP_ACT_ALLOW"}],
    }


def text() -> str:
    return json.dumps(profile(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    if parser.parse_args().check:
        return 0 if PROFILE.read_text() == text() else 1
    PROFILE.write_text(text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
