"""keep_freed_memory: a process that handles one big message after another
reuses the pages of the last one instead of faulting fresh ones in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.broker_helpers import MakeBroker, call

# In a fresh interpreter: make and drop a 4 MiB message a few times, then count the
# minor page faults of one more round.
_ROUNDS = """
import resource, sys
from corral._malloc import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def message():
    data = bytes(4 * 1024 * 1024)
    text = data.decode("ascii")
    return len(text.encode("utf-8"))
for _ in range(3):
    message()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
message()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_of_one_round(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_a_kept_heap_serves_the_next_message_without_faults() -> None:
    # 4 MiB is 1,024 pages; each of the three copies faults them all when the heap is
    # trimmed between messages
    assert faults_of_one_round("default") > 1000
    assert faults_of_one_round("keep") < 100


def minor_faults(pid: int) -> int:
    # /proc/PID/stat: the name in parentheses may hold spaces; minflt is the 8th field after it
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[7])


def test_workers_inherit_the_kept_heap_from_the_zygote(
    make_broker: MakeBroker, workspace: Path
) -> None:
    (workspace / "big.txt").write_text(("x" * 199 + "\n") * 5_000)  # 1 MB in 5,000 lines
    broker = make_broker(workers=1)
    (worker,) = broker.pids()["workers"]
    for _ in range(3):
        assert call(broker, "read_file", path="big.txt", max_bytes=4 << 20, limit=100_000)["ok"]
    before = minor_faults(worker)
    assert call(broker, "read_file", path="big.txt", max_bytes=4 << 20, limit=100_000)["ok"]
    # 1,300 when each answer maps fresh pages; what is left is the interpreter's own
    # small-object arenas (the lines), which it maps and unmaps itself
    assert minor_faults(worker) - before < 600
