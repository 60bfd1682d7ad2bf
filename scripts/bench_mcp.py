"""Per-call latency of `corral serve` against the reference MCP filesystem server.

Both servers are driven by the same raw JSON-RPC stdio client in the same run
(one request in flight at a time, so client overhead is equal), on the same
files: a 4 KiB read, a 4 KiB write, a stat, a listing of 1,000 entries and
one edit in a 100 KiB file. Two more columns time the same operation through
the Python API (`Sandbox.call`: confined worker, no protocol) and directly
in this process with plain os calls (same guarantees: writes are temp file +
fsync + rename), to show what the protocol and the sandbox each cost.
Rounds of each side alternate, so a change in machine load hits all sides.

Install the reference server outside the repo first:

    mkdir -p /tmp/refserver && cd /tmp/refserver
    npm install @modelcontextprotocol/server-filesystem

    python scripts/bench_mcp.py --ref /tmp/refserver [--calls 500]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
REF_ENTRY = "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
WARMUP_CALLS = 30  # first calls pay for imports, JIT and cold caches on all sides
ROUND_CALLS = 50  # calls per side per round; even, so edits end where they began
LIST_ENTRIES = 1000
EDIT_FILE_BYTES = 100 * 1024
IO_BYTES = 4096


class StdioClient:
    """Newline-delimited JSON-RPC over a child's stdin/stdout, one call at a time."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.ids = 0
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench_mcp", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdout is not None
        self.ids += 1
        self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"server exited during {method}")
            message = json.loads(line)
            if message.get("id") == self.ids and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method} failed: {message['error']}")
                return message["result"]
            if "method" in message and "id" in message:  # a server request we do not serve
                self.send(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "error": {"code": -32601, "message": "not supported"},
                    }
                )

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{tool} failed: {result['content']}")
        return result

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def text_of(size: int, marker_line: int | None = None) -> str:
    """Numbered lines of source-like text, `size` bytes (64 per line), optionally with
    MARKER_A on a line of its own: realistic for a diff, unlike one repeated line."""
    lines = [
        f"{n:06d} line of source text that an agent reads and edits here!\n"
        for n in range(size // 64)
    ]
    if marker_line is not None:
        lines[marker_line] = "MARKER_A".ljust(63) + "\n"
    return "".join(lines)


def make_workspace(root: Path) -> None:
    (root / "read.txt").write_text(text_of(IO_BYTES))
    many = root / "many"
    many.mkdir()
    for index in range(LIST_ENTRIES):
        (many / f"entry-{index:04d}.txt").write_bytes(b"")
    (root / "edit.txt").write_text(text_of(EDIT_FILE_BYTES, marker_line=EDIT_FILE_BYTES // 128))


@dataclass(frozen=True)
class Op:
    """One operation as each side spells it; `i` alternates edits A->B, B->A."""

    corral: Callable[[int], tuple[str, dict[str, Any]]]
    ref: Callable[[int], tuple[str, dict[str, Any]]]
    direct: Callable[[int], object]


def marker(i: int) -> tuple[str, str]:
    return ("MARKER_A", "MARKER_B") if i % 2 == 0 else ("MARKER_B", "MARKER_A")


def atomic_write(path: Path, data: str) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def direct_list(path: Path) -> list[tuple[str, int, float]]:
    with os.scandir(path) as entries:
        return [(e.name, e.stat().st_size, e.stat().st_mtime) for e in entries]


def direct_edit(path: Path, i: int) -> None:
    old, new = marker(i)
    atomic_write(path, path.read_text().replace(old, new, 1))


def operations(ws: Path) -> dict[str, Op]:
    """The reference server wants absolute paths; corral takes them relative."""
    content = text_of(IO_BYTES)

    def ref_edit(i: int) -> tuple[str, dict[str, Any]]:
        old, new = marker(i)
        return "edit_file", {
            "path": str(ws / "edit.txt"),
            "edits": [{"oldText": old, "newText": new}],
        }

    def corral_edit(i: int) -> tuple[str, dict[str, Any]]:
        old, new = marker(i)
        return "edit_file", {"path": "edit.txt", "old_string": old, "new_string": new}

    listing = ("list_directory", {"path": "many", "max_entries": LIST_ENTRIES})
    return {
        "read 4 KiB": Op(
            lambda i: ("read_file", {"path": "read.txt"}),
            lambda i: ("read_text_file", {"path": str(ws / "read.txt")}),
            lambda i: (ws / "read.txt").read_text(),
        ),
        "write 4 KiB": Op(
            lambda i: ("write_file", {"path": "write.txt", "content": content}),
            lambda i: ("write_file", {"path": str(ws / "write.txt"), "content": content}),
            lambda i: atomic_write(ws / "write.txt", content),
        ),
        "stat": Op(
            lambda i: ("stat_file", {"path": "read.txt"}),
            lambda i: ("get_file_info", {"path": str(ws / "read.txt")}),
            lambda i: os.stat(ws / "read.txt"),
        ),
        "list 1,000 entries": Op(
            lambda i: listing,
            lambda i: ("list_directory", {"path": str(ws / "many")}),
            lambda i: direct_list(ws / "many"),
        ),
        # corral's listing carries each entry's size and mtime (the contract), so it
        # stats every entry; the reference's list_directory does not, this one does
        "list 1,000, ref with sizes": Op(
            lambda i: listing,
            lambda i: ("list_directory_with_sizes", {"path": str(ws / "many")}),
            lambda i: direct_list(ws / "many"),
        ),
        "edit in 100 KiB file": Op(
            corral_edit, ref_edit, lambda i: direct_edit(ws / "edit.txt", i)
        ),
    }


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(sides: dict[str, Callable[[int], object]], calls: int) -> dict[str, list[float]]:
    """Latency samples per side: a warm-up, then alternating rounds."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for run in sides.values():
        for i in range(WARMUP_CALLS):
            run(i)
    for _ in range(calls // ROUND_CALLS):
        for name, run in sides.items():
            for i in range(ROUND_CALLS):
                start = time.perf_counter()
                run(i)
                samples[name].append(time.perf_counter() - start)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ref",
        type=Path,
        default=Path("/tmp/refserver"),
        help="directory where @modelcontextprotocol/server-filesystem is installed",
    )
    parser.add_argument("--calls", type=int, default=500, help="timed calls per operation")
    parser.add_argument(
        "--dir",
        help="where to make the workspace (a tmpfs mount leaves the disk out of the write "
        "and edit times); default: the system's temp directory",
    )
    args = parser.parse_args()
    if args.calls % ROUND_CALLS or args.calls <= 0:
        parser.error(f"--calls must be a positive multiple of {ROUND_CALLS}")
    ref_entry = args.ref / REF_ENTRY
    if not ref_entry.is_file():
        print(f"bench_mcp: error: {ref_entry} not found; see the module docstring", file=sys.stderr)
        return 2

    sys.path.insert(0, str(REPO))
    from corral import Sandbox

    with tempfile.TemporaryDirectory(prefix="bench-mcp-", dir=args.dir) as tmp:
        ws = Path(tmp, "ws")
        ws.mkdir()
        make_workspace(ws)
        config = Path(tmp, "corral.toml")
        config.write_text(f"[limits]\nmax_list_entries = {LIST_ENTRIES}\n")
        corral = StdioClient(
            [
                sys.executable,
                "-m",
                "corral",
                "serve",
                "--workspace",
                str(ws),
                "--config",
                str(config),
            ],
            ws,
        )
        ref = StdioClient(["node", str(ref_entry), str(ws)], ws)
        sandbox = Sandbox.from_config(config, workspace=ws)
        rows = []
        try:
            for name, op in operations(ws).items():
                sides = {
                    "corral": lambda i, op=op: corral.call(*op.corral(i)),
                    "ref": lambda i, op=op: ref.call(*op.ref(i)),
                    "api": lambda i, op=op: sandbox.call(*op.corral(i)),
                    "direct": op.direct,
                }
                rows.append((name, measure(sides, args.calls)))
            confinement = sandbox.confinement
        finally:
            corral.close()
            ref.close()
            sandbox.close()

    us = 1e6
    print(f"corral worker confinement: {json.dumps(confinement)}")
    print(
        f"{args.calls} calls per operation and side after {WARMUP_CALLS} warm-up calls, "
        f"in alternating rounds of {ROUND_CALLS}; times in µs\n"
    )
    header = (
        "operation",
        "corral med",
        "corral p99",
        "ref med",
        "ref p99",
        "ref/corral",
        "api med",
        "direct med",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, samples in rows:
        med = {side: statistics.median(values) for side, values in samples.items()}
        cells = (
            name,
            f"{med['corral'] * us:.0f}",
            f"{percentile(samples['corral'], 0.99) * us:.0f}",
            f"{med['ref'] * us:.0f}",
            f"{percentile(samples['ref'], 0.99) * us:.0f}",
            f"{med['ref'] / med['corral']:.2f}x",
            f"{med['api'] * us:.0f}",
            f"{med['direct'] * us:.0f}",
        )
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
