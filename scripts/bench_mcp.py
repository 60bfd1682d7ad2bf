"""Per-call latency of `corral serve` against the reference MCP filesystem server.

Both servers are driven by the same raw JSON-RPC stdio client in the same run
(one request in flight at a time, so client overhead is equal), on the same
files: a listing of 1,000 files, reads of 1 MiB and 4 KiB of text, writes of
1 MiB and of a new 4 KiB file, an overwrite of 4 KiB (its text changed each
call), a mkdir, a stat and one edit in a 100 KiB file. corral runs with
`max_read_bytes = 4 MiB` and `max_list_entries = 5000`, so both servers do the
same work. Every answer is checked (content read, entries listed, bytes on
disk after a write or an edit): a server that answers fast but wrong fails the
run. A `direct` column does the same operation in this process with plain os
calls (writes as temp file + fsync + rename), the floor under both servers.

Two modes: back to back (the next call as soon as the answer is in) and with
an idle gap (a 20 ms pause before each call, as an agent thinks between tool
calls, so every process on both sides has gone to sleep). Rounds of each side
alternate, so a change in machine load hits both; the run is done twice and
each cell is the better of the two rounds' medians (p99 from the same round).

Every row is also reported at equal work: `corral (equal)` is a second corral
server that does what the reference does, no more. The reference never fsyncs,
so it runs with `durability = "none"`; the reference's structuredContent holds
the content once, so it runs with `--no-structured-text` (corral repeats the
model's text there for clients that show a model structuredContent, which this
client, by its name, is not).
The `corral` column is the default (every write fsync'd before it is reported,
the text repeated). `--before TREE` adds another checkout's server, at its
defaults and at equal work, to the same rounds: a before/after table in one run.

The reference server is found in the directory given by --ref (default
/work/refserver, then /tmp/refserver), where it was installed with npm:

    mkdir -p /work/refserver && cd /work/refserver
    npm install @modelcontextprotocol/server-filesystem

    python scripts/bench_mcp.py [--ref DIR] [--calls 200] [--gap-ms 20] [--before TREE]
"""

from __future__ import annotations

import argparse
import itertools
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

import psutil

REPO = Path(__file__).resolve().parent.parent
REF_ENTRY = "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
REF_DIRS = (Path("/work/refserver"), Path("/tmp/refserver"))
WARMUP_CALLS = 20  # first calls pay for imports, JIT and cold caches on all sides
ROUND_CALLS = 20  # calls per side per round; even, so edits end where they began
# Back to back, each round starts with this many calls left untimed: the other sides'
# rounds were an idle gap for this side, and its first call would be a cold call
# counted as a back-to-back one (1 in ROUND_CALLS: the whole p99). Even, as above.
ROUND_WARMUP_CALLS = 2
LIST_ENTRIES = 1000
MIB = 1024 * 1024
EDIT_FILE_BYTES = 100 * 1024
SMALL_BYTES = 4096
BIG_CALLS_DIVISOR = 4  # 1 MiB rows and the listing take 10-100x longer: fewer calls


class StdioClient:
    """Newline-delimited JSON-RPC over a child's stdin/stdout, one call at a time."""

    def __init__(self, argv: list[str], cwd: Path, tree: Path = REPO,
                 name: str = "bench_mcp") -> None:
        env = dict(os.environ, PYTHONPATH=str(tree))
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.ids = 0
        self.answer_bytes = 0  # the last answer's size on the wire
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": name, "version": "1"},
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
                self.answer_bytes = len(line)
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

    def cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by the server and all its processes
        (corral's host, zygote and workers; node's one process). Workers that ended
        meanwhile are not counted: none do in this run (recycling is at 10,000 calls)."""
        total = 0.0
        root = psutil.Process(self.proc.pid)
        for process in (root, *root.children(recursive=True)):
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


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


SMALL_TEXT = text_of(SMALL_BYTES)
BIG_TEXT = text_of(MIB)
NAMES = [f"entry-{index:04d}.txt" for index in range(LIST_ENTRIES)]


def make_workspace(root: Path) -> None:
    (root / "read.txt").write_text(SMALL_TEXT)
    (root / "big.txt").write_text(BIG_TEXT)
    for name in ("new", "dirs"):  # what each write of a new file or mkdir makes
        (root / name).mkdir()
    many = root / "many"
    many.mkdir()
    for name in NAMES:
        (many / name).write_bytes(b"")
    (root / "edit.txt").write_text(text_of(EDIT_FILE_BYTES, marker_line=EDIT_FILE_BYTES // 128))
    (root / "over.txt").write_text(SMALL_TEXT)


def marker(i: int) -> tuple[str, str]:
    return ("MARKER_A", "MARKER_B") if i % 2 == 0 else ("MARKER_B", "MARKER_A")


class WrongAnswer(AssertionError):
    pass


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise WrongAnswer(what)


def structured(result: dict[str, Any]) -> dict[str, Any]:
    return result.get("structuredContent") or {}


def text(result: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in result["content"])


@dataclass(frozen=True)
class Op:
    """One operation as each side spells it, and how its answer is checked.

    `corral`/`ref` give (tool, arguments) for call i; `check_*` raise WrongAnswer
    for a wrong answer to call i; `direct` does it in-process; `big` marks a long row."""

    corral: Callable[[int], tuple[str, dict[str, Any]]]
    ref: Callable[[int], tuple[str, dict[str, Any]]]
    check_corral: Callable[[int, dict[str, Any]], None]
    check_ref: Callable[[int, dict[str, Any]], None]
    direct: Callable[[int], object]
    big: bool = False


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


def fresh(prefix: str) -> tuple[Callable[[], str], Callable[[], str]]:
    """(next name, last name given): a new file or directory each call, whatever
    the call's index in its round."""
    count = itertools.count()
    last = [""]

    def new() -> str:
        last[0] = f"{prefix}{next(count)}"
        return last[0]

    return new, lambda: last[0]


def operations(ws: Path) -> dict[str, Op]:
    """The reference server wants absolute paths; corral takes them relative."""

    def on_disk(name: str, data: str) -> Callable[[int, dict[str, Any]], None]:
        def check(i: int, result: dict[str, Any]) -> None:
            expect((ws / name).read_text() == data, f"{name} on disk is not what was written")

        return check

    def edited(i: int, result: dict[str, Any]) -> None:
        body = (ws / "edit.txt").read_text()
        new = marker(i)[1]
        expect(body.count(new) == 1 and "MARKER" not in body.replace(new, ""), "edit not applied")

    def corral_read(data: str) -> Callable[[int, dict[str, Any]], None]:
        def check(i: int, result: dict[str, Any]) -> None:
            answer = structured(result)
            expect(answer.get("content") == data, "read_file content differs")
            expect(answer.get("next_offset") is None, "read_file stopped early")
            expect(data[-60:-1] in text(result), "read_file text lacks the last line")

        return check

    def ref_read(data: str) -> Callable[[int, dict[str, Any]], None]:
        def check(i: int, result: dict[str, Any]) -> None:
            expect(text(result) == data, "read_text_file content differs")
            expect(structured(result).get("content") == data, "structured content differs")

        return check

    def corral_listed(i: int, result: dict[str, Any]) -> None:
        entries = structured(result)["entries"]
        expect(sorted(e["name"] for e in entries) == NAMES, "listing differs")
        expect(all(e["size"] == 0 and e["type"] == "file" for e in entries), "entry sizes")
        expect(all(name in text(result) for name in (NAMES[0], NAMES[-1])), "listing text")

    def ref_listed(i: int, result: dict[str, Any]) -> None:
        names = sorted(line.split("] ", 1)[1] for line in text(result).splitlines())
        expect(names == NAMES, "listing differs")

    def ref_listed_sizes(i: int, result: dict[str, Any]) -> None:
        lines = [line for line in text(result).splitlines() if line.startswith("[FILE]")]
        names = sorted(line.split("] ", 1)[1].rsplit(None, 2)[0].strip() for line in lines)
        expect(names == NAMES, "listing with sizes differs")

    def corral_stat(i: int, result: dict[str, Any]) -> None:
        answer = structured(result)
        expect(answer.get("size") == len(SMALL_TEXT) and answer.get("type") == "file", "stat")

    def ref_stat(i: int, result: dict[str, Any]) -> None:
        expect(f"size: {len(SMALL_TEXT)}" in text(result), "get_file_info size")

    def ref_edit(i: int) -> tuple[str, dict[str, Any]]:
        old, new = marker(i)
        return "edit_file", {
            "path": str(ws / "edit.txt"),
            "edits": [{"oldText": old, "newText": new}],
        }

    def corral_edit(i: int) -> tuple[str, dict[str, Any]]:
        old, new = marker(i)
        return "edit_file", {"path": "edit.txt", "old_string": old, "new_string": new}

    def made(last: Callable[[], str], data: str | None) -> Callable[[int, dict[str, Any]], None]:
        def check(i: int, result: dict[str, Any]) -> None:
            path = ws / last()
            if data is None:
                expect(path.is_dir(), f"{last()} was not made")
            else:
                expect(path.read_text() == data, f"{last()} on disk is not what was written")

        return check

    # one name sequence per side: corral's checkouts share one (each name made once)
    corral_file, corral_file_last = fresh("new/c-")
    ref_file, ref_file_last = fresh("new/r-")
    corral_dir, corral_dir_last = fresh("dirs/c-")
    ref_dir, ref_dir_last = fresh("dirs/r-")
    other = {SMALL_TEXT: SMALL_TEXT.replace("line", "LINE")}  # overwrite: A, B, A, ...
    other[other[SMALL_TEXT]] = SMALL_TEXT

    def overwrite_text(i: int) -> str:
        return SMALL_TEXT if i % 2 == 0 else other[SMALL_TEXT]

    def overwritten(i: int, result: dict[str, Any]) -> None:
        expect((ws / "over.txt").read_text() == overwrite_text(i), "over.txt differs")

    def read_args(name: str) -> dict[str, Any]:
        return {"path": name, "limit": 100_000, "max_bytes": 4 * MIB}

    return {
        "list 1,000 files": Op(
            lambda i: ("list_directory", {"path": "many", "max_entries": LIST_ENTRIES}),
            lambda i: ("list_directory", {"path": str(ws / "many")}),
            corral_listed,
            ref_listed,
            lambda i: direct_list(ws / "many"),
            big=True,
        ),
        # the same work on both sides: corral's listing always carries each entry's
        # size and time (a stat each); the reference's plain list_directory does not
        "list 1,000 files, with sizes": Op(
            lambda i: ("list_directory", {"path": "many", "max_entries": LIST_ENTRIES}),
            lambda i: ("list_directory_with_sizes", {"path": str(ws / "many")}),
            corral_listed,
            ref_listed_sizes,
            lambda i: direct_list(ws / "many"),
            big=True,
        ),
        "read 1 MiB text": Op(
            lambda i: ("read_file", read_args("big.txt")),
            lambda i: ("read_text_file", {"path": str(ws / "big.txt")}),
            corral_read(BIG_TEXT),
            ref_read(BIG_TEXT),
            lambda i: (ws / "big.txt").read_text(),
            big=True,
        ),
        "write 1 MiB": Op(
            lambda i: ("write_file", {"path": "wbig.txt", "content": BIG_TEXT}),
            lambda i: ("write_file", {"path": str(ws / "wbig.txt"), "content": BIG_TEXT}),
            on_disk("wbig.txt", BIG_TEXT),
            on_disk("wbig.txt", BIG_TEXT),
            lambda i: atomic_write(ws / "wbig.txt", BIG_TEXT),
            big=True,
        ),
        "write 4 KiB": Op(  # a new file each call
            lambda i: ("write_file", {"path": corral_file(), "content": SMALL_TEXT}),
            lambda i: ("write_file", {"path": str(ws / ref_file()), "content": SMALL_TEXT}),
            made(corral_file_last, SMALL_TEXT),
            made(ref_file_last, SMALL_TEXT),
            lambda i: atomic_write(ws / "new" / f"d-{i}", SMALL_TEXT),
        ),
        "overwrite 4 KiB": Op(  # the same file, its text changed each call
            lambda i: ("write_file", {"path": "over.txt", "content": overwrite_text(i)}),
            lambda i: ("write_file", {"path": str(ws / "over.txt"),
                                      "content": overwrite_text(i)}),
            overwritten,
            overwritten,
            lambda i: atomic_write(ws / "over.txt", overwrite_text(i)),
        ),
        "mkdir": Op(
            lambda i: ("create_directory", {"path": corral_dir()}),
            lambda i: ("create_directory", {"path": str(ws / ref_dir())}),
            made(corral_dir_last, None),
            made(ref_dir_last, None),
            lambda i: os.mkdir(ws / "dirs" / f"d-{time.perf_counter_ns()}"),
        ),
        "stat": Op(
            lambda i: ("stat_file", {"path": "read.txt"}),
            lambda i: ("get_file_info", {"path": str(ws / "read.txt")}),
            corral_stat,
            ref_stat,
            lambda i: os.stat(ws / "read.txt"),
        ),
        "read 4 KiB": Op(
            lambda i: ("read_file", read_args("read.txt")),
            lambda i: ("read_text_file", {"path": str(ws / "read.txt")}),
            corral_read(SMALL_TEXT),
            ref_read(SMALL_TEXT),
            lambda i: (ws / "read.txt").read_text(),
        ),
        "edit in 100 KiB": Op(
            corral_edit,
            ref_edit,
            edited,
            edited,
            lambda i: direct_edit(ws / "edit.txt", i),
        ),
    }


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(
    sides: dict[str, Callable[[int], Any]],
    checks: dict[str, Callable[[int, Any], None]],
    cpu: dict[str, Callable[[], float]],
    calls: int,
    gap_s: float,
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Latency samples per side: a warm-up, then alternating rounds of ROUND_CALLS.
    Each answer is checked after its time is taken; `gap_s` idles before each call.
    Also each server's CPU seconds per timed call (the checks run in this process)."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    used = dict.fromkeys(cpu, 0.0)
    for name, run in sides.items():
        for i in range(WARMUP_CALLS):
            checks[name](i, run(i))
    for _ in range(max(1, calls // ROUND_CALLS)):
        for name, run in sides.items():
            for i in range(0 if gap_s else ROUND_WARMUP_CALLS):
                checks[name](i, run(i))
            before = cpu[name]() if name in cpu else 0.0
            for i in range(ROUND_CALLS):
                if gap_s:
                    time.sleep(gap_s)
                start = time.perf_counter()
                answer = run(i)
                samples[name].append(time.perf_counter() - start)
                checks[name](i, answer)  # at once: an edit's check reads the file
            if name in cpu:
                used[name] += cpu[name]() - before
    return samples, {name: used[name] / len(samples[name]) for name in cpu}


@dataclass
class Cell:
    median: float
    p99: float
    cpu: float | None  # the server's CPU seconds per call, that run


def best(rounds: list[tuple[dict[str, list[float]], dict[str, float]]]) -> dict[str, Cell]:
    """Per side, the run with the lower median (and that run's p99 and CPU)."""
    cells = {}
    for side in rounds[0][0]:
        samples, cpu = min(rounds, key=lambda run: statistics.median(run[0][side]))
        chosen = samples[side]
        cells[side] = Cell(statistics.median(chosen), percentile(chosen, 0.99), cpu.get(side))
    return cells


def find_ref(given: Path | None) -> Path | None:
    for directory in (given,) if given else REF_DIRS:
        if (directory / REF_ENTRY).is_file():
            return directory / REF_ENTRY
    return None


def has(tree: Path, source: str, spelled: str) -> bool:
    """Whether the checkout's `source` file spells an option (older ones lack some)."""
    path = tree / source
    return path.is_file() and spelled in path.read_text()


def corral_server(ws: Path, config: Path, tree: Path, equal: bool) -> StdioClient:
    """`corral serve` of `tree`; equal: the work the reference does (see the docstring)."""
    serve = ["serve", "--workspace", str(ws), "--config", str(config)]
    if equal and has(tree, "corral/faces/cli.py", "--no-structured-text"):
        serve.append("--no-structured-text")
    return StdioClient([sys.executable, "-m", "corral", *serve], ws, tree)


def configs(tmp: str, tree: Path, name: str) -> tuple[Path, Path]:
    """The default and the equal-work config of one checkout, each with its own store."""
    limits = f"[limits]\nmax_list_entries = 5000\nmax_read_bytes = {4 * MIB}\n"
    default = Path(tmp, f"{name}.toml")
    default.write_text(limits + f'[history]\npath = "{tmp}/history-{name}"\n')
    equal = Path(tmp, f"{name}-equal.toml")
    nosync = ('[sandbox]\ndurability = "none"\n'  # its key, where the checkout knows it
              if any(has(tree, source, '"durability"')
                     for source in ("corral/config_keys.py", "corral/config.py")) else "")
    equal.write_text(limits + f'[history]\npath = "{tmp}/history-{name}-equal"\n' + nosync)
    return default, equal


def table(rows: list[tuple[str, dict[str, Cell]]], before: bool) -> list[str]:
    ms = 1e3
    header = [
        "operation", "corral med", "corral p99", "ref med", "ref p99", "corral / ref",
        "corral (equal) med", "(equal) / ref",
    ]
    if before:
        header += ["before med", "before / ref", "before (equal) / ref"]
    header += ["direct med", "CPU/call corral", "CPU/call ref"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, cells in rows:
        corral, ref, direct, equal = (
            cells["corral"], cells["ref"], cells["direct"], cells["corral (equal)"])
        row = [
            name, f"{corral.median * ms:.2f}", f"{corral.p99 * ms:.2f}",
            f"{ref.median * ms:.2f}", f"{ref.p99 * ms:.2f}", f"{corral.median / ref.median:.2f}x",
            f"{equal.median * ms:.2f}", f"{equal.median / ref.median:.2f}x",
        ]
        if before:
            old, old_equal = cells["before"], cells["before (equal)"]
            row += [f"{old.median * ms:.2f}", f"{old.median / ref.median:.2f}x",
                    f"{old_equal.median / ref.median:.2f}x"]
        row += [
            f"{direct.median * ms:.2f}",
            f"{corral.cpu * ms:.2f}" if corral.cpu is not None else "",
            f"{ref.cpu * ms:.2f}" if ref.cpu is not None else "",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ref",
        type=Path,
        help="directory where @modelcontextprotocol/server-filesystem is installed "
        f"(default: the first of {', '.join(map(str, REF_DIRS))} that has it)",
    )
    parser.add_argument("--calls", type=int, default=200, help="timed calls per small row")
    parser.add_argument("--gap-ms", type=float, default=20.0, help="idle gap in the cold mode")
    parser.add_argument("--rounds", type=int, default=2, help="runs; the better one counts")
    parser.add_argument("--only", help="run the rows whose name contains this")
    parser.add_argument("--before", type=Path, metavar="TREE",
                        help="another corral checkout to run in the same rounds")
    parser.add_argument(
        "--dir",
        help="where to make the workspace (a tmpfs mount leaves the disk out of the write "
        "and edit times); default: the system's temp directory",
    )
    args = parser.parse_args()
    if args.calls % ROUND_CALLS or args.calls <= 0:
        parser.error(f"--calls must be a positive multiple of {ROUND_CALLS}")
    ref_entry = find_ref(args.ref)
    if ref_entry is None:
        print("bench_mcp: error: reference server not found; see the module docstring",
              file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="bench-mcp-", dir=args.dir) as tmp:
        ws = Path(tmp, "ws")
        ws.mkdir()
        make_workspace(ws)
        # each server's history store in the run's own directory, gone with it
        trees = {"corral": REPO, **({"before": args.before.resolve()} if args.before else {})}
        servers: dict[str, StdioClient] = {}
        for name, tree in trees.items():
            default, equal = configs(tmp, tree, name)
            servers[name] = corral_server(ws, default, tree, equal=False)
            servers[f"{name} (equal)"] = corral_server(ws, equal, tree, equal=True)
        ref = StdioClient(["node", str(ref_entry), str(ws)], ws)
        results: dict[str, list[tuple[str, dict[str, Cell]]]] = {}
        load = os.getloadavg()
        try:
            for mode, gap in (("back to back", 0.0), (f"{args.gap_ms:g} ms gaps", args.gap_ms)):
                rows = results.setdefault(mode, [])
                for name, op in operations(ws).items():
                    if args.only and args.only not in name:
                        continue
                    sides: dict[str, Callable[[int], Any]] = {
                        name: lambda i, op=op, server=server: server.call(*op.corral(i))
                        for name, server in servers.items()
                    }
                    sides |= {"ref": lambda i, op=op: ref.call(*op.ref(i)), "direct": op.direct}
                    checks: dict[str, Callable[[int, Any], None]] = dict.fromkeys(
                        servers, op.check_corral)
                    checks |= {"ref": op.check_ref, "direct": lambda i, answer: None}
                    cpu = {"corral": servers["corral"].cpu_seconds, "ref": ref.cpu_seconds}
                    calls = args.calls // BIG_CALLS_DIVISOR if op.big else args.calls
                    rounds = [
                        measure(sides, checks, cpu, calls, gap / 1e3) for _ in range(args.rounds)
                    ]
                    rows.append((name, best(rounds)))
        finally:
            for server in servers.values():
                server.close()
            ref.close()
    load_after = os.getloadavg()
    print(
        f"{args.calls} timed calls per small row ({args.calls // BIG_CALLS_DIVISOR} for the "
        f"1 MiB rows and the listing) and side, after {WARMUP_CALLS} warm-up calls, in "
        f"alternating rounds of {ROUND_CALLS}; better of {args.rounds} runs; every answer "
        f"verified; times in ms (CPU/call: the server's processes' CPU time per call, from "
        f"psutil: what a call costs whatever the load); load average {load[0]:.1f} before, "
        f"{load_after[0]:.1f} after"
    )
    for mode, rows in results.items():
        print(f"\n{mode}:\n")
        print("\n".join(table(rows, before=args.before is not None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
