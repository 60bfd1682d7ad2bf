"""Many processes append to one rotating audit log while some are SIGKILLed and
restarted at random, some with a half line written by hand (what a crash inside
write() leaves); meanwhile `corral audit verify`'s check runs again and again on
the live set (every one must say ok: an intact log is never called broken while
it rotates), and at the end the whole rotated set must verify as one chain.
The short versions are tests/test_audit_chain.py's many-writers test and
tests/test_audit_cli.py's live-log test.

    python scripts/race_audit.py [--seconds 30] [--writers 6] [--max-bytes 20000]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from corral.audit_verify import Verdict, listed, log_set, verify

WRITER = """
import sys
from corral.audit import Audit
audit = Audit(sys.argv[1], max_bytes=int(sys.argv[2]))
n = 0
while True:
    audit.record(tool="write_file", ok=True, path=f"w{sys.argv[3]}/{n}")
    n += 1
"""


def half_line(log: str) -> int:
    """Append half a record as a writer killed inside write() would: holding the
    log's flock, to the file still at the path (not one rotated meanwhile)."""
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    except FileNotFoundError:  # between a rotation's rename and the new file
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not os.path.exists(log) or os.fstat(fd).st_ino != os.stat(log).st_ino:
            return 0
        os.write(fd, b'{"time":"half a rec')
        return 1
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--writers", type=int, default=6)
    parser.add_argument("--max-bytes", type=int, default=20_000)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    with tempfile.TemporaryDirectory() as tmp:
        log = str(Path(tmp) / "audit.jsonl")

        def start(n: int) -> subprocess.Popen[bytes]:
            return subprocess.Popen([sys.executable, "-c", WRITER, log, str(args.max_bytes),
                                     str(n)], env=env)

        writers = [start(n) for n in range(args.writers)]
        kills = torn = 0
        deadline = time.monotonic() + args.seconds
        live: list[Verdict] = []
        checker = threading.Thread(target=verify_live, args=(log, deadline, live))
        checker.start()
        try:
            while time.monotonic() < deadline:
                time.sleep(random.uniform(0.01, 0.2))
                n = random.randrange(len(writers))
                writers[n].send_signal(signal.SIGKILL)
                writers[n].wait()
                kills += 1
                if random.random() < 0.2:  # a crash mid-line: under the writers' lock
                    torn += half_line(log)
                writers[n] = start(n)
        finally:
            for writer in writers:
                writer.send_signal(signal.SIGKILL)
                writer.wait()
            checker.join()
        for writer in writers:
            assert writer.returncode == -signal.SIGKILL, "a writer failed"
        files = log_set(log)
        verdict = verify(files)
        sizes = sorted(os.path.getsize(name) for name in files)
    print(f"file sizes: min {sizes[0]}, median {sizes[len(sizes) // 2]}, max {sizes[-1]}")
    print(f"{kills} kills, {torn} half lines, {len(files)} files, {verdict.records} records")
    wrong = [v for v in live if not v.ok]
    print(f"{len(live)} verifies of the live set: {len(live) - len(wrong)} ok, "
          f"{len(wrong)} broken" + (f" (first: {wrong[0].broken})" if wrong else ""))
    print(f"ok {verdict.records} records" if verdict.ok else f"BROKEN: {verdict.broken}")
    sys.exit(0 if verdict.ok and not wrong else 1)


def verify_live(log: str, deadline: float, verdicts: list[Verdict]) -> None:
    """What `corral audit verify` does, over and over while the writers run."""
    while time.monotonic() < deadline:
        if not os.path.exists(log):  # before the first writer made it
            time.sleep(0.01)
            continue
        with listed(log) as parts:
            verdicts.append(verify(parts))


if __name__ == "__main__":
    main()
