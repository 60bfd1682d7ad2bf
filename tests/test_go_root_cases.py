"""Go's os.Root case table (`rootTestCases`, golang/go src/os/root_test.go),
ported and run against both resolvers through the Root operations that match
Go's: Open (read_bytes, scandir), Create (write_atomic), Mkdir, Remove
(unlink), Stat/Lstat (info), Rename from and to.

Layout strings as in Go: "d/" a directory, "f" a file, "a => b" a symlink;
$ABS is the root's absolute path. The root directory is named ROOT.

Where corral differs from Go, and why:
- Absolute symlinks are refused (outside_workspace) even when they point
  inside the root, as RESOLVE_BENEATH does; Go refuses them too.
- `../ROOT/target` and `a/../../ROOT/target` are refused although they land
  inside: `..` may never climb above the root. Go agrees.
- Stat/Lstat of a missing path answer None (stat_file reports exists=false)
  instead of an error; the port counts None as Go's ErrNotExist.
- Create and Mkdir are called with make_parents/parents=False for Go's
  semantics; corral's defaults create missing parents.
- Remove is unlink: regular files and symlinks only (Go's Remove also
  removes empty directories); the table only removes files and links.
- Rename-to uses overwrite=True (Go's Rename replaces the destination);
  corral's default is RENAME_NOREPLACE.
- Mkdir on an existing symlink to a directory would answer "already there"
  (False) rather than Go's error; no case in the table does that.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.errors import CorralError
from corral.fs import Root

BIG = 1 << 20
CONTENT = b"target"


@dataclass(frozen=True)
class Case:
    name: str
    fs: tuple[str, ...]
    open: str
    target: str = ""  # the file reached after all symlinks ("" if none)
    ltarget: str = ""  # the final link itself, when the last component is one
    want_error: bool = False


CASES = [
    Case("plain path", (), "target", "target"),
    Case("path in directory", ("a/b/c/",), "a/b/c/target", "a/b/c/target"),
    Case("symlink", ("link => target",), "link", "target", "link"),
    Case("symlink dotdot slash", ("link => ../",), "link", ltarget="link", want_error=True),
    Case("symlink ending in slash", ("dir/", "link => dir/"), "link/target", "dir/target"),
    Case("slash after symlink to file", ("link => ../ROOT/target",), "link/", "target",
         want_error=True),
    Case("slash after symlink to dir", ("link => ../ROOT/target", "target/"), "link/",
         want_error=True),
    Case("symlink dotdot dotdot slash", ("dir/link => ../../",), "dir/link", ltarget="dir/link",
         want_error=True),
    Case("symlink chain",
         ("link => a/b/c/target", "a/b => e", "a/e => ../f", "f => g/h/i", "g/h/i => ..", "g/c/"),
         "link", "g/c/target", "link"),
    Case("path with dot", ("a/b/",), "./a/./b/./target", "a/b/target"),
    Case("path with dotdot", ("a/b/",), "a/../a/b/../../a/b/../b/target", "a/b/target"),
    Case("path with dotdot slash", (), "../", want_error=True),
    Case("path with dotdot dotdot slash", ("a/",), "a/../../", want_error=True),
    Case("dotdot no symlink", ("a/",), "a/../target", "target"),
    Case("dotdot after symlink", ("a => b/c", "b/c/"), "a/../target", "b/target"),
    Case("dotdot before symlink", ("a => b/c", "b/c/"), "b/../a/target", "b/c/target"),
    Case("symlink ends in dot", ("a => b/.", "b/"), "a/target", "b/target"),
    Case("directory does not exist", (), "a/file", want_error=True),
    Case("empty path", (), "", want_error=True),
    Case("symlink cycle", ("a => a",), "a", ltarget="a", want_error=True),
    Case("path escapes", (), "../ROOT/target", "target", want_error=True),
    Case("long path escapes", ("a/",), "a/../../ROOT/target", "target", want_error=True),
    Case("absolute symlink", ("link => $ABS/target",), "link", "target", "link", want_error=True),
    Case("relative symlink", ("link => ../ROOT/target",), "link", "target", "link",
         want_error=True),
    Case("symlink chain escapes",
         ("link => a/b/c/target", "a/b => e", "a/e => ../../ROOT", "c/"),
         "link", "c/target", "link", want_error=True),
]


def makefs(base: Path, layout: tuple[str, ...]) -> Path:
    root = base / "ROOT"
    root.mkdir()
    for entry in layout:
        entry = entry.replace("$ABS", str(root))
        name, _, link = entry.partition(" => ")
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if link:
            os.symlink(link, root / name)
        elif name.endswith("/"):
            (root / name).mkdir(parents=True, exist_ok=True)
        else:
            (root / name).write_bytes(name.encode())
    return root


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=CASES, ids=lambda c: c.name)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


@pytest.fixture
def tree(tmp_path: Path, case: Case) -> Path:
    return makefs(tmp_path, case.fs)


@pytest.fixture
def root(tree: Path, resolver: str) -> Iterator[Root]:
    with Root(str(tree), resolver=resolver) as r:
        yield r


def outcome(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """(result, None) or (None, CorralError); any other exception fails the test."""
    try:
        return fn(*args, **kwargs), None
    except CorralError as exc:
        return None, exc


def expect(error: CorralError | None, want_error: bool, what: str) -> bool:
    """True when the test is over because the expected error came."""
    if want_error:
        assert error is not None, f"{what}: want an error"
        assert error.code in {
            "outside_workspace", "symlink_loop", "not_found", "invalid_arguments",
            "not_a_directory", "already_exists", "is_a_directory",
        }, error.to_dict()
        return True
    assert error is None, f"{what}: {error.to_dict() if error else ''}"
    return False


def test_open_file(case: Case, root: Root, tree: Path):
    if case.target:
        (tree / case.target).write_bytes(CONTENT)
    got, error = outcome(root.read_bytes, case.open, max_file_bytes=BIG)
    if not expect(error, case.want_error, f"read {case.open!r}"):
        assert got == CONTENT


def test_open_directory(case: Case, root: Root, tree: Path):
    if case.target:
        (tree / case.target).mkdir()
        (tree / case.target / "found").write_bytes(b"")
    got, error = outcome(root.scandir, case.open)
    if not expect(error, case.want_error, f"scandir {case.open!r}"):
        assert [e.path for e in got] == ["found"]


def test_create(case: Case, root: Root, tree: Path):
    _, error = outcome(root.write_atomic, case.open, CONTENT, make_parents=False)
    if not expect(error, case.want_error, f"write {case.open!r}"):
        assert (tree / case.target).read_bytes() == CONTENT
    assert not (tree.parent / "target").exists()


def test_mkdir(case: Case, root: Root, tree: Path):
    want_error = case.want_error or bool(case.ltarget)  # mkdir over a link: error, no escape
    _, error = outcome(root.mkdir, case.open, parents=False)
    if not expect(error, want_error, f"mkdir {case.open!r}"):
        assert (tree / case.target).is_dir() and not (tree / case.target).is_symlink()


def test_remove(case: Case, root: Root, tree: Path):
    want_error, gone = case.want_error, tree / case.target
    if case.ltarget:  # the final link itself is removed
        want_error, gone = False, tree / case.ltarget
    elif case.target:
        (tree / case.target).write_bytes(b"")
    _, error = outcome(root.unlink, case.open)
    if not expect(error, want_error, f"unlink {case.open!r}"):
        assert not os.path.lexists(gone)
    if case.want_error and case.target and not case.ltarget:
        assert (tree / case.target).exists()


def test_stat(case: Case, root: Root, tree: Path):
    if case.target:
        (tree / case.target).write_bytes(b"content")
    got, error = outcome(root.info, case.open, follow=True)
    if got is None and error is None:
        error = CorralError("not_found", "missing")
    if not expect(error, case.want_error, f"stat {case.open!r}"):
        assert got.type == "file" and got.size == len(b"content")


def test_lstat(case: Case, root: Root, tree: Path):
    want_error = case.want_error and not case.ltarget
    if not case.ltarget and case.target:
        (tree / case.target).write_bytes(b"content")
    got, error = outcome(root.info, case.open)
    if got is None and error is None:
        error = CorralError("not_found", "missing")
    if not expect(error, want_error, f"lstat {case.open!r}"):
        if case.ltarget:
            assert got.type == "symlink"
        else:
            assert got.type == "file" and got.size == len(b"content")


def test_rename_from(case: Case, root: Root, tree: Path):
    if case.target:
        (tree / case.target).write_bytes(CONTENT)
    want_error = case.want_error and not case.ltarget
    link = os.readlink(tree / case.ltarget) if case.ltarget else None
    _, error = outcome(root.rename, case.open, root, "destination")
    if expect(error, want_error, f"rename {case.open!r}"):
        return
    dest = tree / "destination"
    if case.ltarget:
        assert os.readlink(dest) == link and not os.path.lexists(tree / case.ltarget)
    else:
        assert dest.read_bytes() == CONTENT and not dest.is_symlink()
        assert not os.path.lexists(tree / case.target)


def test_rename_to(case: Case, root: Root, tree: Path):
    (tree / "source").write_bytes(CONTENT)
    target, want_error = case.target, case.want_error
    if case.ltarget:  # the final link is replaced, not followed
        target, want_error = case.ltarget, False
    _, error = outcome(root.rename, "source", root, case.open, overwrite=True)
    if expect(error, want_error, f"rename to {case.open!r}"):
        assert (tree / "source").read_bytes() == CONTENT
        return
    assert not (tree / "source").exists()
    assert (tree / target).read_bytes() == CONTENT


def test_resolve(case: Case, root: Root):
    got, error = outcome(root.resolve, case.open)
    if case.want_error:
        assert error is not None or case.name == "directory does not exist"
    elif case.target:
        assert error is None and got == case.target
