"""Faults and races through the pool on the real kernel: a worker killed in the
middle of a write, a call past its timeout, concurrent appends and edits."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from corral.config import Limits
from tests.helpers.broker_helpers import MakeBroker, call, wait_gone

BIG = 20 * 1024 * 1024  # the write the worker dies in the middle of
TEMP_PREFIX = ".corral-tmp-"  # how corral/fs names its temp files: "<prefix><pid>-<random>"
KILL_ATTEMPTS = 5  # a write that finishes before the test sees its temp file is tried again


def temps(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob(f"{TEMP_PREFIX}*")]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("via_link", [False, True], ids=["direct", "through-a-link"])
def test_worker_killed_mid_write_leaves_old_content_and_no_temp(
    make_broker: MakeBroker, workspace: Path, via_link: bool
) -> None:
    broker = make_broker(workers=1, limits=Limits(max_write_bytes=2 * BIG))
    # Through a link the temp file sits beside the link's target, in another directory.
    (workspace / "deep").mkdir()
    target = workspace / "deep" / "big.txt"
    if via_link:
        (workspace / "big.txt").symlink_to("deep/big.txt")
    else:
        target = workspace / "big.txt"
    old, new = "o" * BIG, "n" * BIG
    target.write_text(old)
    for _ in range(KILL_ATTEMPTS):
        (victim,) = broker.pids()["workers"]
        answers: list[dict[str, Any]] = []
        writer = threading.Thread(target=lambda out=answers: out.append(
            call(broker, "write_file", path="big.txt", content=new)
        ))
        writer.start()
        caught = False
        while writer.is_alive() and not caught:
            if any(n.startswith(f"{TEMP_PREFIX}{victim}-") for n in os.listdir(target.parent)):
                os.kill(victim, signal.SIGSTOP)  # frozen mid-write: the temp file is there
                caught = bool(temps(workspace))
                os.kill(victim, signal.SIGKILL)
        writer.join()
        if caught:
            break
        target.write_text(old)  # the write won the race; set up again
    assert caught, "never caught the worker between creating and renaming its temp file"
    (answer,) = answers
    assert answer["ok"] is False and answer["error"]["code"] == "worker_crashed"
    assert "killed by SIGKILL" in answer["error"]["message"]
    assert digest(target) == hashlib.sha256(old.encode()).hexdigest()  # old, never a mix
    assert temps(workspace) == []  # the pool had a fresh worker clean up after the dead one
    assert broker.pids()["workers"] != [victim]
    again = call(broker, "write_file", path="big.txt", content=new)
    assert again["ok"], again
    assert digest(target) == hashlib.sha256(new.encode()).hexdigest()
    assert (workspace / "big.txt").is_symlink() is via_link


def test_a_call_past_its_timeout_is_killed_and_the_pool_heals(
    make_broker: MakeBroker, workspace: Path
) -> None:
    # A legitimate slow call: catastrophic backtracking, (a+)+$ against a line of
    # a's that ends in something else tries every split of the run.
    (workspace / "slow.txt").write_text("a" * 40 + "!\n")
    broker = make_broker(workers=1, limits=Limits(timeout_s=0.3))
    (victim,) = broker.pids()["workers"]
    answer = call(broker, "grep", pattern="(a+)+$", path="slow.txt")
    assert answer["ok"] is False and answer["error"]["code"] == "timeout"
    assert "0.3 second" in answer["error"]["message"]
    assert broker.pids()["workers"] != [victim]
    assert not Path(f"/proc/{victim}").exists()  # killed and reaped, not left spinning
    assert call(broker, "read_file", path="hello.txt")["ok"]


def test_200_appends_from_8_threads_give_200_intact_lines(
    make_broker: MakeBroker, workspace: Path
) -> None:
    broker = make_broker(workers=2)
    failures: list[dict[str, Any]] = []

    def append(thread: int) -> None:
        for i in range(25):
            line = f"thread {thread} line {i} " + "x" * 200 + "\n"
            answer = call(broker, "append_file", path="log.txt", content=line)
            if not answer["ok"]:
                failures.append(answer)

    threads = [threading.Thread(target=append, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    lines = (workspace / "log.txt").read_text().splitlines()
    assert len(lines) == 200
    expected = {f"thread {t} line {i} " + "x" * 200 for t in range(8) for i in range(25)}
    assert set(lines) == expected


def test_20_racing_edits_with_one_expected_version_give_one_success(
    make_broker: MakeBroker, workspace: Path
) -> None:
    (workspace / "config.txt").write_text("counter = 0\n")
    broker = make_broker(workers=2)
    version = call(broker, "stat_file", path="config.txt")["result"]["version"]
    start = threading.Barrier(20)
    answers: list[dict[str, Any]] = []

    def edit(n: int) -> None:
        start.wait()
        answers.append(call(
            broker, "edit_file", path="config.txt", old_string="counter = 0",
            new_string=f"counter = {n}", expected_version=version,
        ))

    threads = [threading.Thread(target=edit, args=(n,)) for n in range(1, 21)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [a for a in answers if a["ok"]]
    assert len(winners) == 1
    assert {a["error"]["code"] for a in answers if not a["ok"]} == {"conflict"}
    content = (workspace / "config.txt").read_text()
    assert content in {f"counter = {n}\n" for n in range(1, 21)}


def test_a_dead_zygote_halts_the_pool_instead_of_serving(
    make_broker: MakeBroker, workspace: Path
) -> None:
    broker = make_broker(workers=2)
    pids = broker.pids()
    os.kill(pids["zygote"], signal.SIGKILL)
    assert wait_gone([pids["zygote"], *pids["workers"]]) == []  # workers follow the zygote
    answer = call(broker, "read_file", path="hello.txt")
    assert answer["ok"] is False and answer["error"]["code"] == "worker_crashed"
    again = call(broker, "read_file", path="hello.txt")
    assert again["error"]["code"] == "worker_crashed" and "halted" in again["error"]["message"]
    assert "zygote" in again["error"]["message"]  # says why: not "the sandbox is closed"
    broker.close()
