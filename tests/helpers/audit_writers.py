"""Many writers on one audit log: threads here, and the child processes of
tests/test_audit_chain.py, which import this module."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from corral.audit import Audit


def write_in_threads(log: Path, threads: int, per_thread: int, max_bytes: int | None) -> None:
    """Threads of this process append to `log` through three Audits at once."""
    audits = [Audit(log, max_bytes=max_bytes) for _ in range(3)]  # three sandboxes, one log

    def work(n: int) -> None:
        for i in range(per_thread):
            audits[n % 3].record(tool="grep", ok=True, path=f"p{os.getpid()}/{n}/{i}")

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for audit in audits:
        audit.close()
