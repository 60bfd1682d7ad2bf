"""What chaining the audit log costs: a 4 KiB write_file through a Sandbox with
the audit log on, chained (flock, `prev`, as shipped; plain SHA-256 and HMAC)
against the record written unchained (one write, no lock, no `prev`: the log
before it was chained), in one run. Calls alternate between the sandboxes so
drift hits all of them; history is off so the audit is what differs.

    python scripts/bench_audit.py [--calls 400] [--rounds 5]

Reports the median per call in microseconds and the ratio to the unchained log
(the target: under 1.05). A call's time varies more between runs than the chain
costs, so it also times `record` alone (the same line, in-process) and reports
what the chain adds to it as a share of the unchained call.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from corral import Sandbox
from corral.audit import Audit
from corral.config import HistoryOptions

CONTENT = ("a" * 4095 + "\n", "b" * 4095 + "\n")


class Unchained(Audit):
    """The record as it was written before the chain: one write of the line."""

    def _append(self, body: str) -> dict[str, Any]:
        with self._lock:
            assert self._fd is not None
            self._write(self._fd, (body + "}\n").encode("ascii"))
        return {}


def record_cost(audit: Audit, count: int) -> float:
    """Seconds per record of a write_file-sized record."""
    started = time.perf_counter()
    for _ in range(count):
        audit.record(tool="write_file", ok=True, path="f.txt", resolved="f.txt",
                     root="/home/me/project", decision="allow", bytes=4096, duration_ms=1.5)
    return (time.perf_counter() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per sandbox per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        key = base / "audit.key"
        key.write_bytes(b"k" * 32)
        key.chmod(0o600)
        audits = {
            "unchained": Unchained(base / "plain.jsonl"),
            "chained sha256": Audit(base / "chained.jsonl"),
            "chained hmac": Audit(base / "keyed.jsonl", key_file=key),
        }
        sandboxes = {}
        for name, audit in audits.items():
            workspace = base / name.replace(" ", "-")
            workspace.mkdir()
            sandboxes[name] = Sandbox(workspace, audit=audit, workers=1,
                                      history=HistoryOptions(enabled=False))
        times: dict[str, list[float]] = {name: [] for name in sandboxes}
        for sandbox in sandboxes.values():  # warm: workers forked, caches filled
            for i in range(20):
                sandbox.call("write_file", {"path": "f.txt", "content": CONTENT[i % 2]})
        for _ in range(args.rounds):
            for i in range(args.calls):
                for name, sandbox in sandboxes.items():
                    started = time.perf_counter()
                    answer = sandbox.call("write_file",
                                          {"path": "f.txt", "content": CONTENT[i % 2]})
                    times[name].append(time.perf_counter() - started)
                    assert answer["ok"], answer
        for sandbox in sandboxes.values():
            sandbox.close()
        records = {name: min(record_cost(audit, 2000) for _ in range(args.rounds))
                   for name, audit in audits.items()}
        for audit in audits.values():
            audit.close()
    base_median = statistics.median(times["unchained"])
    print(f"4 KiB write_file through a Sandbox, {args.rounds * args.calls} calls each")
    for name, samples in times.items():
        median = statistics.median(samples)
        added = (records[name] - records["unchained"]) / base_median
        print(f"  {name:15} call median {median * 1e6:8.1f} us  ratio {median / base_median:.3f}"
              f"   record {records[name] * 1e6:6.1f} us  chain adds {added:+.2%} of a call")


if __name__ == "__main__":
    main()
