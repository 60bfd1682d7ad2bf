"""delete_directory at the edges a review found: a tree nested deeper than a worker
has fds for is refused as too_large, up front, nothing deleted; a file with a hard
link outside the tree is kept as a copy, so changing the other name leaves the
tree's undo whole."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from corral import Sandbox
from corral.fs import Root, Roots
from corral.fs.tree import MAX_TREE_DEPTH, remove
from corral.history import restore
from corral.history.keeper import Keeper
from corral.policy import Policy
from tests.helpers.calls import err, ok
from tests.helpers.history_helpers import promoted, work_store


def _nested(top: Path, depth: int) -> None:
    """`depth` directories one inside the next (through fds: the path gets long)."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth - 1):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)


def test_a_tree_deeper_than_a_worker_can_walk_is_too_large(ws: Path) -> None:
    """2000 levels: past the worker's open-file limit, once an io_error."""
    _nested(ws / "deep", 2000)
    try:
        with Sandbox(ws, policy=Policy({"delete_directory": "allow"})) as sb:
            error = err(sb, "delete_directory", path="deep", recursive=True)
            assert error["code"] == "too_large"
            assert f"nested over {MAX_TREE_DEPTH} deep" in error["message"]
            assert (ws / "deep" / "d").is_dir()
            ok(sb, "create_directory", path="after")  # the worker still works
    finally:  # shutil.rmtree (pytest's clean-up) recurses, past Python's limit here
        parent = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
        try:
            remove(parent, "deep")
        finally:
            os.close(parent)


def test_a_tree_at_the_depth_limit_goes_and_comes_back(ws: Path) -> None:
    _nested(ws / "deep", MAX_TREE_DEPTH)
    with Sandbox(ws, policy=Policy({"delete_directory": "allow"})) as sb:
        ok(sb, "delete_directory", path="deep", recursive=True)
        assert not (ws / "deep").exists()
        assert sb.undo("deep")["ok"]
    leaf = ws.joinpath("deep", *["d"] * (MAX_TREE_DEPTH - 1), "leaf")
    assert os.path.exists(leaf)


def test_a_hard_link_out_of_a_deleted_tree_does_not_spoil_its_undo(
    ws: Path, tmp_path: Path
) -> None:
    """Renamed into the store (no mount namespace), a file with another name outside
    the tree stays that inode: written in place through the other name, the kept
    tree no longer matches its record and the whole tree could not come back. Such
    a file is kept as a copy of its own."""
    (ws / "d").mkdir()
    (ws / "d" / "own.txt").write_text("mine\n")
    (ws / "shared.txt").write_text("v1\n")
    os.link(ws / "shared.txt", ws / "d" / "linked.txt")
    work, store = work_store(tmp_path / "store")
    with Root(str(ws)) as root:
        keeper = Keeper(store, str(ws), "delete_directory")
        root.remove_tree("d", recursive=True, keep=keeper)
    promoted(store, work, ws)
    with open(ws / "shared.txt", "r+") as shared:  # in place: same inode
        shared.write("v2\n")
    with Root(str(ws)) as root:
        result = restore.undo(Roots(root), store, Policy({"delete_directory": "allow"}),
                              _Limits(), "d", False)
    assert result["restored"] == ["d"], result
    assert (ws / "d" / "linked.txt").read_text() == "v1\n"
    assert (ws / "d" / "own.txt").read_text() == "mine\n"
    assert (ws / "shared.txt").read_text() == "v2\n"


class _Limits:
    max_file_bytes = 1 << 20


def test_a_removal_the_kernel_refuses_part_way_deletes_nothing(ws: Path) -> None:
    """Copied into the store, renamed aside, then removed: an entry the kernel will
    not unlink (immutable) stops the removal part-way. The directory was gone from
    its path (under a hidden temp name, partly removed) and its record dropped: no
    undo. It is put back whole, at its path, and the call fails naming it."""
    top = ws / "imm"
    (top / "sub").mkdir(parents=True)
    (top / "a.txt").write_text("alpha\n")
    (top / "sub" / "b.txt").write_text("beta\n")
    (top / "sub" / "c.txt").write_text("gamma\n")
    (top / "z.txt").write_text("zeta\n")
    for n in range(20):  # so that, whatever the listing order, some go before c.txt stops it
        (top / f"f{n}").write_text(f"{n}\n")
        (top / "sub" / f"g{n}").write_text(f"{n}\n")
    (top / "sub").chmod(0o750)
    before = {str(p.relative_to(ws)): (p.stat().st_mode, p.is_file() and p.read_text())
              for p in sorted(top.rglob("*"))}
    _immutable(top / "sub" / "c.txt")
    try:
        with Sandbox(ws, policy=Policy({"delete_directory": "allow"})) as sb:
            error = err(sb, "delete_directory", path="imm", recursive=True)
            assert error["code"] == "path_denied"
            assert "imm" in error["message"]
            assert sb.history("imm") == [] or all(
                entry["tool"] != "delete_directory" for entry in sb.history("imm"))
    finally:  # wherever it lies now
        subprocess.run(["chattr", "-R", "-i", str(ws)], capture_output=True)
    assert sorted(p.name for p in ws.iterdir()) == ["imm"]
    after = {str(p.relative_to(ws)): (p.stat().st_mode, p.is_file() and p.read_text())
             for p in sorted(top.rglob("*"))}
    assert after == before


def _immutable(path: Path) -> None:
    """chattr +i: the kernel then refuses to unlink it (EPERM), even to root."""
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if done.returncode:
        pytest.skip(f"chattr +i is not available here: {done.stderr.decode().strip()}")
