"""A compromised worker cannot change a mode (or owner) in a read-only root, which
Landlock does not govern: attacker code in a child confined as a pool worker is,
with the kernel's errno asserted. In the mount namespace a read-only root is a
read-only bind mount (EROFS); a sandbox with no writable root also gets a seccomp
profile refusing every mode and owner change (EPERM), which is what holds where
the kernel gives no namespace. Control runs drop layers to show each one is what
refuses."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import seccomp
from corral.fs import Root
from corral.sandbox import _mountns, probe
from corral.seccomp.arches import load_arch, native_arch
from tests.helpers.confined import run_confined

KERNEL = probe.probe()
pytestmark = pytest.mark.skipif(
    not seccomp.supported() or KERNEL["landlock_abi"] < 1, reason="no seccomp or Landlock")
needs_namespace = pytest.mark.skipif(not KERNEL["mount_namespace"], reason="no mount namespaces")
NR = load_arch(native_arch() or "x86_64").syscalls
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture
def ro_dir(tmp_path: Path) -> Path:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o755)
    (ro / "secret.txt").write_text("private\n")
    (ro / "secret.txt").chmod(0o600)
    return ro


@pytest.fixture
def ro_root(ro_dir: Path) -> Iterator[Root]:
    root = Root(str(ro_dir), mode="ro")
    yield root
    root.close()


@pytest.fixture
def ws_root(workspace: Path) -> Iterator[Root]:
    root = Root(str(workspace), mode="rw")
    yield root
    root.close()


def _fchmod_each(root_fd: int, names: list[str]) -> dict[str, str]:
    """Attacker code: open each name of a root for reading (Landlock allows it) and
    fchmod it wide open; what happened to each."""
    done: dict[str, str] = {}
    for name in names:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=root_fd)
        try:
            os.fchmod(fd, 0o777)
            done[name] = "changed"
        except OSError as exc:
            done[name] = errno.errorcode[exc.errno]
        finally:
            os.close(fd)
    return done


def _attack(roots: list[Root], target: Root, names: list[str], drop: tuple[str, ...] = ()
            ) -> dict[str, str]:
    outcome = run_confined(_fchmod_each, target.fd, names, roots=roots,
                           keep_fds=[root.fd for root in roots], drop=drop)
    assert outcome.ok, outcome
    assert outcome.layers is not None
    if "mount_namespace" not in drop:
        assert outcome.layers["mount_namespace"] is True
    return outcome.value


def _modes(ro_dir: Path) -> tuple[int, int]:
    return ro_dir.stat().st_mode & 0o777, (ro_dir / "secret.txt").stat().st_mode & 0o777


@needs_namespace
def test_no_writable_root_refuses_fchmod_with_and_without_the_namespace(
    ro_root: Root, ro_dir: Path
) -> None:
    names = [".", "secret.txt"]
    refused = dict.fromkeys(names, "EPERM")
    assert _attack([ro_root], ro_root, names) == refused
    assert _attack([ro_root], ro_root, names, drop=("mount_namespace",)) == refused
    assert _modes(ro_dir) == (0o755, 0o600)
    # each layer alone refuses: the read-only bind without seccomp ...
    assert _attack([ro_root], ro_root, names, drop=("seccomp",)) == dict.fromkeys(names, "EROFS")
    assert _modes(ro_dir) == (0o755, 0o600)
    # ... and the control without either: the attack is real
    both = ("seccomp", "mount_namespace")
    assert _attack([ro_root], ro_root, names, drop=both) == dict.fromkeys(names, "changed")
    assert _modes(ro_dir) == (0o777, 0o777)


def test_without_the_namespace_every_mode_and_owner_change_is_refused(
    ro_root: Root, ro_dir: Path
) -> None:
    outcome = run_confined(_every_mode_change, str(ro_dir / "secret.txt"), roots=[ro_root],
                           keep_fds=[ro_root.fd], drop=("mount_namespace",))
    assert outcome.ok, outcome
    assert outcome.value == dict.fromkeys(outcome.value, "EPERM")
    assert set(outcome.value) == {name for name in seccomp.MODE_CHANGES if name in NR}
    assert _modes(ro_dir) == (0o755, 0o600)


def _every_mode_change(path: str) -> dict[str, str]:
    uid, gid, mode = os.getuid(), os.getgid(), 0o666
    target = ctypes.c_char_p(os.fsencode(path))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    calls = {
        "chmod": (target, mode), "fchmod": (fd, mode), "fchmodat": (AT_FDCWD, target, mode),
        "fchmodat2": (AT_FDCWD, target, mode, 0), "chown": (target, uid, gid),
        "fchown": (fd, uid, gid), "lchown": (target, uid, gid),
        "fchownat": (AT_FDCWD, target, uid, gid, 0),
    }
    done: dict[str, str] = {}
    for name, args in calls.items():
        if name not in NR:
            continue  # aarch64 has only the *at and f* calls
        typed = [arg if isinstance(arg, ctypes.c_char_p) else ctypes.c_long(arg) for arg in args]
        ctypes.set_errno(0)
        result = _libc.syscall(ctypes.c_long(NR[name]), *typed)
        done[name] = "done" if result == 0 else errno.errorcode[ctypes.get_errno()]
    os.close(fd)
    return done


@needs_namespace
def test_a_read_only_root_beside_a_writable_one(
    ro_root: Root, ro_dir: Path, ws_root: Root, workspace: Path
) -> None:
    names = [".", "secret.txt"]
    roots = [ws_root, ro_root]
    assert _attack(roots, ro_root, names) == dict.fromkeys(names, "EROFS")
    assert _modes(ro_dir) == (0o755, 0o600)
    # the workspace keeps the fchmod an atomic write needs
    assert _attack(roots, ws_root, ["hello.txt"]) == {"hello.txt": "changed"}
    # without the namespace nothing stops it here (security.md says so): seccomp
    # cannot tell one root's fd from another's
    dropped = _attack(roots, ro_root, names, drop=("mount_namespace",))
    assert dropped == dict.fromkeys(names, "changed")


@needs_namespace
def test_a_writable_root_nested_in_a_read_only_one_stays_writable(
    ro_root: Root, ro_dir: Path
) -> None:
    (ro_dir / "inner").mkdir()
    (ro_dir / "inner" / "notes.txt").write_text("x")
    inner = Root(str(ro_dir / "inner"), mode="rw")
    try:
        roots = [ro_root, inner]
        assert _attack(roots, inner, ["notes.txt"]) == {"notes.txt": "changed"}
        assert _attack(roots, ro_root, ["secret.txt"]) == {"secret.txt": "EROFS"}
    finally:
        inner.close()


@needs_namespace
def test_before_mount_setattr_a_remount_makes_it_read_only(
    ro_root: Root, ro_dir: Path, ws_root: Root, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_such_call(target: str, attr_set: int) -> None:
        raise OSError(errno.ENOSYS, "no mount_setattr (Linux before 5.12)")

    monkeypatch.setattr(_mountns, "_mount_setattr", no_such_call)  # the forked child's too
    names = [".", "secret.txt"]
    assert _attack([ws_root, ro_root], ro_root, names) == dict.fromkeys(names, "EROFS")
    assert _modes(ro_dir) == (0o755, 0o600)


# A host that is not root gets the namespace through a user namespace, where the
# kernel locks the flags of the host's mounts (nosuid, nodev, noexec, the atime
# ones): the read-only bind must still apply, by mount_setattr or by the remount
# that repeats those flags. The roots sit on a nosuid,nodev,noexec tmpfs mounted in a
# namespace of the script's own, as /tmp often is. Seccomp is left off so the bind
# alone answers.
CHMOD_AS_NOBODY = """
import ctypes, errno, json, os, sys
from corral.config import Limits
from corral.fs import Root
from corral.sandbox import _mountns, confine
base, fallback = sys.argv[1], sys.argv[2] == "fallback"
_mountns.unshare_mounts()
_mountns._mount(None, "/", None, _mountns.MS_REC | _mountns.MS_PRIVATE)
_mountns._mount("test", base, "tmpfs", _mountns.MS_NOSUID | _mountns.MS_NODEV
                | _mountns.MS_NOEXEC, b"mode=0755")
ro, workspace = base + "/ro", base + "/ws"
for path in (ro, workspace):
    os.mkdir(path)
    os.chown(path, 65534, 65534)
with open(ro + "/secret.txt", "w") as secret:
    secret.write("private")
os.chmod(ro + "/secret.txt", 0o600)
os.chown(ro + "/secret.txt", 65534, 65534)
if fallback:
    def no_such_call(target, attr_set):
        raise OSError(errno.ENOSYS, "no mount_setattr")
    _mountns._mount_setattr = no_such_call
confine._apply_seccomp = lambda *_: None
roots = [Root(workspace, mode="rw"), Root(ro, mode="ro")]
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
layers = confine.confine(roots, keep_fds=[r.fd for r in roots] + [1, 2], limits=Limits())
done = {}
for name in (".", "secret.txt"):
    fd = os.open(name, os.O_RDONLY, dir_fd=roots[1].fd)
    try:
        os.fchmod(fd, 0o777)
        done[name] = "changed"
    except OSError as exc:
        done[name] = errno.errorcode[exc.errno]
    done[name + " mode"] = oct(os.fstat(fd).st_mode & 0o777)
print(json.dumps({"namespace": layers["mount_namespace"], "done": done}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become nobody")
@pytest.mark.parametrize("how", ["mount_setattr", "fallback"])
def test_an_unprivileged_worker_gets_the_read_only_bind(how: str) -> None:
    base = tempfile.mkdtemp()
    try:
        done = subprocess.run([sys.executable, "-c", CHMOD_AS_NOBODY, base, how],
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        os.rmdir(base)  # the tmpfs went with the script's namespace
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    if not report["namespace"]:
        pytest.skip("this kernel refuses unprivileged user namespaces")
    assert report["done"] == {".": "EROFS", ". mode": "0o755",
                              "secret.txt": "EROFS", "secret.txt mode": "0o600"}
