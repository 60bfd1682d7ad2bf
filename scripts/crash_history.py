"""Kill -9 a worker, or the host process, at random points of recorded writes; after
each kill the tree must hold the old or the new content and the history must agree:
no pending record left, the newest record's `after` is what the file holds, and
undoing it gives the content before it.

    python scripts/crash_history.py [--rounds 200] [--seed N] [--restore]

Half the rounds kill the worker in the middle of a 1 MiB write_file (the pool
settles the dead worker's record); half kill a host process that writes in a
loop (the next Sandbox on the workspace settles it; half the time it opens at
once, while the killed host's workers may still be dying or unreaped). With
--restore, every round kills the worker at a random instant of a rewind over
changes of every kind, then runs the same rewind again: the tree must be the
checkpoint's, with no temp file left. tests/test_history_crash.py and
tests/test_history_kill_restore.py run short versions.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from corral import Sandbox, testing
from corral.config import HistoryOptions
from corral.fs import content_version
from corral.history.store import id_pid
from corral.policy import Policy

SIZE = 1 << 20  # a write long enough that a kill lands inside it often
TARGET = "data.txt"
_HOST_SCRIPT = f"""
import sys
import psutil

from corral import Sandbox
from corral.config import HistoryOptions
workspace, store, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Sandbox(workspace, workers=1, history=HistoryOptions(path=store)) as sb:
    for i in range(first, first + 10_000):
        sb.call("write_file", {{"path": "data.txt", "content": f"{{i:07d}}\\n" * {SIZE // 8}}})
        if i == first:
            print("wrote", flush=True)  # one write landed: the kills come after it
"""


def content(i: int) -> bytes:
    return f"{i:07d}\n".encode() * (SIZE // 8)


def which(data: bytes) -> int:
    """The round a file's content was written in; AssertionError if torn."""
    i = int(data[:7])
    assert data == content(i), "the file holds a mix of two writes"
    return i


def unsettled(sb: Sandbox) -> list[str]:
    """The records left pending or done once the host committed what it could."""
    sb.history(limit=1)  # the host commits what the settle left done
    work = Path(testing.history(sb).work_path or "")
    return [p.name for p in work.iterdir() if p.name.endswith((".pending", ".done"))]


def check(sb: Sandbox, workspace: Path) -> int:
    """The invariants after a kill; returns the round the file's content is from."""
    pending = unsettled(sb)
    assert not pending, f"pending records left: {pending}"
    data = (workspace / TARGET).read_bytes()
    round_ = which(data)
    entries = sb.history(TARGET, limit=2)
    assert entries[0]["after"]["version"] == content_version(data), "history disagrees"
    return round_


def check_undo(sb: Sandbox, workspace: Path) -> None:
    """Undo of the last record gives what the file held before it (the state the
    record before it left), when the last record is a write not yet undone."""
    entries = sb.history(TARGET, limit=2)
    if entries[0]["tool"] != "write_file":
        return
    wanted = entries[1]["after"]["version"] if len(entries) > 1 else None
    undone = sb.undo(TARGET)
    if not undone["ok"] and undone["error"]["code"] == "worker_crashed":
        undone = sb.undo(TARGET)  # its worker was the one just killed, dying while idle
    assert undone["ok"] and undone["result"]["conflicts"] == [], undone
    if wanted is not None:
        assert content_version((workspace / TARGET).read_bytes()) == wanted


def kill_workers(workspace: Path, store: Path, rounds: int, rng: random.Random) -> dict[str, int]:
    counts = {"old": 0, "new": 0}
    (workspace / TARGET).write_bytes(content(0))
    with Sandbox(workspace, workers=1, history=HistoryOptions(path=str(store))) as sb:
        sb.call("write_file", {"path": TARGET, "content": content(0).decode()})
        for round_ in range(1, rounds + 1):
            before = which((workspace / TARGET).read_bytes())
            pid = sb.pids()["workers"][0]
            call = threading.Thread(target=sb.call, args=(
                "write_file", {"path": TARGET, "content": content(round_).decode()}))
            call.start()
            time.sleep(rng.uniform(0, 0.03))  # the call takes ~5-40 ms to reach the rename
            if call.is_alive():  # an idle worker's kill would hit the next call instead
                with contextlib.suppress(ProcessLookupError):  # replaced meanwhile
                    os.kill(pid, signal.SIGKILL)
            call.join()
            now = check(sb, workspace)
            assert now in (before, round_)
            counts["new" if now == round_ else "old"] += 1
            if round_ % 5 == 0:
                check_undo(sb, workspace)
    return counts


def kill_hosts(workspace: Path, store: Path, rounds: int, rng: random.Random) -> dict[str, int]:
    counts = {"old": 0, "new": 0}
    (workspace / TARGET).write_bytes(content(0))
    first = 1
    for _ in range(rounds):
        before = which((workspace / TARGET).read_bytes())
        host = subprocess.Popen([sys.executable, "-c", _HOST_SCRIPT, str(workspace),
                                 str(store), str(first)], stdout=subprocess.PIPE)
        assert host.stdout is not None and host.stdout.readline() == b"wrote\n"
        time.sleep(rng.uniform(0, 0.3))  # a write takes ~10-40 ms: several land, one is cut
        family = psutil.Process(host.pid).children(recursive=True)  # its zygote and workers
        host.send_signal(signal.SIGKILL)
        host.wait()
        if rng.random() < 0.5:  # they die by their parent-death signals; or reopen at once,
            psutil.wait_procs(family, timeout=10)  # while they may be dying or unreaped
        with Sandbox(workspace, workers=1, history=HistoryOptions(path=str(store))) as sb:
            left = unsettled(sb)
        if left:
            # opened at once: a worker of the killed host, still dying, held its
            # record's lock, so the record was left for a later start to settle;
            # only such a writer may leave one
            family_pids = {p.pid & 0xFFFFFF for p in family}
            assert {id_pid(name[2:].split(".")[0]) for name in left} <= family_pids, left
            psutil.wait_procs(family, timeout=10)
        with Sandbox(workspace, workers=1, history=HistoryOptions(path=str(store))) as sb:
            now = check(sb, workspace)
            assert now == before or now >= first
            counts["new" if now != before else "old"] += 1
            check_undo(sb, workspace)
        first += 10_000
    return counts


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def kill_restores(workspace: Path, store: Path, rounds: int, rng: random.Random) -> dict[str, int]:
    """Kill the worker running a rewind at a random instant; the rewind again must
    give the checkpoint's tree and leave no temp file."""
    counts = {"killed": 0, "finished": 0}
    workspace.mkdir(exist_ok=True)
    for i in range(8):
        (workspace / f"f{i}.txt").write_bytes(content(i)[: SIZE // 4])
    (workspace / "d").mkdir()
    policy = Policy(tool_modes={"delete_file": "allow"})
    with Sandbox(workspace, workers=1, policy=policy,
                 history=HistoryOptions(path=str(store))) as sb:
        for round_ in range(rounds):
            at_checkpoint = _snapshot(workspace)
            cp = sb.checkpoint()
            for i in range(8):
                sb.call("write_file", {"path": f"f{i}.txt", "content": f"{round_}-{i}\n" * 4096})
            sb.call("write_file", {"path": f"n{round_}/deep/g.txt", "content": "g\n"})
            sb.call("append_file", {"path": "f1.txt", "content": "tail\n" * 4096})
            sb.call("move_file", {"source": "d", "destination": "e"})
            sb.call("delete_file", {"path": "f2.txt"})
            pid = sb.pids()["workers"][0]
            first: list[dict[str, Any]] = []
            call = threading.Thread(target=lambda cp=cp, first=first: first.append(sb.rewind(cp)))
            call.start()
            time.sleep(rng.uniform(0, 0.05))  # a rewind of these takes ~10-60 ms
            if call.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            call.join()
            temps = list(workspace.rglob(".corral-tmp-*"))
            assert not temps, f"a killed rewind left temp files: {temps}"
            again = sb.rewind(cp)
            if not again["ok"] and again["error"]["code"] == "worker_crashed":
                # the kill came after the worker answered, while the call's thread
                # still committed its records: the idle worker died under the next call
                again = sb.rewind(cp)
            assert again["ok"] and again["result"]["conflicts"] == [], again
            assert _snapshot(workspace) == at_checkpoint, "the rewind again is not the checkpoint"
            counts["finished" if first[0]["ok"] else "killed"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--dir", default="/tmp/corral-crash-history")
    parser.add_argument("--restore", action="store_true", help="kill rewinds instead")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    base = Path(args.dir) / f"{args.seed}-{os.getpid()}"
    if args.restore:
        (base / "store").mkdir(parents=True)
        counts = kill_restores(base / "ws", (base / "store").resolve(), args.rounds, rng)
        print(f"seed {args.seed}: {args.rounds} rewinds: {counts['killed']} killed part-way, "
              f"{counts['finished']} finished first; each run again gave the checkpoint, "
              "no temp file left")
        return
    for name, run in (("worker", kill_workers), ("host", kill_hosts)):
        workspace, store = base / name / "ws", base / name / "store"
        workspace.mkdir(parents=True)
        store.mkdir()
        counts = run(workspace, store.resolve(), args.rounds // 2, rng)
        print(f"seed {args.seed}: {name} killed {args.rounds // 2} times: "
              f"{counts['old']} left the old content, {counts['new']} the new; history agreed")


if __name__ == "__main__":
    main()

