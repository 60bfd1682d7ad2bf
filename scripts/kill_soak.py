"""Kill -9 soak: SIGKILL the worker, or the whole host, in the middle of
write_file, edit_file, append_file and move_file (a file and a directory), then
check that nothing is torn: every file holds wholly old or wholly new content,
an append log is a run of whole records, a moved file or directory sits wholly
at one of its two names, and no temp file is left behind (after a killed
worker: once the pool has cleaned up; after a killed host: once the next
Sandbox on the workspace has started).

    python scripts/kill_soak.py [--worker-kills 1000] [--host-kills 100] [--record-bytes N]

--record-bytes sets the size of an appended record (default 40 KB); a big one
(16 MiB) makes kills land inside the append's write(2), which the pool's settle
of the dead worker's record must cut back.

Only kills that land while a call runs count towards --worker-kills (a call
answered `worker_crashed`). A host kill lands at a random instant of a host
that runs those calls back to back. tests/test_kill_soak.py runs a short version.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral import Sandbox
from corral.config import Limits
from corral.fs import TEMP_PREFIX

TOKEN = "<{:08d}>"  # one generation's token; a file's content is one token repeated
BLOCK_TOKENS = 40_000  # 400 KB per write: long enough for a kill to land inside it
RECORD_TOKENS = 4_000  # 40 KB per appended record (--record-bytes changes it)
LOG_TRIM_BYTES = 2 * 1024 * 1024  # see trim_log
DIR_FILES = 200  # files in the directory that moves: its move checks each, so it takes ms
OPS = ("write_file", "edit_file", "append_file", "move_file", "move_dir")
HOST_START_S = 30.0  # a host reports its pids within this long, even on a loaded machine
ORPHAN_GRACE_S = 10.0  # the zygote and workers of a killed host die within this long


def block(gen: int, tokens: int = BLOCK_TOKENS) -> str:
    return TOKEN.format(gen) * tokens


def record(gen: int) -> str:
    return f"[{block(gen, RECORD_TOKENS)}]\n"


def set_record_bytes(size: int) -> None:
    global RECORD_TOKENS
    RECORD_TOKENS = max(1, size // 10)


def limits() -> Limits:
    """Room for the records asked for: a write or append of one, a log of a few."""
    record_bytes = 10 * RECORD_TOKENS + 3
    return Limits(max_write_bytes=max(Limits().max_write_bytes, record_bytes),
                  max_file_bytes=max(Limits().max_file_bytes, LOG_TRIM_BYTES + 4 * record_bytes))


EDIT_HEAD, EDIT_TAIL = "HEAD\n", "\nTAIL\n"
_WHOLE = re.compile(r"(<\d{8}>)\1*")
_RECORDS = re.compile(r"(?:\[(<\d{8}>)\1*\]\n)*")  # a torn record has no "]\n"


def layout(ws: Path) -> None:
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "w.txt").write_text(block(0))
    (ws / "e.txt").write_text(EDIT_HEAD + block(0) + EDIT_TAIL)
    (ws / "a.txt").write_text(record(0))
    (ws / "m1.txt").write_text(block(0))
    (ws / "dm1").mkdir()
    for k in range(DIR_FILES):
        (ws / "dm1" / f"f{k}.txt").write_text(block(k, 100))


def whole(text: str, tokens: int = BLOCK_TOKENS) -> bool:
    return len(text) == 10 * tokens and _WHOLE.fullmatch(text) is not None


def torn(ws: Path) -> list[str]:
    """What is not wholly old or wholly new in `ws` (empty: nothing torn)."""
    problems = []
    if not whole((ws / "w.txt").read_text()):
        problems.append("w.txt is not one whole write")
    e = (ws / "e.txt").read_text()
    if not (e.startswith(EDIT_HEAD) and e.endswith(EDIT_TAIL)
            and whole(e[len(EDIT_HEAD):-len(EDIT_TAIL)])):
        problems.append("e.txt is not one whole edit")
    if _RECORDS.fullmatch((ws / "a.txt").read_text()) is None:
        problems.append("a.txt is not a run of whole records")
    moved = [name for name in ("m1.txt", "m2.txt") if (ws / name).exists()]
    if len(moved) != 1 or not whole((ws / moved[0]).read_text()):
        problems.append(f"the moved file is at {moved}")
    dirs = [name for name in ("dm1", "dm2") if (ws / name).is_dir()]
    if len(dirs) != 1 or {p.name for p in (ws / dirs[0]).iterdir()} != {
        f"f{k}.txt" for k in range(DIR_FILES)
    } or not all(whole(p.read_text(), 100) for p in (ws / dirs[0]).iterdir()):
        problems.append(f"the moved directory is at {dirs}")
    expected = {"w.txt", "e.txt", "a.txt", *moved, *dirs}
    extra = [p.name for p in ws.iterdir() if p.name not in expected and
             not p.name.startswith(TEMP_PREFIX)]
    if extra:
        problems.append(f"unexpected entries {extra}")
    return problems


def trim_log(ws: Path) -> None:
    """Start the append log over once checked, or checking it grows with the run."""
    if (ws / "a.txt").stat().st_size > LOG_TRIM_BYTES:
        (ws / "a.txt").write_text(record(0))


def temps(ws: Path) -> list[str]:
    return [str(p.relative_to(ws)) for p in ws.rglob(TEMP_PREFIX + "*")]


def request(ws: Path, op: str, gen: int) -> tuple[str, dict[str, Any]]:
    """The call of `op` that makes generation `gen`, given what `ws` holds now."""
    if op == "write_file":
        return op, {"path": "w.txt", "content": block(gen)}
    if op == "edit_file":
        old = (ws / "e.txt").read_text()[len(EDIT_HEAD):-len(EDIT_TAIL)]
        return op, {"path": "e.txt", "old_string": old, "new_string": block(gen)}
    if op == "append_file":
        return op, {"path": "a.txt", "content": record(gen)}
    names = ("m1.txt", "m2.txt") if op == "move_file" else ("dm1", "dm2")
    src, dst = names if (ws / names[0]).exists() else names[::-1]
    return "move_file", {"source": src, "destination": dst}


def worker_kills(ws: Path, kills: int, seed: int = 0) -> Counter[str]:
    """Kill the worker in the middle of calls until `kills` calls ended
    `worker_crashed`; AssertionError on a torn file or a temp left behind."""
    rng = random.Random(seed)
    layout(ws)
    outcomes: Counter[str] = Counter()
    durations = dict.fromkeys(OPS, 0.005)  # running estimates: where to aim the kill
    with Sandbox(ws, workers=1, limits=limits()) as sb:
        gen = 0
        while outcomes["worker_crashed"] < kills:
            gen += 1
            op = OPS[gen % len(OPS)]
            tool, arguments = request(ws, op, gen)
            pid = sb.pids()["workers"][0]
            # half the kills at a random instant of the call, half as its temp file appears
            delay = rng.uniform(0, 1.2 * durations[op]) if rng.random() < 0.5 else None
            done = threading.Event()
            killer = threading.Thread(target=_killer, args=(pid, ws, delay, done))
            start = time.perf_counter()
            killer.start()
            response = sb.call(tool, arguments)
            done.set()
            killer.join()
            if response["ok"]:
                durations[op] = 0.8 * durations[op] + 0.2 * (time.perf_counter() - start)
            code = "ok" if response["ok"] else response["error"]["code"]
            if code not in ("ok", "worker_crashed"):
                raise AssertionError(f"{op} answered {response}")
            outcomes[code] += 1
            outcomes[f"{op}:{code}"] += 1
            problems = torn(ws)
            if problems:
                raise AssertionError(f"after {op} ({code}): {problems}")
            left = temps(ws)
            if left and code == "worker_crashed":
                raise AssertionError(f"a killed worker's temp files stayed: {left}")
            trim_log(ws)  # no call runs now
    return outcomes


def _killer(pid: int, ws: Path, delay: float | None, done: threading.Event) -> None:
    """SIGKILL `pid` after `delay` seconds, or (None) once a temp file shows in `ws`;
    never once `done` is set."""
    if delay is not None:
        if not done.wait(delay):
            _kill(pid)
        return
    while not done.is_set():
        if any(name.startswith(TEMP_PREFIX) for name in os.listdir(ws)):
            _kill(pid)
            return


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def host_main(ws: str) -> None:
    """A host running the calls back to back until it is killed; prints its pids."""
    with Sandbox(ws, workers=2, limits=limits()) as sb:
        pids = sb.pids()
        print(pids["zygote"], *pids["workers"], flush=True)
        gen = int(time.time() * 1000) % 10**8
        while True:
            for op in OPS:
                gen = (gen + 1) % 10**8
                sb.call(*request(Path(ws), op, gen))


def host_kills(ws: Path, kills: int, seed: int = 0) -> Counter[str]:
    """SIGKILL a host at a random instant `kills` times; after each: its zygote and
    workers are gone, nothing is torn, and the next start leaves no temp file."""
    rng = random.Random(seed)
    layout(ws)
    outcomes: Counter[str] = Counter()
    for _ in range(kills):
        host = subprocess.Popen(
            [sys.executable, __file__, "--host", str(ws), str(RECORD_TOKENS * 10)],
            stdout=subprocess.PIPE, text=True,
            start_new_session=True,
        )
        assert host.stdout is not None
        line = _readline(host, HOST_START_S)
        pids = [int(p) for p in line.split()]
        time.sleep(rng.uniform(0.02, 0.3))
        if rng.random() < 0.5:  # half the kills at a random instant, half mid-write
            _wait_for_temp(ws)
        if rng.random() < 0.5:
            host.kill()  # the host alone: its zygote and workers follow by death signal
        else:
            os.killpg(host.pid, signal.SIGKILL)  # all at once, as a service manager does
            outcomes["group_kills"] += 1
        host.wait()
        host.stdout.close()
        _wait_gone(pids)
        problems = torn(ws)
        if problems:
            raise AssertionError(f"after a host kill: {problems}")
        left = temps(ws)
        outcomes["temps_left_by_kill"] += len(left)
        outcomes["kills_leaving_temps"] += bool(left)
        with Sandbox(ws):
            pass
        left = temps(ws)
        if left:
            raise AssertionError(f"the next start left a killed host's temp files: {left}")
        outcomes["kills"] += 1
        trim_log(ws)
    return outcomes


def _wait_for_temp(ws: Path) -> None:
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while time.monotonic() < deadline:
        if any(name.startswith(TEMP_PREFIX) for name in os.listdir(ws)):
            return


def _readline(host: subprocess.Popen[str], timeout: float) -> str:
    """The host's first line, or AssertionError if it does not come in time."""
    assert host.stdout is not None
    timer = threading.Timer(timeout, host.kill)
    timer.start()
    try:
        line = host.stdout.readline()
    finally:
        timer.cancel()
    if not line:
        raise AssertionError(f"the host did not start (exit {host.wait()})")
    return line


def _running(pid: int) -> bool:
    """Alive and not a zombie; a process that exits while it is asked is gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while time.monotonic() < deadline:
        alive = [p for p in pids if _running(p)]
        if not alive:
            return
        time.sleep(0.01)
    raise AssertionError(f"a killed host's zygote or workers outlived it: {alive}")


def main() -> None:
    if sys.argv[1:2] == ["--host"]:
        set_record_bytes(int(sys.argv[3]))
        host_main(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker-kills", type=int, default=1000)
    parser.add_argument("--host-kills", type=int, default=100)
    parser.add_argument("--record-bytes", type=int, default=10 * RECORD_TOKENS)
    args = parser.parse_args()
    set_record_bytes(args.record_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        outcomes = worker_kills(Path(tmp) / "w", args.worker_kills)
        print(f"worker kills: {outcomes['worker_crashed']} mid-call kills "
              f"({outcomes['ok']} calls finished first) in {time.monotonic() - start:.1f} s; "
              f"0 torn files, 0 temps left; {dict(sorted(outcomes.items()))}")
        start = time.monotonic()
        outcomes = host_kills(Path(tmp) / "h", args.host_kills)
        print(f"host kills: {outcomes['kills']} ({outcomes['group_kills']} with its zygote and "
              f"workers at once) in {time.monotonic() - start:.1f} s; 0 torn "
              f"files; {outcomes['kills_leaving_temps']} kills left "
              f"{outcomes['temps_left_by_kill']} temp files, all gone after the next start")


if __name__ == "__main__":
    main()
