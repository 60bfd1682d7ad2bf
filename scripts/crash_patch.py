"""Kill -9 the worker at a random instant of an apply_patch over many files; after
each kill a new sandbox on the workspace must show all of the patch or none of
it (every file old, or every file new), no temp file and no pending record; a
whole patch is then undone whole.

    python scripts/crash_patch.py [--rounds 200] [--files 40] [--seed N]

Each round builds a tree of `--files` files of 32 KiB and two symlinks, then applies
one patch that updates most of the files, adds some, deletes some and moves some,
and deletes the links (a link's removal lands last, as an unlink), while another
thread kills the worker after a random delay drawn from the time one unkilled
patch takes (measured first), so kills land in the reading, the staging, the
renames and after. tests/test_patch_crash.py kills before every step of a
3-file patch deterministically, and runs a few rounds of this.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

from corral import Sandbox, testing
from corral.config import HistoryOptions
from corral.policy import Policy

LINES = 1024  # 32-byte lines: 32 KiB a file, so staging and renames take a while
DELETES = Policy(tool_modes={"delete_file": "allow"})


def line(file: int, number: int, tag: str) -> str:
    return f"{tag} file {file:04d} line {number:05d} ..........\n"[:31] + "\n"


def build(workspace: Path, files: int) -> dict[str, bytes]:
    tree = {}
    for index in range(files):
        path = workspace / f"pkg{index % 4}" / f"f{index:04d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(line(index, n, "old") for n in range(LINES)).encode()
        path.write_bytes(data)
        tree[str(path.relative_to(workspace))] = data
    return tree


def make_links(workspace: Path) -> dict[str, str]:
    """Two symlinks to files of the tree, which the patch deletes (the links only)."""
    (workspace / "links").mkdir()
    links = {f"links/l{n}.txt": f"../pkg0/f{4 * n:04d}.txt" for n in range(2)}
    for rel, target in links.items():
        (workspace / rel).symlink_to(target)
    return links


def links_of(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): os.readlink(p) for p in sorted(root.rglob("*"))
            if p.is_symlink()}


def patch_for(tree: dict[str, bytes], rng: random.Random) -> str:
    """Update about 3/4 of the files (one line each), delete, move and add some."""
    sections = []
    for rel in sorted(tree):
        file = int(rel[-8:-4])
        roll = rng.random()
        if roll < 0.1:
            sections.append(f"*** Delete File: {rel}\n")
            continue
        if roll > 0.85:
            continue
        number = rng.randrange(1, LINES - 1)
        header = f"*** Update File: {rel}\n"
        if roll < 0.2:
            header += f"*** Move to: moved/{Path(rel).name}\n"
        sections.append(
            header + "@@\n"
            + f" {line(file, number - 1, 'old')}"
            + f"-{line(file, number, 'old')}"
            + f"+{line(file, number, 'new')}"
            + f" {line(file, number + 1, 'old')}")
    for extra in range(rng.randrange(1, 4)):
        sections.append(f"*** Add File: added/a{extra}.txt\n+added {extra}\n")
    sections += [f"*** Delete File: links/l{n}.txt\n" for n in range(2)]
    return "*** Begin Patch\n" + "".join(sections) + "*** End Patch\n"


def files_of(root: Path) -> dict[str, bytes]:
    """The tree's files, but temps (a new sandbox sweeps a dead writer's in the
    background; they are checked once it has closed)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and not p.name.startswith(".corral-tmp-")}


def one_round(base: Path, files: int, rng: random.Random, delay_s: float) -> str:
    """One patch with a kill after up to `delay_s`: "none", "all" or "clean" (the
    worker was idle: no kill). AssertionError if the tree is mixed."""
    workspace, store = base / "ws", base / "store"
    workspace.mkdir()
    before = build(workspace, files)
    links = make_links(workspace)
    patch = patch_for(before, rng)
    history = HistoryOptions(path=str(store))
    with Sandbox(workspace, workers=1, policy=DELETES, history=history) as sb:
        dry = sb.call("apply_patch", {"patch": patch, "dry_run": True})
        assert dry["ok"], dry
        pid = sb.pids()["workers"][0]
        call = threading.Thread(target=sb.call, args=("apply_patch", {"patch": patch}))
        call.start()
        time.sleep(rng.uniform(0, delay_s))
        killed = call.is_alive()
        if killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        call.join()
    with Sandbox(workspace, workers=1, policy=DELETES, history=history) as sb:
        now = files_of(workspace)
        whole = sb.history(limit=1)
        if now == before:
            assert not whole or whole[0]["action"] != "patch", whole
            assert links_of(workspace) == links, "the files are as before, the links are not"
            outcome = "none"
        else:
            assert whole and whole[0]["action"] == "patch", "a changed tree without its patch"
            assert links_of(workspace) == {}, "the files are patched, the links are not gone"
            undone = sb.undo(whole[0]["path"])
            assert undone["ok"] and undone["result"]["conflicts"] == [], undone
            assert files_of(workspace) == before, "the tree is mixed: undo did not restore it"
            assert links_of(workspace) == links, undone  # made again by the host
            outcome = "all"
        sb.history(limit=1)  # the host commits what the undo left done
        work = Path(testing.history(sb).work_path or "")  # a script may look at the store
        assert not [p for p in work.iterdir() if p.name.endswith((".pending", ".done"))]
    assert not list(workspace.rglob(".corral-tmp-*")), "temps left after the sweep"
    return outcome if killed else "clean"


def measure(files: int, rng: random.Random) -> float:
    """Seconds one unkilled patch takes through a sandbox."""
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        patch = patch_for(build(workspace, files), rng)
        make_links(workspace)
        history = HistoryOptions(path=str(Path(tmp) / "store"))
        with Sandbox(workspace, workers=1, policy=DELETES, history=history) as sb:
            started = time.perf_counter()
            assert sb.call("apply_patch", {"patch": patch})["ok"]
            return time.perf_counter() - started


def run(rounds: int, files: int, rng: random.Random) -> dict[str, int]:
    delay = measure(files, rng) * 1.2
    counts = {"none": 0, "all": 0, "clean": 0}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            counts[one_round(Path(tmp), files, rng, delay)] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    counts = run(args.rounds, args.files, random.Random(seed))
    print(f"seed {seed}: {counts['none']} kills left none of the patch, {counts['all']} all "
          f"of it (undone whole), {counts['clean']} landed before the kill; none mixed")


if __name__ == "__main__":
    main()
