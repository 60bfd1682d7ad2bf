"""Deleted symlinks come back: delete_directory of a tree holding symlinks (confined
workers, whose mount namespace makes the store another mount: the tree is copied
in, without its links, and a worker can never make one) and delete_file of a link,
undone or rewound through a Sandbox. The host makes each link again with the
target its committed record holds, beneath the root (history/links.py); a name
taken since is a conflict; a target leading outside comes back as text, and
nothing resolves through it outside the root; a forged record is refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import HistoryOptions
from corral.errors import CorralError
from corral.fs import Root
from corral.history.links import MAX_TARGET_BYTES, check_target, make_link
from corral.history.store import id_time, new_id
from corral.policy import Policy
from tests.helpers.calls import ok
from tests.helpers.history_helpers import commit_done, snapshot, work_store

ON = {"delete_directory": "allow", "delete_file": "allow"}
# relative (a node_modules/.bin link among them), absolute, dangling, and a target a
# terminal would act on
LINKS = {"d/.bin/tool": "../tool/bin/tool.js", "d/abs": "/etc/passwd", "d/dangling": "no/such",
         "d/.bin/evil": "x\x1b[2K\rfake\u202e", "d/tool/latest": "."}


def _tree(ws: Path) -> dict[str, Any]:
    """A node_modules-like tree; the snapshot of the workspace with it."""
    for sub in (".bin", "tool/bin", "empty"):
        (ws / "d" / sub).mkdir(parents=True)
    (ws / "d" / "a.txt").write_text("alpha\n")
    (ws / "d" / "tool" / "bin" / "tool.js").write_text("run()\n")
    (ws / "d" / "tool" / "bin" / "tool.js").chmod(0o750)
    for path, target in LINKS.items():
        (ws / path).symlink_to(target)
    return snapshot(ws)


def _deleted(ws: Path, sandbox: Sandbox) -> None:
    done = ok(sandbox, "delete_directory", path="d", recursive=True)
    assert done["result"] == {"path": "d", "deleted": True, "entries_removed": 11}
    assert done["text"] == "Deleted d and the 11 entries beneath it."
    assert not (ws / "d").exists()


def test_undo_of_delete_directory_makes_its_links_again(ws: Path) -> None:
    before = _tree(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        _deleted(ws, sandbox)
        undone = sandbox.undo("d/.bin/tool")  # any path beneath: the whole tree
        assert undone["ok"], undone
        assert undone["result"]["restored"] == ["d"] and undone["result"]["conflicts"] == []
        assert snapshot(ws) == before  # every link with its target text
        assert undone["text"] == "Restored d."
        assert (ws / "d" / ".bin" / "tool").read_text() == "run()\n"  # it leads where it did
        # the links made are the undo's changes: recorded, as the rest of it
        made = {e["path"] for e in sandbox.history() if e["tool"] == "undo"}
        assert set(LINKS) <= made
        again = sandbox.undo("d")  # the undo finished: nothing else to take back
    assert again["error"]["code"] == "not_found", again


def test_rewind_makes_the_links_again(ws: Path) -> None:
    before = _tree(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        checkpoint = sandbox.checkpoint()
        _deleted(ws, sandbox)
        rewound = sandbox.rewind(checkpoint)
        assert rewound["ok"] and rewound["result"]["conflicts"] == [], rewound
        assert rewound["result"]["restored"] == ["d"]
    assert snapshot(ws) == before


def test_corral_undo_makes_the_links_again(ws: Path) -> None:
    before = _tree(ws)
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        _deleted(ws, sandbox)
    done = subprocess.run(["corral", "undo", "d", "--workspace", str(ws), "--json"],
                          capture_output=True, text=True, timeout=60, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["conflicts"] == []
    assert snapshot(ws) == before


def test_undo_of_delete_file_of_a_link_makes_it_again(ws: Path) -> None:
    (ws / "a.txt").write_text("alpha\n")
    (ws / "link").symlink_to("a.txt")
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        ok(sandbox, "delete_file", path="link")
        undone = sandbox.undo("link")
        assert undone["ok"], undone
        assert undone["result"]["restored"] == ["link"] and undone["result"]["conflicts"] == []
        assert os.readlink(ws / "link") == "a.txt"
        assert ok(sandbox, "read_file", path="link")["result"]["content"] == "alpha\n"
        again = sandbox.undo("link")  # stepped past it: no other change of the link
    assert again["error"]["code"] == "not_found", again


@pytest.mark.parametrize("force", [False, True])
def test_a_link_whose_name_is_taken_is_a_conflict(ws: Path, force: bool) -> None:
    (ws / "link").symlink_to("a.txt")
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        ok(sandbox, "delete_file", path="link")
        (ws / "link").write_text("someone else's\n")  # behind corral's back
        undone = sandbox.undo("link", force=force)
    assert undone["result"]["restored"] == [] and undone["result"]["conflicts"] == ["link"]
    assert (ws / "link").read_text() == "someone else's\n"  # left as it is


def test_a_link_made_again_that_points_outside_leads_nowhere_outside(
    ws: Path, tmp_path: Path,
) -> None:
    """The recorded target is text: the link points outside again, and every tool
    resolves through it beneath the root (outside_workspace), so nothing outside
    is read or written through it."""
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    (ws / "d").mkdir()
    (ws / "d" / "abs").symlink_to(outside)
    (ws / "d" / "rel").symlink_to("../../outside.txt")
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        ok(sandbox, "delete_directory", path="d", recursive=True)
        assert sandbox.undo("d")["result"]["conflicts"] == []
        assert os.readlink(ws / "d" / "abs") == str(outside)
        assert os.readlink(ws / "d" / "rel") == "../../outside.txt"
        for link in ("d/abs", "d/rel"):
            wrote = sandbox.call("write_file", {"path": link, "content": "pwned\n"})
            assert wrote["error"]["code"] == "outside_workspace", wrote
            read = sandbox.call("read_file", {"path": link})
            assert read["error"]["code"] == "outside_workspace", read
    assert outside.read_text() == "not yours\n"


def _committed(sandbox: Sandbox, tool: str) -> Path:
    """The store's committed record of the one change of `tool` (the kept
    directories hold it too, as a hard link: edited in place, both change)."""
    store = Path(sandbox.history_path or "")
    for path in sorted(store.glob("r-*.json")):
        if json.loads(path.read_text())["tool"] == tool:
            return path
    raise AssertionError(f"no record of {tool}")


@pytest.mark.parametrize("target", ["a\0b", "x" * (MAX_TARGET_BYTES + 1), ""])
def test_a_forged_link_target_is_refused(ws: Path, target: str) -> None:
    (ws / "link").symlink_to("a.txt")
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        ok(sandbox, "delete_file", path="link")
        sandbox.history()  # committed
        path = _committed(sandbox, "delete_file")
        record = json.loads(path.read_text())
        record["entries"][0]["before"]["target"] = target
        with open(path, "r+") as held:  # in place: the kept directory's link sees it
            held.truncate(0)
            held.write(json.dumps(record))
        undone = sandbox.undo("link")
    assert undone["result"]["restored"] == [] and undone["result"]["conflicts"] == ["link"]
    assert not os.path.lexists(ws / "link")


def test_a_forged_link_path_that_escapes_is_refused(ws: Path, tmp_path: Path) -> None:
    """A committed record edited to claim a link beneath the directory at a path
    that leads out of it: the host refuses to make it, and makes nothing outside."""
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("f\n")
    with Sandbox(ws, policy=Policy(ON)) as sandbox:
        ok(sandbox, "delete_directory", path="d", recursive=True)
        sandbox.history()
        path = _committed(sandbox, "delete_directory")
        record = json.loads(path.read_text())
        record["entries"][0]["before"]["tree"].append(["../../escaped", "symlink", 0o777, "x"])
        with open(path, "r+") as held:
            held.truncate(0)
            held.write(json.dumps(record))
        undone = sandbox.undo("d")
    assert not os.path.lexists(tmp_path / "escaped") and not os.path.lexists(ws.parent / "x")
    assert not os.path.lexists(tmp_path.parent / "escaped")
    assert "d/../../escaped" in undone["result"]["conflicts"], undone


def test_a_worker_record_with_a_bad_link_target_is_not_committed(
    ws: Path, tmp_path: Path,
) -> None:
    """What a worker writes is input: a done record whose symlink target has a NUL
    (or a kept tree holding one) is refused at its commit."""
    work, store = work_store(tmp_path / "store")
    entry = {"root": str(ws), "rel": "link", "path": "link", "kind": "remove",
             "action": "delete", "before": {"type": "symlink", "target": "a\0b"},
             "after": None}
    record_id = new_id()
    record = {"v": 1, "id": record_id, "time": id_time(record_id), "tool": "delete_file",
              "pid": os.getpid(), "entries": [entry]}
    (work / f"r-{record['id']}.done").write_text(json.dumps(record))
    refused = commit_done(store, work, ws)
    assert list(refused.values()) == ["a symlink whose target no link can hold"], refused
    assert store.listing().records == []


def test_make_link_refuses_what_no_link_can_hold(ws: Path, tmp_path: Path) -> None:
    """The step itself: a bad target, a path leading out, a name taken."""
    assert check_target("ok") is None
    for bad in ("", "a\0b", "x" * (MAX_TARGET_BYTES + 1), 7):
        assert check_target(bad) is not None
    (ws / "sub").mkdir()
    (ws / "out").symlink_to(tmp_path)  # a directory link leading out of the root
    with Root(str(ws)) as root:
        make_link(root, "sub/l", "/etc/passwd")
        assert os.readlink(ws / "sub" / "l") == "/etc/passwd"
        for rel, target, code in [("x", "a\0b", "invalid_arguments"),
                                  ("../x", "t", "outside_workspace"),
                                  ("out/x", "t", "outside_workspace"),
                                  ("sub/l", "t", "already_exists"),
                                  ("none/x", "t", "not_found")]:
            with pytest.raises(CorralError) as refused:
                make_link(root, rel, target)
            assert refused.value.code == code, (rel, refused.value)
    assert not os.path.lexists(tmp_path / "x") and os.readlink(ws / "sub" / "l") == "/etc/passwd"
    with Root(str(ws), mode="ro") as root, pytest.raises(CorralError) as refused:
        make_link(root, "y", "t")
    assert refused.value.code == "read_only"


def test_a_host_killed_as_it_makes_a_link_leaves_the_history_agreeing(
    ws: Path, tmp_path: Path,
) -> None:
    """Killed right after making the link, before its record was done: the next
    sandbox settles that record by the tree (the link is there: committed), and
    the next undo of the path finishes the undo instead of stepping back."""
    (ws / "link").symlink_to("a.txt")
    options = HistoryOptions(path=str(tmp_path / "history"))
    with Sandbox(ws, policy=Policy(ON), history=options) as sandbox:
        ok(sandbox, "delete_file", path="link")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the host that dies
        try:
            from corral.history import relink

            def made_then_killed(*args: Any, **kwargs: Any) -> None:
                make_link(*args, **kwargs)
                os._exit(9)

            relink.make_link = made_then_killed  # type: ignore[assignment]
            with Sandbox(ws, policy=Policy(ON), history=options) as dying:
                dying.undo("link")
        finally:
            os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 9
    assert os.readlink(ws / "link") == "a.txt"
    with Sandbox(ws, policy=Policy(ON), history=options) as sandbox:
        [made, deleted] = sandbox.history("link")
        assert (made["tool"], made["action"], deleted["tool"]) == ("undo", "create", "delete_file")
        resumed = sandbox.undo("link")
        assert resumed["result"]["conflicts"] == [] and os.readlink(ws / "link") == "a.txt"
        again = sandbox.undo("link")
    assert again["error"]["code"] == "not_found", again
