"""delete_directory: off by default; a non-empty directory only with recursive; every
entry decided by the policy before anything goes; symlinks removed as links; one
history record that the host checks and that undo restores whole."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.errors import CorralError
from corral.fs import Root, Roots
from corral.history import keeper as keeper_module
from corral.history import recover, restore, revert
from corral.history.keeper import Keeper
from corral.history.records import BadRecord
from corral.history.store import Store
from corral.policy import Policy, Rule
from tests.helpers.calls import err, ok
from tests.helpers.history_helpers import (
    commit_done,
    die_after,
    left,
    promoted,
    renames_into_the_store_cross_mounts,
    settled,
    snapshot,
    work_store,
)

ON = {"delete_directory": "allow"}


def _tree(ws: Path) -> None:
    (ws / "d" / "sub" / "deep").mkdir(parents=True)
    (ws / "d" / "a.txt").write_text("alpha\n")
    (ws / "d" / "sub" / "deep" / "b.sh").write_text("#!/bin/sh\n")
    (ws / "d" / "sub" / "deep" / "b.sh").chmod(0o750)
    (ws / "d" / "sub").chmod(0o700)


@pytest.fixture
def tree_sb(ws: Path) -> Iterator[Sandbox]:
    _tree(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        yield sandbox


def test_it_is_off_by_default(sb: Sandbox, ws: Path) -> None:
    (ws / "d").mkdir()
    error = err(sb, "delete_directory", path="d")
    assert error["code"] == "tool_disabled"
    assert "delete_directory = \"allow\"" in error["message"]
    assert (ws / "d").is_dir()
    assert "delete_directory" not in [spec["name"] for spec in sb.tools()]


def test_an_empty_directory_goes_without_recursive(tree_sb: Sandbox, ws: Path) -> None:
    (ws / "empty").mkdir()
    response = ok(tree_sb, "delete_directory", path="empty")
    assert response["result"] == {"path": "empty", "deleted": True, "entries_removed": 0}
    assert not (ws / "empty").exists()


def test_a_non_empty_one_needs_recursive_and_nothing_goes(tree_sb: Sandbox, ws: Path) -> None:
    before = snapshot(ws)
    error = err(tree_sb, "delete_directory", path="d", recursive=None)
    assert error["code"] == "invalid_arguments"
    assert "recursive: true" in error["message"] and "4 entries" in error["message"]
    assert snapshot(ws) == before


def test_recursive_deletes_the_tree_and_undo_restores_it_whole(
    tree_sb: Sandbox, ws: Path
) -> None:
    before = snapshot(ws)
    response = ok(tree_sb, "delete_directory", path="d", recursive=True)
    assert response["result"]["entries_removed"] == 4
    assert "4 entries" in response["text"]
    assert not (ws / "d").exists()
    (record,) = [r for r in tree_sb.history() if r["tool"] == "delete_directory"]
    assert record["path"] == "d" and record["action"] == "delete"
    assert record["before"] == {"type": "dir", "mode": 0o755, "entries": 4}
    assert tree_sb.history("d/sub/deep/b.sh")[0]["id"] == record["id"]
    undone = tree_sb.undo("d")
    assert undone["ok"] and undone["result"]["restored"] == ["d"], undone
    assert snapshot(ws) == before  # files, bytes, directories and modes


def test_undo_of_any_path_beneath_puts_the_whole_tree_back(tree_sb: Sandbox, ws: Path) -> None:
    before = snapshot(ws)
    ok(tree_sb, "delete_directory", path="d", recursive=True)
    undone = tree_sb.undo("d/sub/deep/b.sh")
    assert undone["ok"] and undone["result"]["restored"] == ["d"], undone
    assert snapshot(ws) == before


@pytest.mark.parametrize("path", [".", "./", "sub/.."])
def test_the_root_is_never_deleted(tree_sb: Sandbox, ws: Path, path: str) -> None:
    (ws / "sub").mkdir()
    error = err(tree_sb, "delete_directory", path=path, recursive=True)
    assert error["code"] == "invalid_arguments", error
    assert (ws / "d" / "a.txt").exists()


def test_a_file_or_a_symlink_is_not_a_directory(tree_sb: Sandbox, ws: Path) -> None:
    (ws / "link").symlink_to("d")
    assert err(tree_sb, "delete_directory", path="d/a.txt")["code"] == "not_a_directory"
    error = err(tree_sb, "delete_directory", path="link", recursive=True)
    assert error["code"] == "not_a_directory" and "delete_file" in error["message"]
    assert err(tree_sb, "delete_directory", path="nope")["code"] == "not_found"
    assert (ws / "d" / "a.txt").exists()


def test_a_denied_entry_beneath_means_nothing_is_deleted(ws: Path) -> None:
    _tree(ws)
    (ws / "d" / "sub" / ".env").write_text("KEY=1\n")
    before = snapshot(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:  # the built-in rules deny .env
        error = err(sandbox, "delete_directory", path="d", recursive=True)
    assert error["code"] == "path_denied"
    assert "d/sub/.env" in error["message"] and error.get("rule")
    assert snapshot(ws) == before


def test_corral_toml_beneath_is_protected(ws: Path) -> None:
    (ws / "sub" / "inner").mkdir(parents=True)
    (ws / "sub" / "inner" / "corral.toml").write_text("")
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        assert err(sandbox, "delete_directory", path="sub", recursive=True)["code"] == (
            "path_denied")
    assert (ws / "sub" / "inner" / "corral.toml").exists()


def test_supervised_entries_are_asked_about_once_together(ws: Path) -> None:
    _tree(ws)
    (ws / "d" / "x.lock").write_text("")
    asked: list[dict[str, Any]] = []

    def approve(request: dict[str, Any]) -> bool:
        asked.append(request)
        return True

    policy = Policy(ON, rules=(Rule("ask-sh", "supervised", ("*",), ("**/*.sh", "**/*.lock")),))
    with Sandbox(ws, policy=policy, approve=approve) as sandbox:
        ok(sandbox, "delete_directory", path="d", recursive=True)
    assert len(asked) == 1
    assert sorted(asked[0]["paths"]) == ["d/sub/deep/b.sh", "d/x.lock"]
    assert not (ws / "d").exists()


def test_a_denied_approval_deletes_nothing(ws: Path) -> None:
    _tree(ws)
    before = snapshot(ws)
    policy = Policy(ON, rules=(Rule("ask-sh", "supervised", ("*",), ("**/*.sh",)),))
    with Sandbox(ws, policy=policy, approve=lambda request: False) as sandbox:
        assert err(sandbox, "delete_directory", path="d", recursive=True)["code"] == (
            "approval_denied")
    assert snapshot(ws) == before


def test_the_tools_supervised_mode_asks_once_for_the_directory(ws: Path) -> None:
    _tree(ws)
    asked: list[dict[str, Any]] = []
    policy = Policy({"delete_directory": "supervised"})
    with Sandbox(ws, policy=policy, approve=lambda r: asked.append(r) or True) as sandbox:
        ok(sandbox, "delete_directory", path="d", recursive=True)
    assert [request["paths"] for request in asked] == [["d"]]


def test_a_fifo_beneath_is_refused(tree_sb: Sandbox, ws: Path) -> None:
    os.mkfifo(ws / "d" / "pipe")
    error = err(tree_sb, "delete_directory", path="d", recursive=True)
    assert error["code"] == "not_a_regular_file" and "d/pipe" in error["message"]
    assert (ws / "d" / "a.txt").exists()


def test_without_history_a_symlink_inside_goes_as_a_link(ws: Path, tmp_path: Path) -> None:
    """The kernel test: a link to a directory outside the roots, inside the tree, is
    removed as a link by a confined worker; what it points to stays."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    _tree(ws)
    (ws / "d" / "out").symlink_to(outside)
    (ws / "d" / "sub" / "rel").symlink_to("../a.txt")
    config = ws / "corral.toml"
    config.write_text('[tools]\ndelete_directory = "allow"\n[history]\nenabled = false\n')
    with Sandbox.from_config(config) as sandbox:
        assert sandbox.confinement["landlock_abi"]  # the worker is really confined
        ok(sandbox, "delete_directory", path="d", recursive=True)
    assert not (ws / "d").exists()
    assert (outside / "keep.txt").read_text() == "keep"


@pytest.mark.parametrize("history", ["true", "false"])
def test_a_path_racing_into_a_symlink_never_deletes_outside(
    ws: Path, tmp_path: Path, history: str
) -> None:
    """Another process swaps the directory for a symlink to a directory outside the
    roots, over and over, while the tool deletes it: nothing outside is touched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            for make in (lambda p: p.mkdir(), lambda p: p.symlink_to(outside)):
                with contextlib.suppress(FileExistsError):
                    make(ws / "t")
                with contextlib.suppress(OSError):  # a directory: rmdir'd below
                    os.unlink(ws / "t")
                with contextlib.suppress(OSError):
                    os.rmdir(ws / "t")

    thread = threading.Thread(target=swap)
    config = ws / "corral.toml"
    config.write_text(f'[tools]\ndelete_directory = "allow"\n[history]\nenabled = {history}\n')
    with Sandbox.from_config(config) as sandbox:
        thread.start()
        try:
            codes = {sandbox.call("delete_directory", {"path": "t", "recursive": True}).get(
                "error", {}).get("code", "ok") for _ in range(60)}
        finally:
            stop.set()
            thread.join()
    assert codes <= {"ok", "not_found", "not_a_directory", "conflict"}, codes
    assert (outside / "keep.txt").read_text() == "keep"


# -- history: the record, the host's checks, settle -------------------------------


def _keeper_delete(ws: Path, store: Store, rel: str) -> list[str]:
    """delete_directory's change, made in-process (no mount namespace: the tree is
    renamed into the store, symlinks and all); the ids of its records."""
    with Root(str(ws)) as root:
        keeper = Keeper(store, str(ws), "delete_directory")
        root.remove_tree(rel, recursive=True, keep=keeper)
        return keeper.ids


def _undo(ws: Path, store: Store, path: str) -> dict[str, Any]:
    with Root(str(ws)) as root:
        return restore.undo(Roots(root), store, Policy(ON), _Limits(), path, False)


def _settle(ws: Path, store: Store) -> int:
    with Root(str(ws)) as root:
        restorer = revert.Restorer(Roots(root), store, Policy(ON), 1 << 20, "settle")
        with store.settling():
            return recover.settle(restorer, None)


class _Limits:
    max_file_bytes = 1 << 20


def test_a_renamed_tree_keeps_its_symlinks_and_comes_back(ws: Path, tmp_path: Path) -> None:
    _tree(ws)
    (ws / "d" / "sub" / "rel").symlink_to("../a.txt")
    (ws / "d" / "out").symlink_to("/etc/passwd")
    before = snapshot(ws)
    work, store = work_store(tmp_path / "store")
    assert len(_keeper_delete(ws, store, "d")) == 1  # one record
    assert not (ws / "d").exists()
    promoted(store, work, ws)
    result = _undo(ws, store, "d")
    assert result["restored"] == ["d"] and result["links"] == [], result
    assert snapshot(ws) == before


def _pending_record(work: Path) -> tuple[Path, dict[str, Any]]:
    (done,) = work.glob("r-*.done")
    return done, json.loads(done.read_bytes())


@pytest.mark.parametrize(
    "forgery", ["outside", "extra", "swapped", "symlink", "entry_dotdot", "absolute", "hashed"])
def test_a_forged_directory_delete_is_refused(
    ws: Path, tmp_path: Path, forgery: str
) -> None:
    _tree(ws)
    work, store = work_store(tmp_path / "store")
    _keeper_delete(ws, store, "d")
    done, record = _pending_record(work)
    entry = record["entries"][0]
    (kept,) = work.glob("b-*")
    if forgery == "outside":
        entry["rel"] = "../elsewhere"
    elif forgery == "entry_dotdot":
        entry["before"]["tree"][0][0] = "../x"
    elif forgery == "absolute":
        entry["before"]["tree"][0][0] = "/a.txt"
    elif forgery == "hashed":  # only the host hashes the kept files
        entry["before"]["tree"][0].append("0" * 24)
    elif forgery == "extra":
        (kept / "planted.txt").write_text("not deleted from the workspace")
    elif forgery == "swapped":  # another tree in its place
        shutil.rmtree(kept)
        (kept / "etc").mkdir(parents=True)
        (kept / "etc" / "passwd").write_text("root::0:0::/:/bin/sh\n")
    else:
        (kept / "a.txt").unlink()
        (kept / "a.txt").symlink_to("/etc/passwd")
    done.write_text(json.dumps(record))
    refused = commit_done(store, work, ws)
    assert list(refused) == [done.name], refused
    assert store.listing().records == []
    assert not list(work.glob("b-*"))  # dropped with its record


def _copied_delete(ws: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """delete_directory's change as a confined worker makes it: the store on another
    mount (EXDEV), the tree copied in without its symlinks."""
    real = os.rename

    def rename(src: Any, dst: Any, *, src_dir_fd: Any = None, dst_dir_fd: Any = None) -> None:
        if str(dst).startswith("b-"):
            raise OSError(errno.EXDEV, "cross-device")
        real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    with monkeypatch.context() as patched:
        patched.setattr(keeper_module.os, "rename", rename)
        _keeper_delete(ws, store, "d")


def _links_tree(ws: Path) -> None:
    _tree(ws)
    for path, target in LINKS.items():
        (ws / path).symlink_to(target)


@pytest.mark.parametrize("forgery", ["dotdot", "absolute", "no_parent", "over_a_file",
                                     "one_kept", "kept_elsewhere"])
def test_a_forged_record_of_a_tree_with_links_is_refused(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forgery: str
) -> None:
    """The host checks a copied tree's record as any other: a link entry must name a
    plain path beneath the directory, below a listed directory, where the kept tree
    holds nothing; and the kept tree holds all its links or none."""
    _links_tree(ws)
    work, store = work_store(tmp_path / "store")
    _copied_delete(ws, store, monkeypatch)
    done, record = _pending_record(work)
    tree = record["entries"][0]["before"]["tree"]
    (kept,) = work.glob("b-*")
    link = ["x", "symlink", 0o777, "/etc/passwd"]
    if forgery == "dotdot":
        tree.append(["../x", *link[1:]])
    elif forgery == "absolute":
        tree.append(["/x", *link[1:]])
    elif forgery == "no_parent":
        tree.append(["nodir/x", *link[1:]])
    elif forgery == "over_a_file":  # a.txt, kept as a file, claimed to be a link
        tree[:] = [["a.txt", *link[1:]] if kept[0] == "a.txt" else kept for kept in tree]
    elif forgery == "one_kept":  # one link put in the kept tree, the others not
        (kept / "out").symlink_to("/etc/passwd")
    else:  # a link kept at a path the record does not list
        (kept / "sub" / "other").symlink_to("../a.txt")
    done.write_text(json.dumps(record))
    refused = commit_done(store, work, ws)
    assert list(refused) == [done.name], refused
    assert store.listing().records == []


def test_a_claimed_link_is_only_shown(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link the record claims and the kept tree lacks cannot be checked (it is
    gone): the undo asks the host to make it with the record's target, as text
    (tests/test_delete_directory_links.py: such a link leads nowhere outside)."""
    _links_tree(ws)
    before = snapshot(ws)
    work, store = work_store(tmp_path / "store")
    _copied_delete(ws, store, monkeypatch)
    done, record = _pending_record(work)
    record["entries"][0]["before"]["tree"].append(["sub/zz", "symlink", 0o777, "/etc/shadow"])
    done.write_text(json.dumps(record))
    promoted(store, work, ws)
    undone = _undo(ws, store, "d")
    assert undone["restored"] == ["d"] and undone["conflicts"] == []
    assert {link["path"] for link in undone["links"]} == {*LINKS, "d/sub/zz"}
    assert snapshot(ws) == {path: was for path, was in before.items() if path not in LINKS}


def test_a_removal_the_kernel_stops_puts_back_all_but_the_links_it_took(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry the kernel refuses to remove (immutable, say) stops the removal of
    the copied tree: its files come back from the store's copy, nothing is
    recorded, and a link already gone, which no worker can make again, is named
    with its target in the error."""
    _links_tree(ws)
    before = snapshot(ws)
    work, store = work_store(tmp_path / "store")

    def refused(dir_fd: int, name: str) -> None:
        os.unlink(f"{name}/out", dir_fd=dir_fd)
        os.unlink(f"{name}/a.txt", dir_fd=dir_fd)
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(keeper_module, "remove", refused)
    with pytest.raises(CorralError) as raised:
        _copied_delete(ws, store, monkeypatch)
    assert raised.value.code == "io_error"
    assert "d/out -> /etc/passwd" in raised.value.message and "d/gone" not in (
        raised.value.message)
    assert snapshot(ws) == {path: was for path, was in before.items() if path != "d/out"}
    assert left(work, ".pending", ".done") == [] and not list(work.glob("b-*"))


def test_a_kept_tree_changed_after_it_was_committed_is_not_put_back(
    ws: Path, tmp_path: Path
) -> None:
    _tree(ws)
    work, store = work_store(tmp_path / "store")
    _keeper_delete(ws, store, "d")
    promoted(store, work, ws)
    (kept,) = work.parent.glob("k-*/b-*")
    (kept / "a.txt").write_text("ALPHA\n")  # same size, other bytes
    result = _undo(ws, store, "d")
    assert result["conflicts"] == ["d"]
    assert "damaged or was replaced" in result["reasons"]["d"]
    assert not (ws / "d").exists()


def test_settle_keeps_a_delete_that_landed_and_forgets_one_that_did_not(
    ws: Path, tmp_path: Path
) -> None:
    """A kill between the record and the rename leaves the tree where it was: the
    record is forgotten. A kill after the rename, before the commit: the record is
    committed, and undo puts the tree back. All or nothing, either way."""
    _tree(ws)
    before = snapshot(ws)
    work, store = work_store(tmp_path / "store")
    _keeper_delete(ws, store, "d")
    done, record = _pending_record(work)
    pending = done.with_suffix(".pending")
    # a dead writer's pending record whose change landed
    done.rename(pending)
    assert _settle(ws, store) == 1
    promoted(store, work, ws)
    assert _undo(ws, store, "d")["restored"] == ["d"]
    assert snapshot(ws) == before
    # one whose change never landed: the tree is still there
    pending.write_text(json.dumps(record))
    (work / record["entries"][0]["before"]["blob"]).mkdir()
    assert _settle(ws, store) == 1
    assert not pending.exists() and not list(work.glob("b-*"))
    assert snapshot(ws) == before


def test_undo_through_the_sandbox_leaves_a_taken_name_alone(
    ws: Path, tmp_path: Path
) -> None:
    """Through the confined workers (their mount namespace makes the store another
    mount: the tree is copied in and copied back)."""
    _tree(ws)
    before = snapshot(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        ok(sandbox, "delete_directory", path="d", recursive=True)
        (ws / "d").mkdir()  # something else there now: a conflict, left alone
        assert sandbox.undo("d")["result"]["conflicts"] == ["d"]
        (ws / "d").rmdir()
        assert sandbox.undo("d")["result"]["restored"] == ["d"]
    assert snapshot(ws) == before


def test_without_a_keeper_the_tree_is_removed_through_fds(ws: Path) -> None:
    """Root.remove_tree without a keeper (history off) removes through fds."""
    _tree(ws)
    with Root(str(ws)) as root:
        assert root.remove_tree("d", recursive=True) == 4
    assert not (ws / "d").exists()


def test_through_the_mcp_sdk_client(ws: Path, tmp_path: Path) -> None:
    from tests.helpers.mcp_helpers import run_session, structured, write_config

    _tree(ws)
    extra = write_config(tmp_path, '[tools]\ndelete_directory = "allow"\n')

    async def body(session: Any) -> None:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        spec = tools["delete_directory"]
        assert spec.title == "Delete directory" and spec.output_schema is not None
        assert spec.annotations.destructive_hint is True
        refused = await session.call_tool("delete_directory", {"path": "d"})
        assert refused.is_error and structured(refused)["error"]["code"] == "invalid_arguments"
        done = await session.call_tool("delete_directory", {"path": "d", "recursive": True})
        assert not done.is_error
        assert structured(done) == {"path": "d", "deleted": True, "entries_removed": 4,
                                    "text": "Deleted d and the 4 entries beneath it."}

    run_session(ws, body, extra=extra)
    assert not (ws / "d").exists()


# -- a kill at each instant of a recorded delete ------------------------------------


_across_mounts = renames_into_the_store_cross_mounts  # its short name in the table below


def _die_half_removed() -> None:
    renames_into_the_store_cross_mounts()

    def remove(dir_fd: int, name: str) -> None:
        os.unlink(f"{name}/a.txt", dir_fd=dir_fd)
        os._exit(9)

    keeper_module.remove = remove  # type: ignore[assignment]


def _die_before_commit() -> None:
    Store.commit = lambda *args, **kwargs: os._exit(9)  # type: ignore[method-assign]


TREE_CRASHES: dict[str, Callable[[], None]] = {
    "record written": lambda: die_after(Store, "write_pending"),
    "renamed in": lambda: die_after(keeper_module.os, "rename"),
    "renamed in, not committed": _die_before_commit,
    "copied in": lambda: (_across_mounts(), die_after(keeper_module, "copy_tree")),
    "renamed aside": lambda: (_across_mounts(), die_after(keeper_module, "renameat2")),
    "half removed": _die_half_removed,
    "copied, not committed": lambda: (_across_mounts(), _die_before_commit()),
}


# the crash points where the tree is copied into the store, its symlinks left out
COPIED = ("copied in", "renamed aside", "half removed", "copied, not committed")
LINKS = {"d/sub/rel": "../a.txt", "d/out": "/etc/passwd", "d/gone": "no/such/file"}


@pytest.mark.parametrize("links", [False, True], ids=["files", "links"])
@pytest.mark.parametrize("point", list(TREE_CRASHES))
def test_a_kill_at_every_instant_of_a_directory_delete(
    tmp_path: Path, point: str, links: bool
) -> None:
    """All or nothing: the directory whole where it was and no record, or gone and
    one record whose undo puts every entry back (a copied tree's symlinks: listed,
    not made); no temp directory left."""
    ws, work = tmp_path / "ws", tmp_path / "store" / "w-test"
    ws.mkdir()
    work.mkdir(parents=True)
    _tree(ws)
    for path, target in LINKS.items() if links else ():
        (ws / path).symlink_to(target)
    before = snapshot(ws)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child dies at the crash point
        try:
            TREE_CRASHES[point]()
            with Root(str(ws)) as root:
                root.remove_tree("d", recursive=True,
                                 keep=Keeper(Store.open(str(work)), str(ws), "delete_directory"))
        finally:
            os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 9  # died there
    store = settled(ws, work, [pid])
    assert left(work, ".pending", ".done") == []
    assert not list(ws.rglob(".corral-tmp-*"))
    assert (snapshot(ws) == before) == (point in ("record written", "copied in"))
    if snapshot(ws) == before:
        assert store.listing().records == [] and not list(work.glob("b-*"))
        return
    assert not (ws / "d").exists()
    assert len(store.listing().records) == 1
    undone = _undo(ws, store, "d")
    assert undone["restored"] == ["d"]
    unkept = {link["path"] for link in undone["links"]}  # for the host to make
    assert unkept == (set(LINKS) if links and point in COPIED else set())
    assert snapshot(ws) == {path: was for path, was in before.items() if path not in unkept}


def test_more_supervised_entries_than_one_request_asks_about(ws: Path) -> None:
    from corral.tools.access import MAX_ASKED_ENTRIES

    (ws / "d").mkdir()
    for i in range(MAX_ASKED_ENTRIES + 1):
        (ws / "d" / f"{i}.lock").write_text("")
    asked: list[Any] = []
    policy = Policy(ON, rules=(Rule("ask-lock", "supervised", ("*",), ("**/*.lock",)),))
    with Sandbox(ws, policy=policy, approve=lambda r: asked.append(r) or True) as sandbox:
        error = err(sandbox, "delete_directory", path="d", recursive=True)
    assert error["code"] == "approval_required" and "101 entries" in error["message"]
    assert asked == [] and len(list((ws / "d").iterdir())) == MAX_ASKED_ENTRIES + 1


def test_a_read_only_root_is_refused(ws: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "d").mkdir(parents=True)
    config = ws / "corral.toml"
    config.write_text('[tools]\ndelete_directory = "allow"\n[workspace]\n'
                      f'allowed_paths = [{{ path = "{data}", mode = "ro" }}]\n')
    with Sandbox.from_config(config) as sandbox:
        assert err(sandbox, "delete_directory", path=f"{data}/d")["code"] == "read_only"
    assert (data / "d").is_dir()


def _changed_after_the_rename(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> None:
    """The kept tree differs from its survey (another process added a file between
    the two), found once it was renamed into the store; `then` runs first."""
    real = keeper_module.check_kept
    calls: list[int] = []

    def check_kept(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(1)
            then()
            raise BadRecord("changed")
        return real(*args, **kwargs)

    monkeypatch.setattr(keeper_module, "check_kept", check_kept)


def test_a_tree_changed_while_renamed_goes_back(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(ws)
    before = snapshot(ws)
    work, store = work_store(tmp_path / "store")
    _changed_after_the_rename(monkeypatch, lambda: None)
    with pytest.raises(CorralError) as caught:
        _keeper_delete(ws, store, "d")
    assert caught.value.code == "conflict"
    assert snapshot(ws) == before
    assert not list(work.iterdir())  # no record, no blob


def test_a_tree_changed_whose_name_was_taken_too_stays_kept(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(ws)
    before = snapshot(ws)
    work, store = work_store(tmp_path / "store")
    _changed_after_the_rename(monkeypatch, lambda: (ws / "d").mkdir())
    _keeper_delete(ws, store, "d")  # kept, listed as it was taken
    promoted(store, work, ws)
    assert _undo(ws, store, "d")["conflicts"] == ["d"]  # the name is taken
    (ws / "d").rmdir()
    assert _undo(ws, store, "d")["restored"] == ["d"]
    assert snapshot(ws) == before
