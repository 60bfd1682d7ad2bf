"""A checkpoint after the first lists again only the directories the worker's
inotify watch saw change (sandbox/snapshot_watch.py), and is still the whole
tree: after every change made behind corral's back, a diff against the new
checkpoint (a whole walk, no watch) finds nothing, and a rewind brings the tree
back. Real kernel, real confined workers."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import threading
from pathlib import Path

import psutil
import pytest

from corral import Sandbox
from corral._syscall import call
from corral.config import HistoryOptions
from corral.history.snapshots import MAX_DELTAS
from corral.sandbox import _inotify
from corral.sandbox.snapshot_watch import Watch
from tests.helpers.confined import run_confined
from tests.helpers.history_helpers import snapshot
from tests.helpers.scripts_loader import load_script

DIRS, FILES = 6, 8


@pytest.fixture
def tree(workspace: Path) -> Path:
    for d in range(DIRS):
        (workspace / f"d{d}" / "sub").mkdir(parents=True)
        for f in range(FILES):
            (workspace / f"d{d}" / f"f{f}.txt").write_text(f"{d} {f}\n")
        (workspace / f"d{d}" / "sub" / "s.txt").write_text(f"sub {d}\n")
    return workspace




def _unchanged_since(sb: Sandbox, checkpoint: str) -> None:
    """A whole walk against the checkpoint finds nothing changed: its snapshot, made
    by a watched walk, is the tree."""
    assert sb.diff(checkpoint) == {"changed": [], "added": [], "removed": []}


def _walked(sb: Sandbox) -> int:
    return int((sb.last_snapshot or {})["walked"])


def test_a_checkpoint_lists_only_the_directories_that_changed(tree: Path) -> None:
    whole = snapshot(tree)
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        assert _walked(sb) == len(whole)
        before = snapshot(tree)
        with open(tree / "d2" / "f1.txt", "w") as file:  # an editor's write
            file.write("edited\n")
        second = sb.checkpoint("second")
        assert _walked(sb) == FILES + 1  # d2's entries only
        _unchanged_since(sb, second)
        assert sb.diff(first)["changed"] == [{"path": "d2/f1.txt", "by": "other"}]
        assert sb.rewind(first, force=True)["ok"]
        assert snapshot(tree) == before


def _shell_and_editor(tree: Path, outside: Path) -> None:
    """Every kind of change a shell makes, none through corral."""
    (tree / "d0" / "f0.txt").write_text("rewritten\n")
    os.rename(tree / "d0" / "f1.txt", tree / "d1" / "moved.txt")
    os.symlink("../d0/f2.txt", tree / "d1" / "link")
    shutil.rmtree(tree / "d2")
    os.rename(tree / "d3", tree / "d3-renamed")  # a directory moved within the tree
    (tree / "d3-renamed" / "sub" / "new.txt").write_text("beneath a moved one\n")
    os.rename(tree / "d4", outside / "d4")  # moved out, and another moved in its place
    (outside / "other" / "deep").mkdir(parents=True)
    (outside / "other" / "deep" / "x.txt").write_text("from outside\n")
    os.rename(outside / "other", tree / "d4")
    (tree / "new" / "a" / "b").mkdir(parents=True)
    (tree / "new" / "a" / "b" / "c.txt").write_text("new tree\n")
    os.chmod(tree / "d5" / "f0.txt", 0o600)
    os.chmod(tree / "d5" / "sub", 0o700)


def test_every_change_behind_corrals_back_is_in_the_next_snapshot(
        tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "away"
    outside.mkdir()
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        before = snapshot(tree)
        _shell_and_editor(tree, outside)
        after = snapshot(tree)
        second = sb.checkpoint("second")
        assert _walked(sb) < len(after)  # the watch's walk, not a whole one
        _unchanged_since(sb, second)
        # the moved-in directory's watch, and the moved one's, say where they are now
        (tree / "d4" / "deep" / "x.txt").write_text("changed again\n")
        (tree / "d3-renamed" / "f0.txt").write_text("changed again\n")
        third = sb.checkpoint("third")
        _unchanged_since(sb, third)
        assert sb.rewind(first, force=True)["ok"]
        assert snapshot(tree) == before
        assert sb.rewind(second, force=True)["ok"]
        assert snapshot(tree) == after


def test_a_changed_ignore_file_makes_the_walk_whole(tree: Path) -> None:
    whole = snapshot(tree)
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        (tree / "d1" / ".gitignore").write_text("f*.txt\n")
        second = sb.checkpoint("second")
        assert _walked(sb) == len(whole) + 1 - FILES  # whole: d1's f*.txt left out now
        _unchanged_since(sb, second)
        assert "d1/f0.txt" not in sb._checkpoints.snaps.load(second).items  # type: ignore[union-attr]


def test_a_changed_exclude_file_makes_the_walk_whole(tree: Path) -> None:
    """.git is never watched: its info/exclude is read again at every checkpoint."""
    (tree / ".git" / "info").mkdir(parents=True)
    whole = snapshot(tree)
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        (tree / ".git" / "info" / "exclude").write_text("d2/\n")
        second = sb.checkpoint("second")
        assert _walked(sb) == len(whole) - 2 - 1 - (FILES + 2)  # no .git, no d2
        _unchanged_since(sb, second)


def test_a_file_with_a_link_outside_is_listed_every_time(tree: Path, tmp_path: Path) -> None:
    """A write through a hard link elsewhere is not reported to the file's own
    directory: a directory holding such a file is listed at every checkpoint."""
    os.link(tree / "d0" / "f0.txt", tmp_path / "elsewhere.txt")
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        with open(tmp_path / "elsewhere.txt", "w") as file:
            file.write("through the other link\n")
        second = sb.checkpoint("second")
        assert _walked(sb) == FILES + 1
        _unchanged_since(sb, second)


def test_an_overflowed_queue_makes_the_walk_whole(tree: Path) -> None:
    whole = snapshot(tree)
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        churn = tree / "d0" / "churn"
        for n in range(limit // 2 + 10):  # a create and a delete each: over the limit
            (tree / "d0" / f"t{n}").touch()
            os.unlink(tree / "d0" / f"t{n}")
        churn.write_text("after the overflow\n")
        second = sb.checkpoint("second")
        assert _walked(sb) == len(whole) + 1
        _unchanged_since(sb, second)


def test_without_the_watch_every_walk_is_whole(tree: Path, tmp_path: Path) -> None:
    whole = snapshot(tree)
    options = HistoryOptions(path=str(tmp_path / "history"), snapshot_watch=False)
    with Sandbox(tree, history=options) as sb:
        sb.checkpoint("first")
        (tree / "d0" / "f0.txt").write_text("x\n")
        sb.checkpoint("second")
        assert _walked(sb) == len(whole)


def test_a_snapshot_written_whole_walks_the_tree_whole(tree: Path) -> None:
    """What no watch reports (a write through a shared mmap) is caught when the
    chain of deltas ends and the snapshot is written whole."""
    whole = snapshot(tree)
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        walked = []
        for n in range(MAX_DELTAS + 1):
            (tree / "d0" / "f0.txt").write_text(f"round {n}\n")
            sb.checkpoint(str(n))
            walked.append(_walked(sb))
        assert walked[:MAX_DELTAS] == [FILES + 1] * MAX_DELTAS
        assert walked[MAX_DELTAS] == len(whole)


def test_a_new_worker_walks_whole_then_watches(tree: Path) -> None:
    whole = snapshot(tree)
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        for pid in sb.pids()["workers"]:
            os.kill(pid, 9)
            with contextlib.suppress(psutil.NoSuchProcess):  # dead before the next call
                psutil.Process(pid).wait(timeout=5)
        (tree / "d0" / "f0.txt").write_text("x\n")
        second = sb.checkpoint("second")
        assert _walked(sb) == len(whole)
        _unchanged_since(sb, second)
        (tree / "d1" / "f0.txt").write_text("y\n")
        sb.checkpoint("third")
        assert _walked(sb) == FILES + 1


def test_changes_while_checkpoints_walk_are_in_a_later_one(tree: Path) -> None:
    """A shell writing while checkpoints walk: what changed after a directory was
    listed is queued, so the checkpoint after the writer stops holds it all."""
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            (tree / f"d{n % DIRS}" / f"f{n % FILES}.txt").write_text(f"write {n}\n")
            (tree / f"d{n % DIRS}" / "sub" / f"w{n % 3}").write_text(f"{n}\n")

    thread = threading.Thread(target=writer)
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        thread.start()
        try:
            for n in range(5):
                sb.checkpoint(str(n))
        finally:
            stop.set()
            thread.join()
        last = sb.checkpoint("after")
        _unchanged_since(sb, last)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_changes_behind_corrals_back(tree: Path, seed: int) -> None:
    """The short run of scripts/fuzz_watch.py."""
    found = load_script("fuzz_watch").check_rounds(tree, seed, 12)
    assert found["watched"] > 0


def _watch_from_confined(root: str, elsewhere: str) -> tuple[bool, int | None]:
    """In a confined child: a watch on the root (by its open fd) and one on a host
    directory outside every root (by its name)."""
    fd = _inotify.init()
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    watched = _inotify.add_watch(fd, root_fd, _inotify.CHANGES) > 0
    try:
        call(_inotify._add, ctypes.c_int(fd), elsewhere.encode(),
             ctypes.c_uint32(_inotify.CHANGES))
    except OSError as error:
        return watched, error.errno
    return watched, None


def test_a_confined_worker_watches_its_roots_and_nothing_else(
        workspace: Path, outside: Path) -> None:
    roots = [(str(workspace), "rw")]
    confined = run_confined(_watch_from_confined, str(workspace), str(outside), roots=roots)
    assert confined.value == (True, errno.ENOENT)  # the host's tree is not in its namespace
    # without the mount namespace the lookup reaches it (Landlock does not govern it)
    control = run_confined(_watch_from_confined, str(workspace), str(outside), roots=roots,
                           drop=("mount_namespace",))
    assert control.value == (True, None)


def test_a_directory_replaced_while_it_was_listed_keeps_the_new_ones_watches(
        tmp_path: Path) -> None:
    """The kernel's word on a directory that left a name (its watch's last events)
    can come after the walk watched the one that took the name, and the ones
    beneath it: it must not cost those their watches (their changes would go
    unseen). Real inotify, no worker."""
    root = tmp_path / "root"
    (root / "p" / "inner").mkdir(parents=True)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    watch = Watch(None, None, None)  # type: ignore[arg-type]
    try:
        def watched(path: str) -> None:
            fd = os.open(root / path if path else root, os.O_RDONLY | os.O_DIRECTORY)
            try:
                watch.watch(fd, path, os.fstat(fd))
            finally:
                os.close(fd)

        for path in ("", "p", "p/inner"):
            watched(path)
        (tmp_path / "b" / "inner").mkdir(parents=True)
        os.rename(root / "p", tmp_path / "old")  # p leaves, another takes its name...
        os.rename(tmp_path / "b", root / "p")
        for path in ("p", "p/inner"):  # ...and is watched before the old one's events
            watched(path)
        assert watch.dirty(_NoExclude()) == [""]
        (root / "p" / "inner" / "x").write_text("beneath the new one\n")
        assert watch.dirty(_NoExclude()) == ["p/inner"]
    finally:
        watch.close()
        os.close(root_fd)


class _NoExclude:
    def info(self, *args: object, **kwargs: object) -> None:
        return None


@pytest.mark.parametrize("by", ["symlink", "file"])
def test_a_directory_replaced_by_a_link_or_a_file_loses_what_it_held(
        tree: Path, by: str) -> None:
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        shutil.rmtree(tree / "d0")
        if by == "symlink":
            os.symlink("d1", tree / "d0")
        else:
            (tree / "d0").write_text("a file now\n")
        second = sb.checkpoint("second")
        _unchanged_since(sb, second)


def test_an_ignore_file_that_is_a_link_is_read_again_each_time(tree: Path) -> None:
    """Its target's change is reported to the target's directory, not the link's:
    the link's directory is listed at every checkpoint, and the rules' identity is
    the target's."""
    (tree / "d1" / "rules").write_text("*.log\n")
    os.symlink("../d1/rules", tree / "d0" / ".gitignore")
    (tree / "d0" / "x.log").write_text("log\n")
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        (tree / "d1" / "rules").write_text("\n")  # d0/x.log is no longer ignored
        second = sb.checkpoint("second")
        _unchanged_since(sb, second)


def test_an_exclude_file_that_is_a_link_is_read_through_it(tree: Path) -> None:
    (tree / ".git" / "info").mkdir(parents=True)
    (tree / "rules").write_text("*.log\n")
    os.symlink("../../rules", tree / ".git" / "info" / "exclude")
    (tree / "d0" / "x.log").write_text("log\n")
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        (tree / "rules").write_text("\n")
        second = sb.checkpoint("second")
        _unchanged_since(sb, second)


def test_a_directory_s_permission_bits_come_back_unrecorded(tree: Path) -> None:
    then = (tree / "d1").stat().st_mode & 0o7777
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        os.chmod(tree / "d1", 0o700)
        assert sb.rewind(first)["result"]["conflicts"] == ["d1"]  # someone else's
        back = sb.rewind(first, force=True)
        assert back["ok"] and "d1" in back["result"]["restored"], back
        assert (tree / "d1").stat().st_mode & 0o7777 == then != 0o700
        # no record holds it: a rewind of the rewind finds it changed by someone else
        again = sb.rewind(back["result"]["checkpoint"])
        assert again["ok"] and again["result"]["conflicts"] == ["d1"], again
        assert sb.rewind(back["result"]["checkpoint"], force=True)["ok"]
        assert (tree / "d1").stat().st_mode & 0o7777 == 0o700


def test_a_directory_with_ignore_rules_that_goes_takes_its_rules_along(tree: Path) -> None:
    (tree / "d0" / ".gitignore").write_text("*.log\n")
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        shutil.rmtree(tree / "d0")
        sb.checkpoint("second")
        (tree / "d0").mkdir()
        (tree / "d0" / "y.log").write_text("not ignored now\n")
        third = sb.checkpoint("third")
        _unchanged_since(sb, third)


def test_a_new_link_in_another_directory_lists_the_first_name_s_too(tree: Path) -> None:
    """A link made in d1 to d0's file is reported to d1 only: seeing the file's
    second link there, the walk lists d0 too, and from then on both each time."""
    with Sandbox(tree) as sb:
        sb.checkpoint("first")
        os.link(tree / "d0" / "f0.txt", tree / "d1" / "again.txt")
        sb.checkpoint("second")
        (tree / "d1" / "again.txt").write_text("written through the new name\n")
        third = sb.checkpoint("third")
        _unchanged_since(sb, third)


def test_a_forced_rewind_puts_a_link_back_where_a_directory_took_its_name(
        tree: Path) -> None:
    shutil.rmtree(tree / "d0")
    os.symlink("d1", tree / "d0")
    with Sandbox(tree) as sb:
        first = sb.checkpoint("first")
        os.unlink(tree / "d0")
        (tree / "d0").mkdir()
        (tree / "d0" / "new.txt").write_text("in its place\n")
        left = sb.rewind(first)["result"]  # without force: left as it is
        assert left["conflicts"] and os.path.isdir(tree / "d0"), left
        back = sb.rewind(first, force=True)
        assert back["ok"] and not back["result"]["conflicts"], back
        assert os.readlink(tree / "d0") == "d1"
        # what stood there is recorded: a rewind to the rewind's checkpoint brings it back
        assert sb.rewind(back["result"]["checkpoint"], force=True)["ok"]
        assert (tree / "d0" / "new.txt").read_text() == "in its place\n"
