"""Escape attempts against every Root operation that takes a path, with both
resolvers: nothing outside the workspace is read, changed or created, and the
secret next door never shows up in a result or a message."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.errors import CorralError
from corral.fs import Expect, Root, Roots
from tests.helpers.calls import SECRET

RESOLVERS = ["openat2", "walk"]
BIG = 1 << 20
NO_HANG_SECONDS = 5  # a FIFO opened without O_NONBLOCK would block forever; fail instead


@dataclass(frozen=True)
class Op:
    name: str
    run: Callable[[Root, str], object]
    follows_final: bool  # acts on a final symlink's target (not on the link itself)


OPS = [
    Op("read", lambda r, p: r.read_bytes(p, max_file_bytes=BIG), True),
    Op("info", lambda r, p: r.info(p), False),
    Op("info_follow", lambda r, p: r.info(p, follow=True), True),
    Op("resolve", lambda r, p: r.resolve(p), True),
    Op("resolve_nofollow", lambda r, p: r.resolve(p, follow=False), False),
    Op("write", lambda r, p: r.write_atomic(p, b"pwned"), True),
    Op("write_exclusive", lambda r, p: r.write_atomic(p, b"pwned", exclusive=True), True),
    Op("write_versioned",
       lambda r, p: r.write_atomic(p, b"pwned", expect=Expect(version="x")), True),
    Op("append", lambda r, p: r.append(p, b"pwned", max_file_bytes=BIG), True),
    Op("mkdir", lambda r, p: r.mkdir(p), True),
    Op("unlink", lambda r, p: r.unlink(p), False),
    Op("rename_src", lambda r, p: r.rename(p, r, "moved"), False),
    Op("rename_dst", lambda r, p: r.rename("hello.txt", r, p), False),
    Op("rename_dst_overwrite", lambda r, p: r.rename("hello.txt", r, p, overwrite=True), False),
    Op("scandir", lambda r, p: r.scandir(p), True),
    Op("walk", lambda r, p: list(r.walk(p)), True),
    Op("remove_stale_temps", lambda r, p: r.remove_stale_temps(p, min_age=0), True),
]


def _link(ws: Path, name: str, target: str) -> None:
    os.symlink(target, ws / name)


@dataclass(frozen=True)
class Case:
    name: str
    path: Callable[[Path, Path], str]  # (workspace, outside) -> the path handed to the op
    setup: Callable[[Path, Path], None] = lambda ws, out: None
    code: str = "outside_workspace"
    final_link: bool = False  # ops that act on a final link itself may succeed
    missing: bool = False  # names nothing (fails before the escape): info may answer None


def _chain(ws: Path, prefix: str, links: int, end: str) -> None:
    """prefix0 -> prefix1 -> ... -> prefix{links-1} -> end: `links` symlinks to follow."""
    for i in range(links):
        _link(ws, f"{prefix}{i}", f"{prefix}{i + 1}" if i + 1 < links else end)


def _proc_fd_link(ws: Path, out: Path) -> None:
    fd = os.open(out, os.O_PATH)  # stays open for the test: the magic link must resolve
    _link(ws, "pfd", f"/proc/self/fd/{fd}/secret.txt")
    _link(ws, "pfd_rel", f"../../../../../../../../proc/self/fd/{fd}/secret.txt")


CASES = [
    Case("dotdot", lambda ws, out: "../outside/secret.txt"),
    Case("dot_dotdot", lambda ws, out: "./../outside/secret.txt"),
    Case("sub_dotdot", lambda ws, out: "sub/../../outside/secret.txt",
         lambda ws, out: (ws / "sub").mkdir()),
    Case("missing_dotdot", lambda ws, out: "nope/../../outside/secret.txt", code="*",
         missing=True),
    Case("deep_dotdot", lambda ws, out: "../" * 20 + "etc/passwd"),
    Case("dotdot_back_in", lambda ws, out: f"../{ws.name}/hello.txt"),
    Case("dotdot_dir", lambda ws, out: ".."),
    Case("absolute_outside", lambda ws, out: str(out / "secret.txt")),
    Case("absolute_inside", lambda ws, out: str(ws / "hello.txt")),
    Case("absolute_root", lambda ws, out: "/"),
    Case("sibling_prefix", lambda ws, out: f"../{ws.name}_backup/secret.txt",
         lambda ws, out: _sibling(ws)),
    Case("rel_link_out", lambda ws, out: "out",
         lambda ws, out: _link(ws, "out", "../outside/secret.txt"), final_link=True),
    Case("abs_link_out", lambda ws, out: "out",
         lambda ws, out: _link(ws, "out", str(out / "secret.txt")), final_link=True),
    Case("abs_link_out_in_subdir", lambda ws, out: "sub/out",
         lambda ws, out: ((ws / "sub").mkdir(), _link(ws / "sub", "out", str(out / "new.txt"))),
         final_link=True),
    Case("abs_link_inside", lambda ws, out: "in",
         lambda ws, out: _link(ws, "in", str(ws / "hello.txt")), final_link=True),
    Case("rel_dir_link_out", lambda ws, out: "d/secret.txt",
         lambda ws, out: _link(ws, "d", "../outside")),
    Case("abs_dir_link_out", lambda ws, out: "d/secret.txt",
         lambda ws, out: _link(ws, "d", str(out))),
    Case("nested_dir_link_out", lambda ws, out: "a/b/secret.txt",
         lambda ws, out: ((ws / "a").mkdir(), _link(ws / "a", "b", "../../outside"))),
    Case("link_dotdot_out", lambda ws, out: "s/../../outside/secret.txt",
         lambda ws, out: ((ws / "x").mkdir(), _link(ws, "s", "x"))),
    Case("dangling_out", lambda ws, out: "dang",
         lambda ws, out: _link(ws, "dang", "../outside/new.txt"), final_link=True),
    Case("dangling_abs_out", lambda ws, out: "dang",
         lambda ws, out: _link(ws, "dang", str(out / "new.txt")), final_link=True),
    Case("dangling_dir_out", lambda ws, out: "dd/new.txt",
         lambda ws, out: _link(ws, "dd", "../outside/newdir")),
    Case("loop", lambda ws, out: "l1",
         lambda ws, out: (_link(ws, "l1", "l2"), _link(ws, "l2", "l1")),
         code="symlink_loop", final_link=True),
    Case("self_loop_dir", lambda ws, out: "me/x", lambda ws, out: _link(ws, "me", "me"),
         code="symlink_loop"),
    Case("chain_41", lambda ws, out: "c0", lambda ws, out: _chain(ws, "c", 41, "hello.txt"),
         code="symlink_loop", final_link=True),
    Case("dir_chain_41", lambda ws, out: "c0/x",
         lambda ws, out: ((ws / "sub").mkdir(), _chain(ws, "c", 41, "sub")), code="symlink_loop"),
    Case("proc_root_path", lambda ws, out: f"/proc/self/root{out}/secret.txt"),
    Case("proc_root_link", lambda ws, out: "pr",
         lambda ws, out: _link(ws, "pr", f"/proc/self/root{out}/secret.txt"), final_link=True),
    Case("proc_root_dir_link", lambda ws, out: f"pr{out}/secret.txt",
         lambda ws, out: _link(ws, "pr", "/proc/self/root")),
    Case("proc_fd_link", lambda ws, out: "pfd", _proc_fd_link, final_link=True),
    Case("proc_fd_rel_link", lambda ws, out: "pfd_rel", _proc_fd_link, final_link=True),
]


def _sibling(ws: Path) -> None:
    backup = ws.parent / f"{ws.name}_backup"
    backup.mkdir()
    (backup / "secret.txt").write_text(SECRET + "\n")


def snapshot(tmp: Path, ws: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Everything under tmp except the workspace: (inode, mode, content)."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(tmp):
        if Path(dirpath) == tmp and ws.name in dirnames:
            dirnames.remove(ws.name)
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else None
            state[str(p)] = (st.st_ino, st.st_mode, data)
    return state


@contextmanager
def no_hang() -> Iterator[None]:
    def expire(*_: object) -> None:
        raise TimeoutError("the operation blocked")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(NO_HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(params=RESOLVERS)
def resolver(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def root(workspace: Path, resolver: str) -> Iterator[Root]:
    with Root(str(workspace), resolver=resolver) as r:
        assert r.resolver == resolver
        yield r


def _attempt(op: Op, root: Root, path: str) -> tuple[object, CorralError | None]:
    try:
        with no_hang():
            return op.run(root, path), None
    except CorralError as exc:
        return None, exc


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_escape(op: Op, case: Case, root: Root, workspace: Path, outside: Path, tmp_path: Path):
    case.setup(workspace, outside)
    path = case.path(workspace, outside)
    before = snapshot(tmp_path, workspace)
    result, error = _attempt(op, root, path)
    assert snapshot(tmp_path, workspace) == before
    assert not (outside / "new.txt").exists() and not (outside / "newdir").exists()
    assert SECRET not in repr(result)
    if error is not None:
        assert SECRET not in error.message
        assert str(tmp_path) in path or str(tmp_path) not in error.message
    if case.final_link and not op.follows_final:
        return  # acting on the link itself is fine; the invariants above still hold
    if case.missing and op.name.startswith("info") and result is None:
        return
    assert error is not None, f"{op.name} {path!r} returned {result!r}"
    if case.code != "*":
        assert error.code == case.code, error.to_dict()


BAD_PATHS = {
    "nul": "a\0b",
    "nul_dir": "sub\0/../hello.txt",
    "empty": "",
    "long_name": "x" * 256,
    "long_path": "a/" * 2100 + "x",
    "lone_surrogate": "bad\ud800name",
}


@pytest.mark.parametrize("bad", BAD_PATHS, ids=list(BAD_PATHS))
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_bad_path_is_invalid_arguments(op: Op, bad: str, root: Root, workspace: Path):
    before = sorted(os.listdir(workspace))
    _, error = _attempt(op, root, BAD_PATHS[bad])
    assert error is not None and error.code == "invalid_arguments", error
    assert "\0" not in error.message
    assert len(error.message) < 400
    assert sorted(os.listdir(workspace)) == before


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_chain_of_40_links_still_works(op: Op, root: Root, workspace: Path):
    """The cap is the kernel's: 40 links resolve, 41 (above) do not."""
    _chain(workspace, "c", 40, "hello.txt")
    (workspace / "sub").mkdir()
    _chain(workspace, "d", 40, "sub")
    assert root.read_bytes("c0", max_file_bytes=BIG) == b"hello\nworld\n"
    assert root.resolve("d0/x") == "sub/x"


def test_hard_link_out_append_refused_write_replaces(
    root: Root, workspace: Path, outside: Path
):
    secret = outside / "secret.txt"
    os.link(secret, workspace / "hl")
    ino = secret.stat().st_ino
    with pytest.raises(CorralError) as exc:
        root.append("hl", b"pwned", max_file_bytes=BIG)
    assert exc.value.code == "path_denied"
    root.write_atomic("hl", b"mine")
    assert secret.read_text() == SECRET + "\n" and secret.stat().st_ino == ino
    assert secret.stat().st_nlink == 1
    assert (workspace / "hl").read_bytes() == b"mine"


@pytest.mark.parametrize("name", ["fifo", "fifo_link"])
@pytest.mark.parametrize(
    "op", [o for o in OPS if o.name in {"read", "write", "write_versioned", "append"}],
    ids=lambda o: o.name,
)
def test_fifo_refused_without_hanging(op: Op, name: str, root: Root, workspace: Path):
    os.mkfifo(workspace / "fifo")
    _link(workspace, "fifo_link", "fifo")
    _, error = _attempt(op, root, name)
    assert error is not None and error.code == "not_a_regular_file", error
    assert (workspace / "fifo").is_fifo()


def test_fifo_listed_as_other(root: Root, workspace: Path):
    os.mkfifo(workspace / "fifo")
    with no_hang():
        assert {e.path: e.type for e in root.scandir(".")}["fifo"] == "other"
        assert root.info("fifo").type == "other"


def test_device_refused(resolver: str):
    with Root("/dev", mode="ro", resolver=resolver) as dev, no_hang():
        for name in [n for n in ("null", "zero", "tty") if os.path.exists(f"/dev/{n}")]:
            with pytest.raises(CorralError) as exc:
                dev.read_bytes(name, max_file_bytes=BIG)
            assert exc.value.code == "not_a_regular_file"


@pytest.mark.parametrize(
    "path", ["root/etc/hostname", "root", "cwd/x", "exe", "fd/{fd}/secret.txt"]
)
def test_proc_magic_links_beneath_a_root(path: str, resolver: str, outside: Path):
    """Magic links reachable beneath a root (here the root is /proc/self itself)."""
    fd = os.open(outside, os.O_PATH)
    try:
        with Root("/proc/self", mode="ro", resolver=resolver) as proc:
            with pytest.raises(CorralError) as exc:
                proc.read_bytes(path.format(fd=fd), max_file_bytes=BIG)
            assert exc.value.code == "outside_workspace"
            assert SECRET not in exc.value.message
    finally:
        os.close(fd)


def test_sibling_prefix_root_not_matched(workspace: Path, resolver: str):
    _sibling(workspace)
    with Root(str(workspace), resolver=resolver) as ws:
        roots = Roots(ws)
        for path in (f"{workspace}_backup/secret.txt", f"{workspace}_backup", f"{workspace}x"):
            with pytest.raises(CorralError) as exc:
                roots.locate(path)
            assert exc.value.code == "outside_workspace"
        r, rel = roots.locate(f"{workspace}/../{workspace.name}_backup/secret.txt")
        with pytest.raises(CorralError) as exc:
            r.read_bytes(rel, max_file_bytes=BIG)
        assert exc.value.code == "outside_workspace" and SECRET not in exc.value.message


def test_read_only_root_refuses_every_change(workspace: Path, resolver: str):
    before = snapshot(workspace.parent, Path("/nonexistent"))
    with Root(str(workspace), mode="ro", resolver=resolver) as ro:
        for op in OPS:
            if op.name in {"read", "info", "info_follow", "resolve", "resolve_nofollow",
                           "scandir", "walk"}:
                continue
            _, error = _attempt(op, ro, "hello.txt" if op.name != "rename_dst" else "new")
            assert error is not None and error.code == "read_only", (op.name, error)
    assert snapshot(workspace.parent, Path("/nonexistent")) == before


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_errors_do_not_tell_whether_outside_exists(
    op: Op, root: Root, workspace: Path, outside: Path
):
    """A path into something that exists outside and one into nothing answer alike."""
    for name, target in (("there", "secret.txt"), ("nothere", "missing.txt")):
        _link(workspace, f"{name}_rel", f"../outside/{target}")
        _link(workspace, f"{name}_abs", str(outside / target))
        _link(workspace, f"{name}_dir", f"../outside/{target}/..")
    for kind in ("rel", "abs", "dir"):
        # an op that acts on the final link itself never looks outside
        for suffix in ("", "/x") if op.follows_final else ("/x",):
            answers = []
            for name in ("there", "nothere"):
                result, error = _attempt(op, root, f"{name}_{kind}{suffix}")
                shown = error.to_dict() if error else result
                answers.append(repr(shown).replace(name, "NAME"))
            assert answers[0] == answers[1], (kind, suffix, answers)
