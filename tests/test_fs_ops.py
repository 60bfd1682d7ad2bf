"""Semantics of each Root operation and of Roots.locate, on the real filesystem,
with both resolvers."""

from __future__ import annotations

import ast
import errno
import os
import resource
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import landlock
import pytest

from corral.errors import CorralError
from corral.fs import Expect, MoveGuard, Root, Roots, _resolve, content_version, syscalls
from corral.fs._atomic import STALE_TEMP_AGE, TEMP_PREFIX

BIG = 1 << 20
RACERS = 6  # enough concurrent writers to make a lost update likely without the lock


@pytest.fixture(params=["openat2", "walk"])
def root(request: pytest.FixtureRequest, workspace: Path) -> Iterator[Root]:
    with Root(str(workspace), resolver=request.param) as r:
        yield r


def code(fn: Callable[[], object]) -> str:
    with pytest.raises(CorralError) as exc:
        fn()
    return exc.value.code


def temps(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(TEMP_PREFIX)]


def in_child(fn: Callable[[], object]) -> object:
    """Run fn in a forked child (for limits and confinement that cannot be undone)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                result: object = ("ok", fn())
            except BaseException as exc:  # report, never unwind into pytest
                result = ("raised", getattr(exc, "code", None) or f"{type(exc).__name__}{exc.args}")
            os.write(w, repr(result).encode())  # repr: nothing to import under Landlock
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert data, f"child died: wait status {status:#x}"
    return ast.literal_eval(data.decode())


class Recorder:
    def __init__(self, deny: str | None = None) -> None:
        self.seen: list[str] = []
        self.deny = deny

    def __call__(self, rel: str) -> None:
        self.seen.append(rel)
        if rel == self.deny:
            raise CorralError("path_denied", f"{rel} is denied")


# -- read_bytes ---------------------------------------------------------------


def test_read(root: Root, workspace: Path):
    assert root.read_bytes("hello.txt", max_file_bytes=BIG) == b"hello\nworld\n"
    (workspace / "sub").mkdir()
    os.symlink("../hello.txt", workspace / "sub" / "link")
    guard = Recorder()
    assert root.read_bytes("sub/link", max_file_bytes=BIG, guard=guard) == b"hello\nworld\n"
    assert guard.seen == ["hello.txt"]


def test_read_errors(root: Root, workspace: Path):
    (workspace / "d").mkdir()
    assert code(lambda: root.read_bytes("d", max_file_bytes=BIG)) == "is_a_directory"
    assert code(lambda: root.read_bytes(".", max_file_bytes=BIG)) == "is_a_directory"
    assert code(lambda: root.read_bytes("nope", max_file_bytes=BIG)) == "not_found"
    assert code(lambda: root.read_bytes("hello.txt/x", max_file_bytes=BIG)) == "not_a_directory"
    assert code(lambda: root.read_bytes("hello.txt/", max_file_bytes=BIG)) == "not_a_directory"
    with pytest.raises(CorralError) as exc:
        root.read_bytes("hello.txt", max_file_bytes=5)
    assert exc.value.code == "too_large"
    assert "12" in exc.value.message and "5" in exc.value.message
    assert str(workspace) not in exc.value.message
    guard = Recorder(deny="hello.txt")
    assert code(lambda: root.read_bytes("hello.txt", max_file_bytes=BIG, guard=guard)) == (
        "path_denied"
    )


# -- info / resolve -------------------------------------------------------------


def test_info(root: Root, workspace: Path):
    (workspace / "hello.txt").chmod(0o640)
    os.symlink("hello.txt", workspace / "link")
    os.symlink("missing", workspace / "dangling")
    f = root.info("hello.txt")
    assert (f.type, f.size, f.mode, f.nlink, f.symlink_target) == ("file", 12, 0o640, 1, None)
    link = root.info("link")
    assert (link.type, link.symlink_target) == ("symlink", "hello.txt")
    assert root.info("link", follow=True).type == "file"
    assert root.info(".").type == "dir"
    assert root.info("nope") is None and root.info("nope/deeper") is None
    assert root.info("dangling").type == "symlink"
    assert root.info("dangling", follow=True) is None
    guard = Recorder()
    root.info("link", follow=True, guard=guard)
    root.info("nope", guard=guard)
    root.info("nope/deeper/x", guard=guard)
    assert guard.seen == ["hello.txt", "nope", "nope/deeper/x"]
    denied = Recorder(deny="secret/key")  # missing must not say more than denied
    assert code(lambda: root.info("secret/key", guard=denied)) == "path_denied"


def test_resolve(root: Root, workspace: Path):
    (workspace / "a" / "b").mkdir(parents=True)
    os.symlink("a/b", workspace / "ab")
    os.symlink("ab/new", workspace / "to_new")
    assert root.resolve(".") == "."
    assert root.resolve("./a//b/../b/") == "a/b"
    assert root.resolve("ab/x") == "a/b/x"
    assert root.resolve("to_new") == "a/b/new"
    assert root.resolve("to_new", follow=False) == "to_new"
    assert root.resolve("a/..") == "."
    assert code(lambda: root.resolve("missing/x")) == "not_found"
    assert code(lambda: root.resolve("hello.txt/x")) == "not_a_directory"


# -- write_atomic ---------------------------------------------------------------


def test_write_creates_and_replaces(root: Root, workspace: Path):
    out = root.write_atomic("new/deep/f.txt", b"one")
    assert out.created and out.version == content_version(b"one")
    assert (workspace / "new/deep/f.txt").read_bytes() == b"one"
    again = root.write_atomic("new/deep/f.txt", b"two")
    assert not again.created and again.version == content_version(b"two")
    assert temps(workspace / "new/deep") == []


def test_write_keeps_mode_and_gets_new_inode(root: Root, workspace: Path):
    target = workspace / "hello.txt"
    target.chmod(0o751)
    before = target.stat().st_ino
    root.write_atomic("hello.txt", b"x")
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o751 and st.st_ino != before
    target.chmod(0o6755)
    root.write_atomic("hello.txt", b"y")
    assert stat.S_IMODE(target.stat().st_mode) == 0o755  # set-id bits are not carried over


def test_write_through_symlink_keeps_link(root: Root, workspace: Path):
    (workspace / "sub").mkdir()
    os.symlink("../hello.txt", workspace / "sub" / "link")
    guard = Recorder()
    root.write_atomic("sub/link", b"through", guard=guard)
    assert os.readlink(workspace / "sub" / "link") == "../hello.txt"
    assert (workspace / "hello.txt").read_bytes() == b"through"
    assert guard.seen == ["hello.txt"]
    os.symlink("sub/new.txt", workspace / "dangling")
    assert root.write_atomic("dangling", b"made").created
    assert (workspace / "sub/new.txt").read_bytes() == b"made"
    assert os.path.islink(workspace / "dangling")


def test_write_hard_link_gets_new_inode(root: Root, workspace: Path):
    os.link(workspace / "hello.txt", workspace / "twin")
    root.write_atomic("twin", b"changed")
    assert (workspace / "hello.txt").read_bytes() == b"hello\nworld\n"
    assert (workspace / "twin").read_bytes() == b"changed"
    assert (workspace / "hello.txt").stat().st_nlink == 1


def test_write_errors(root: Root, workspace: Path):
    (workspace / "d").mkdir()
    assert code(lambda: root.write_atomic("d", b"x")) == "is_a_directory"
    assert code(lambda: root.write_atomic(".", b"x")) == "invalid_arguments"
    assert code(lambda: root.write_atomic("d/..", b"x")) == "invalid_arguments"
    assert code(lambda: root.write_atomic("hello.txt/", b"x")) == "not_a_directory"
    assert code(lambda: root.write_atomic("a/b", b"x", make_parents=False)) == "not_found"
    assert code(lambda: root.write_atomic("hello.txt", b"x", exclusive=True)) == "already_exists"
    assert root.write_atomic("fresh", b"x", exclusive=True).created
    assert (workspace / "hello.txt").read_bytes() == b"hello\nworld\n"
    assert temps(workspace) == [] and not (workspace / "a").exists()


def test_write_guard_refusal_changes_nothing(root: Root, workspace: Path):
    guard = Recorder(deny="secret/x.txt")
    assert code(lambda: root.write_atomic("secret/x.txt", b"x", guard=guard)) == "path_denied"
    assert not (workspace / "secret").exists()  # parents are guarded before they are made
    guard = Recorder(deny="hello.txt")
    assert code(lambda: root.write_atomic("hello.txt", b"x", guard=guard)) == "path_denied"
    assert (workspace / "hello.txt").read_bytes() == b"hello\nworld\n"
    assert temps(workspace) == []


def test_write_failure_removes_temp(root: Root, workspace: Path):
    """RLIMIT_FSIZE makes the write fail half way (EFBIG; Python ignores SIGXFSZ)."""

    def write_big() -> object:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        return root.write_atomic("hello.txt", b"y" * 5000).version

    assert in_child(write_big) == ("raised", "io_error")
    assert (workspace / "hello.txt").read_bytes() == b"hello\nworld\n"
    assert temps(workspace) == []


def test_expected_version(root: Root, workspace: Path):
    v = content_version(b"hello\nworld\n")
    assert code(lambda: root.write_atomic("hello.txt", b"x", expect=Expect(version="stale"))) == (
        "conflict"
    )
    assert code(lambda: root.write_atomic("missing", b"x", expect=Expect(version=v))) == "conflict"
    assert not (workspace / "missing").exists()
    (workspace / "hello.txt").chmod(0o600)
    out = root.write_atomic("hello.txt", b"next", expect=Expect(version=v))
    assert out.version == content_version(b"next")
    assert stat.S_IMODE((workspace / "hello.txt").stat().st_mode) == 0o600
    stale = Expect(version=v)
    assert code(lambda: root.write_atomic("hello.txt", b"x", expect=stale)) == "conflict"
    assert temps(workspace) == []


def test_expected_version_race_has_one_winner(root: Root, workspace: Path):
    """Writers in separate processes holding the same version: exactly one succeeds."""
    v = content_version(b"hello\nworld\n")
    go_r, go_w = os.pipe()
    children = []
    for i in range(RACERS):
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 2
            try:
                os.read(go_r, 1)  # start together
                try:
                    root.write_atomic("hello.txt", b"writer %d" % i, expect=Expect(version=v))
                    status = 0
                except CorralError as exc:
                    status = 1 if exc.code == "conflict" else 2
            finally:
                os.write(res_w, bytes([status]))
                os._exit(0)
        os.close(res_w)
        children.append((pid, res_r))
    os.write(go_w, b"x" * RACERS)
    results = []
    for pid, res_r in children:
        results.append(os.read(res_r, 1)[0])
        os.close(res_r)
        os.waitpid(pid, 0)
    os.close(go_r)
    os.close(go_w)
    assert sorted(results) == [0] + [1] * (RACERS - 1)
    assert (workspace / "hello.txt").read_bytes().startswith(b"writer ")
    assert temps(workspace) == []


def test_remove_stale_temps(root: Root, workspace: Path):
    (workspace / "d").mkdir()
    dead = workspace / "d" / f"{TEMP_PREFIX}999999-abc"
    live = workspace / f"{TEMP_PREFIX}{os.getpid()}-def"
    old = workspace / f"{TEMP_PREFIX}{os.getpid()}-old"
    for p in (dead, live, old):
        p.write_bytes(b"partial")
    long_ago = time.time() - STALE_TEMP_AGE - 10
    os.utime(old, (long_ago, long_ago))
    (workspace / "keep.txt").write_bytes(b"")
    assert root.remove_stale_temps(dead_pids={999999}, recursive=False) == 1  # old one only
    old.write_bytes(b"partial")
    os.utime(old, (long_ago, long_ago))
    assert root.remove_stale_temps(dead_pids={999999}) == 2
    assert sorted(os.listdir(workspace)) == sorted(["d", "hello.txt", "keep.txt", live.name])
    assert os.listdir(workspace / "d") == []


# -- append ---------------------------------------------------------------------


def test_append(root: Root, workspace: Path):
    assert root.append("hello.txt", b"more\n", max_file_bytes=BIG) == 17
    assert (workspace / "hello.txt").read_bytes() == b"hello\nworld\nmore\n"
    assert root.append("logs/new.log", b"a", max_file_bytes=BIG) == 1
    with pytest.raises(CorralError) as exc:
        root.append("hello.txt", b"x" * 10, max_file_bytes=20)
    assert exc.value.code == "too_large" and "27" in exc.value.message
    assert code(lambda: root.append("big.log", b"x" * 30, max_file_bytes=20)) == "too_large"
    assert not (workspace / "big.log").exists()
    assert code(lambda: root.append("logs", b"x", max_file_bytes=BIG)) == "is_a_directory"
    os.symlink("hello.txt", workspace / "link")
    guard = Recorder()
    root.append("link", b"!", max_file_bytes=BIG, guard=guard)
    assert guard.seen[-1] == "hello.txt" and os.path.islink(workspace / "link")


# -- mkdir ----------------------------------------------------------------------


def test_mkdir(root: Root, workspace: Path):
    guard = Recorder()
    assert root.mkdir("a/b/c", guard=guard) is True
    assert (workspace / "a/b/c").is_dir() and guard.seen[-1] == "a/b/c"
    assert root.mkdir("a/b/c") is False
    assert root.mkdir("a/b/c/") is False
    assert root.mkdir(".") is False
    assert code(lambda: root.mkdir("x/y", parents=False)) == "not_found"
    assert code(lambda: root.mkdir("hello.txt")) == "already_exists"
    assert code(lambda: root.mkdir("hello.txt/x")) == "not_a_directory"
    os.symlink("a", workspace / "dirlink")
    assert root.mkdir("dirlink") is False
    assert code(lambda: root.mkdir("new/../x")) == "not_found"
    assert not (workspace / "new").exists()
    denied = Recorder(deny="p/q/r")
    assert code(lambda: root.mkdir("p/q/r", guard=denied)) == "path_denied"
    assert not (workspace / "p").exists()


# -- unlink ---------------------------------------------------------------------


def test_unlink(root: Root, workspace: Path):
    (workspace / "d").mkdir()
    os.symlink("hello.txt", workspace / "link")
    root.unlink("link")
    assert not os.path.lexists(workspace / "link") and (workspace / "hello.txt").exists()
    assert code(lambda: root.unlink("d")) == "is_a_directory"
    assert code(lambda: root.unlink(".")) == "invalid_arguments"
    assert code(lambda: root.unlink("nope")) == "not_found"
    assert code(lambda: root.unlink("hello.txt/")) == "not_a_directory"
    root.unlink("hello.txt")
    assert not (workspace / "hello.txt").exists()


# -- rename ---------------------------------------------------------------------


def test_rename(root: Root, workspace: Path):
    (workspace / "other.txt").write_bytes(b"other")
    assert code(lambda: root.rename("hello.txt", root, "other.txt")) == "already_exists"
    assert (workspace / "other.txt").read_bytes() == b"other"
    root.rename("hello.txt", root, "other.txt", overwrite=True)
    assert (workspace / "other.txt").read_bytes() == b"hello\nworld\n"
    assert not (workspace / "hello.txt").exists()
    assert code(lambda: root.rename("nope", root, "x")) == "not_found"
    (workspace / "d" / "sub").mkdir(parents=True)
    assert code(lambda: root.rename("d", root, "d/sub/d")) == "invalid_arguments"
    assert code(lambda: root.rename("d", root, "d")) == "invalid_arguments"
    assert code(lambda: root.rename("other.txt", root, "nodir/x")) == "not_found"
    assert code(lambda: root.rename(".", root, "x")) == "invalid_arguments"
    root.rename("d", root, "e")
    assert (workspace / "e" / "sub").is_dir()
    (workspace / "f").mkdir()
    (workspace / "f" / "x").write_bytes(b"")
    assert code(lambda: root.rename("e", root, "f", overwrite=True)) == "already_exists"


def test_rename_between_roots(workspace: Path, tmp_path: Path):
    other = tmp_path / "other"
    other.mkdir()
    with Root(str(workspace)) as a, Root(str(other)) as b:
        seen_src, seen_dst = Recorder(), Recorder()
        a.rename("hello.txt", b, "moved.txt", guard=MoveGuard(seen_src, seen_dst))
        assert (other / "moved.txt").exists() and not (workspace / "hello.txt").exists()
        assert (seen_src.seen, seen_dst.seen) == (["hello.txt"], ["moved.txt"])
    with Root(str(workspace)) as a, Root(str(other), mode="ro") as ro:
        assert code(lambda: ro.rename("moved.txt", a, "back")) == "read_only"


# -- scandir / walk -------------------------------------------------------------


def test_scandir_and_walk_never_follow(root: Root, workspace: Path, outside: Path):
    (workspace / "b" / "c").mkdir(parents=True)
    (workspace / "b" / "c" / "f.txt").write_bytes(b"12345")
    (workspace / "a.txt").write_bytes(b"")
    os.symlink("b", workspace / "linkdir")
    os.symlink(str(outside), workspace / "out")
    entries = root.scandir(".")
    assert [(e.path, e.type) for e in entries] == [
        ("a.txt", "file"), ("b", "dir"), ("hello.txt", "file"),
        ("linkdir", "symlink"), ("out", "symlink"),
    ]
    walked = [(e.path, e.type) for e in root.walk(".")]
    assert walked == [
        ("a.txt", "file"), ("b", "dir"), ("b/c", "dir"), ("b/c/f.txt", "file"),
        ("hello.txt", "file"), ("linkdir", "symlink"), ("out", "symlink"),
    ]
    assert [e.path for e in root.walk("b")] == ["c", "c/f.txt"]
    assert [e.size for e in root.walk("b") if e.type == "file"] == [5]
    assert [e.path for e in root.scandir("linkdir")] == ["c"]  # the named dir itself resolves
    assert code(lambda: root.scandir("hello.txt")) == "not_a_directory"
    assert code(lambda: list(root.walk("nope"))) == "not_found"
    assert code(lambda: root.scandir("out")) == "outside_workspace"


def test_walk_closes_fds_when_abandoned(root: Root, workspace: Path):
    for i in range(5):
        (workspace / f"d{i}" / "x").mkdir(parents=True)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        walker = root.walk(".")
        next(walker)
        next(walker)
        walker.close()
    assert len(os.listdir("/proc/self/fd")) == before


# -- resolver selection and limits ------------------------------------------------


def test_auto_picks_openat2_and_falls_back(workspace: Path, monkeypatch: pytest.MonkeyPatch):
    with Root(str(workspace)) as r:
        assert r.resolver == "openat2"

    def no_openat2(*_: object) -> int:
        raise OSError(errno.ENOSYS, "no openat2")

    monkeypatch.setattr(syscalls, "openat2", no_openat2)
    with Root(str(workspace)) as r:
        assert r.resolver == "walk"
        assert r.read_bytes("hello.txt", max_file_bytes=BIG) == b"hello\nworld\n"
    assert code(lambda: Root(str(workspace), resolver="openat2")) == "io_error"


def test_eagain_is_retried_then_reported(workspace: Path, monkeypatch: pytest.MonkeyPatch):
    # in a subdirectory: a name in the root itself is looked up in the root fd, no openat2
    (workspace / "sub").mkdir()
    (workspace / "sub" / "hello.txt").write_text("hello\n")
    with Root(str(workspace), resolver="openat2") as r:
        calls = []

        def busy(*_: object) -> int:
            calls.append(1)
            raise OSError(errno.EAGAIN, "busy")

        monkeypatch.setattr(syscalls, "openat2", busy)
        assert code(lambda: r.read_bytes("sub/hello.txt", max_file_bytes=BIG)) == "io_error"
        assert len(calls) == _resolve.OPENAT2_EAGAIN_RETRIES


def test_root_errors(tmp_path: Path, workspace: Path):
    assert code(lambda: Root(str(tmp_path / "missing"))) == "not_found"
    assert code(lambda: Root(str(workspace / "hello.txt"))) == "not_a_directory"
    with pytest.raises(ValueError):
        Root(str(workspace), mode="rwx")
    with pytest.raises(ValueError):
        Root(str(workspace), resolver="magic")


def test_from_fd(workspace: Path):
    fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY)
    with Root.from_fd(fd, str(workspace), mode="ro") as r:
        assert r.path == str(workspace) and r.mode == "ro"
        assert r.read_bytes("hello.txt", max_file_bytes=BIG) == b"hello\nworld\n"
    with pytest.raises(OSError):
        os.fstat(fd)  # adopted: closed with the Root


def test_root_follows_its_directory_when_moved(root: Root, workspace: Path, tmp_path: Path):
    (workspace / "sub").mkdir()
    guard = Recorder()
    workspace.rename(tmp_path / "moved")
    root.write_atomic("sub/x", b"x", guard=guard)
    assert guard.seen == ["sub/x"]
    assert (tmp_path / "moved" / "sub" / "x").exists()


def test_guard_works_under_landlock(workspace: Path, outside: Path):
    """The openat2 guard path comes from readlink(/proc/self/fd/N): not a
    Landlock-covered access, so it keeps working in a confined process."""

    def confined() -> object:
        with Root(str(workspace), resolver="openat2") as r:
            ruleset = landlock.Ruleset()
            ruleset.allow(str(workspace))
            ruleset.apply()
            try:
                (outside / "secret.txt").read_bytes()
                return "landlock did not confine"
            except PermissionError:
                pass
            guard = Recorder()
            r.mkdir("a/b")
            r.write_atomic("a/b/c.txt", b"x", guard=guard)
            os.symlink("a/b/c.txt", workspace / "link")
            r.read_bytes("link", max_file_bytes=BIG, guard=guard)
            return guard.seen

    assert in_child(confined) == ("ok", ["a/b/c.txt", "a/b/c.txt"])


# -- Roots.locate ------------------------------------------------------------------


def test_locate(tmp_path: Path):
    (tmp_path / "proj" / "vendor").mkdir(parents=True)
    (tmp_path / "proj_backup").mkdir()
    os.symlink(tmp_path / "proj", tmp_path / "alias")
    with Root(str(tmp_path / "alias")) as ws, Root(str(tmp_path / "proj/vendor"), mode="ro") as v:
        roots = Roots(ws, [v])
        assert roots.all() == [ws, v]
        assert roots.locate("src/a.py") == (ws, "src/a.py")
        assert roots.locate("../x") == (ws, "../x")
        assert roots.locate(f"{tmp_path}/proj/src/a.py") == (ws, "src/a.py")
        assert roots.locate(f"{tmp_path}/alias/src/a.py") == (ws, "src/a.py")
        assert roots.locate(f"{tmp_path}/proj") == (ws, ".")
        assert roots.locate(f"{tmp_path}//proj/./vendor/lib.py") == (v, "lib.py")
        assert roots.locate(f"{tmp_path}/proj/../proj_backup/x") == (ws, "../proj_backup/x")
        assert code(lambda: roots.locate(f"{tmp_path}/proj_backup/x")) == "outside_workspace"
        assert code(lambda: roots.locate("/")) == "outside_workspace"
        for bad in ("", "a\0b", "/" + "x" * 4096):
            assert code(lambda bad=bad: roots.locate(bad)) == "invalid_arguments"


def test_removed_directory_is_not_found_not_a_path(workspace: Path):
    """The kernel records a removed directory as "<path> (deleted)": never a guard path."""
    (workspace / "sub").mkdir()
    with Root(str(workspace), resolver="openat2") as r:
        resolver = r._resolver
        assert isinstance(resolver, _resolve.Openat2Resolver)
        fd, rel = resolver.open_dir("sub")
        try:
            assert rel == "sub"
            (workspace / "sub").rmdir()
            with pytest.raises(FileNotFoundError):
                resolver._relative(fd)
        finally:
            os.close(fd)


def test_directory_moved_out_is_not_a_guard_path(workspace: Path, outside: Path):
    """A directory moved out of the root after openat2 opened it: io_error, never a path."""
    (workspace / "sub").mkdir()
    with Root(str(workspace), resolver="openat2") as r:
        resolver = r._resolver
        assert isinstance(resolver, _resolve.Openat2Resolver)
        fd, _ = resolver.open_dir("sub")
        try:
            (workspace / "sub").rename(outside / "sub")
            with pytest.raises(OSError) as exc:
                resolver._relative(fd)
            assert exc.value.errno == errno.ESTALE
        finally:
            os.close(fd)


def test_exclusive_lost_race_removes_temp(root: Root, workspace: Path):
    """The target appears after the check (the guard plays the racer): NOREPLACE
    refuses, the racer's file stays, the temp file goes."""

    def racer(rel: str) -> None:
        (workspace / rel).write_bytes(b"racer")

    assert code(lambda: root.write_atomic("new.txt", b"mine", exclusive=True, guard=racer)) == (
        "already_exists"
    )
    assert (workspace / "new.txt").read_bytes() == b"racer"
    assert temps(workspace) == []


SWAP_OPS = {
    "write": lambda r, g: r.write_atomic("sub/f.txt", b"new", guard=g),
    "append": lambda r, g: r.append("sub/f.txt", b"new", max_file_bytes=BIG, guard=g),
    "mkdir": lambda r, g: r.mkdir("sub/f.txt.d", guard=g),
    "unlink": lambda r, g: r.unlink("sub/f.txt", guard=g),
    "rename": lambda r, g: r.rename("sub/f.txt", r, "sub/g.txt", guard=MoveGuard(destination=g)),
    "read": lambda r, g: r.read_bytes("sub/f.txt", max_file_bytes=BIG, guard=g),
}


@pytest.mark.parametrize("op", SWAP_OPS)
def test_parent_swapped_for_a_link_after_guard_stays_inside(
    op: str, root: Root, workspace: Path, outside: Path
):
    """Between resolution and the syscall (the guard runs there) the parent
    directory is renamed away and replaced by a symlink to the outside: the
    operation acts on the directory it resolved, now named moved/."""
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_bytes(b"inside")
    (outside / "f.txt").write_bytes(b"outside")

    def swap(_: str) -> None:
        (workspace / "sub").rename(workspace / "moved")
        os.symlink(str(outside), workspace / "sub")

    result = SWAP_OPS[op](root, swap)
    assert (outside / "f.txt").read_bytes() == b"outside"
    assert sorted(os.listdir(outside)) == ["f.txt", "secret.txt"]
    moved = sorted(os.listdir(workspace / "moved"))
    assert moved == {
        "write": ["f.txt"], "append": ["f.txt"], "mkdir": ["f.txt", "f.txt.d"],
        "unlink": [], "rename": ["g.txt"], "read": ["f.txt"],
    }[op]
    if op == "read":
        assert result == b"inside"
    if op in ("write", "append"):
        assert (workspace / "moved" / "f.txt").read_bytes() in (b"new", b"insidenew")


MISSING_OPS = {
    "info": lambda r, g: r.info("secret/key", guard=g),
    "read": lambda r, g: r.read_bytes("secret/key", max_file_bytes=BIG, guard=g),
    "write_no_parents": lambda r, g: r.write_atomic(
        "secret/key", b"x", make_parents=False, guard=g
    ),
    "write": lambda r, g: r.write_atomic("secret/key", b"x", guard=g),
    "append": lambda r, g: r.append("secret/key", b"x", max_file_bytes=BIG, guard=g),
    "mkdir": lambda r, g: r.mkdir("secret/key", guard=g),
    "mkdir_no_parents": lambda r, g: r.mkdir("secret/key", parents=False, guard=g),
    "unlink": lambda r, g: r.unlink("secret/key", guard=g),
    "rename_src": lambda r, g: r.rename("secret/key", r, "x", guard=MoveGuard(source=g)),
    "rename_dst": lambda r, g: r.rename(
        "hello.txt", r, "secret/key", guard=MoveGuard(destination=g)
    ),
    "scandir": lambda r, g: r.scandir("secret/key", guard=g),
    "walk": lambda r, g: list(r.walk("secret/key", guard=g)),
}


@pytest.mark.parametrize("op", MISSING_OPS)
def test_missing_parent_is_guarded_first(op: str, root: Root, workspace: Path):
    """A denied path answers path_denied whether or not its directory exists."""
    guard = Recorder(deny="secret/key")
    assert code(lambda: MISSING_OPS[op](root, guard)) == "path_denied"
    assert sorted(os.listdir(workspace)) == ["hello.txt"]


def test_walk_never_iterated_closes_its_fd(root: Root, workspace: Path):
    (workspace / "d").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(10):
        root.walk(".")
    assert len(os.listdir("/proc/self/fd")) == before


def test_walk_notices_a_directory_moved_out(workspace: Path, outside: Path):
    """The walk's version of the openat2 path check: the opened chain must still
    be where it was found."""
    (workspace / "a" / "b").mkdir(parents=True)
    walker = _resolve.WalkResolver(os.open(workspace, _resolve.DIR_FLAGS))
    fds = [os.open(workspace / "a", _resolve.DIR_FLAGS)]
    fds.append(os.open("b", _resolve.DIR_FLAGS, dir_fd=fds[0]))
    try:
        walker._check_chain(fds, ["a", "b"])
        (workspace / "a").rename(outside / "a")
        with pytest.raises(_resolve._ChainMoved):
            walker._check_chain(fds, ["a", "b"])
    finally:
        for fd in [*fds, walker.root_fd]:
            os.close(fd)


def test_walk_gives_up_after_bounded_retries(workspace: Path, monkeypatch: pytest.MonkeyPatch):
    calls = []

    def always_moved(*_: object) -> None:
        calls.append(1)
        raise _resolve._ChainMoved

    (workspace / "sub").mkdir()  # a name in the root itself is looked up in the root fd
    (workspace / "sub" / "hello.txt").write_text("hello\n")
    with Root(str(workspace), resolver="walk") as r:
        monkeypatch.setattr(_resolve.WalkResolver, "_check_chain", always_moved)
        assert code(lambda: r.read_bytes("sub/hello.txt", max_file_bytes=BIG)) == "io_error"
        assert len(calls) == _resolve.WALK_RETRIES
