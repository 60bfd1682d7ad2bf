"""Malformed-input soak of `corral serve` (MCP over stdio), `corral serve --jsonl`
and `corral serve --http`: hypothesis generates batches of broken and half-valid
messages (bytes that are not UTF-8, JSON that is not an object, NaN, deep nesting,
wrong types and ids, real tools with random arguments, huge lines); after each
batch a few valid calls with known answers go in. Every valid call must be
answered right, every output line (over HTTP: every JSON body) must be strict
JSON, no HTTP answer may be a 5xx, the server must never die, and its RSS (read
from outside with psutil) must stay bounded. Over HTTP each message is one POST,
every other one inside a handshake session; of those outside one, half carry the
SEP-2243 headers their body calls for (the others none, so most of theirs are
refused); and the first lines of each batch also go to the --metrics port as raw
bytes, after which a scrape must still parse.

    python scripts/fuzz_servers.py [--messages 100000] [--face mcp|jsonl|http|all]

tests/test_fuzz_servers.py runs a few hundred messages through `fuzz`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

TOOLS = (
    "read_file", "read_multiple_files", "write_file", "edit_file", "append_file",
    "list_directory", "search_files", "grep", "create_directory", "stat_file",
    "move_file", "copy_file", "delete_file", "list_allowed_directories",
)
ARGUMENTS = (
    "path", "paths", "content", "old_string", "new_string", "edits", "offset", "limit",
    "max_bytes", "encoding", "pattern", "glob", "source", "destination", "overwrite",
    "recursive", "replace_all", "dry_run", "expected_version", "max_results",
)
METHODS = (
    "initialize", "ping", "tools/list", "tools/call", "notifications/initialized",
    "notifications/cancelled", "resources/list", "server/discover", "prompts/get", "",
)
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"  # stateless revision's _meta
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
STATELESS_META = {PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {}}
PROBE = "probe-c41d/known.txt"  # a name no generated call is likely to touch
PROBE_TEXT = "the known line\n"
ANSWER_TIMEOUT_S = 60.0  # a valid call is answered within this long, even under load
BATCH = 50  # messages per hypothesis example
METRICS_LINES = 5  # of each batch, also sent to the metrics port as raw bytes

# Leaves and shapes of JSON values, with the awkward corners well represented.
json_leaf = (
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40)
    | st.sampled_from(["", "..", "/etc/passwd", "a\0b", "../outside", "hello.txt", "\u202e", "*"])
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=5),
    max_leaves=15,
)
arguments = st.dictionaries(st.sampled_from(ARGUMENTS) | st.text(max_size=8), json_value,
                            max_size=6)
request_id = json_value


@st.composite
def mcp_message(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON-RPC-shaped object with any of its parts wrong or missing."""
    message: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        message["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]))
    if draw(st.booleans()):
        message["id"] = draw(request_id)
    if draw(st.integers(0, 9)):
        message["method"] = draw(st.sampled_from(METHODS) | st.text(max_size=20))
    if draw(st.booleans()):
        tool_call = {"name": draw(st.sampled_from(TOOLS) | st.text(max_size=12)),
                     "arguments": draw(arguments | json_value)}
        params = draw(st.just(tool_call) | json_value)
        if isinstance(params, dict) and draw(st.booleans()):  # the stateless revision's parts
            meta = {PROTOCOL_VERSION_KEY: draw(st.sampled_from(["2026-07-28", "2025-06-18"])
                                               | json_value),
                    CLIENT_CAPABILITIES_KEY: draw(st.just({}) | json_value)}
            params["_meta"] = draw(st.just(meta) | json_value)
            if draw(st.booleans()):
                params["requestState"] = draw(json_value)
                params["inputResponses"] = draw(json_value)
        message["params"] = params
    if not draw(st.integers(0, 9)):
        message[draw(st.sampled_from(["result", "error"]))] = draw(json_value)
    return message


@st.composite
def jsonl_message(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {}
    if draw(st.booleans()):
        message["id"] = draw(request_id)
    if draw(st.integers(0, 9)):
        message["tool"] = draw(st.sampled_from(TOOLS) | json_value)
    if draw(st.integers(0, 9)):
        message["arguments"] = draw(arguments | json_value)
    return message


def as_line(shaped: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[bytes]:
    """One input line: a shaped message, any JSON value, raw bytes, or a nasty corner."""
    encoded = shaped.map(lambda m: json.dumps(m).encode())
    return st.one_of(
        encoded, encoded, encoded,
        json_value.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=120).map(lambda b: b.replace(b"\n", b" ")),
        st.tuples(encoded, st.integers(0, 200)).map(lambda t: t[0][: t[1]]),  # truncated
        st.sampled_from([
            b"", b" ", b"\r", b"{", b"}", b"[]", b"null", b"NaN", b'{"id": NaN}',
            b'{"id": Infinity, "tool": "stat_file"}', b'{"id": 1e999, "jsonrpc": "2.0"}',
            b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe\x00", b"\xef\xbb\xbf{}",
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}',
            b'{"id": 2, "tool": "read_file", "arguments": {"path": "x\\ud800"}}',
            b"x" * (1024 * 1024),
        ]),
    )


class Server:
    """A `corral serve` child; a thread reads its output lines into a queue."""

    def __init__(self, face: str, workspace: Path) -> None:
        command = [sys.executable, "-m", "corral", "serve", "--workspace", str(workspace)]
        if face == "jsonl":
            command.append("--jsonl")
        self.face = face
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        self.process = subprocess.Popen(  # the corral of this script's tree
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env,
        )
        self.ps = psutil.Process(self.process.pid)
        self.lines: queue.Queue[Any] = queue.Queue()
        self.bad_lines: list[bytes] = []
        self.answers = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.probes = 0
        if face == "mcp":
            self.send([json.dumps({
                "jsonrpc": "2.0", "id": "init", "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "fuzz", "version": "0"}},
            }).encode()])
            self.wait_for("init")
            self.send([b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'])

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.lines.put(json.loads(line, parse_constant=_not_json))
            except ValueError:
                self.bad_lines.append(line[:200])
            self.answers += 1

    def send(self, lines: list[bytes]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"".join(line + b"\n" for line in lines))
        self.process.stdin.flush()

    def wait_for(self, wanted: str) -> Any:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while True:
            try:
                message = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer to {wanted} (server exit: "
                                     f"{self.process.poll()})") from None
            if isinstance(message, dict) and message.get("id") == wanted:
                return message

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """A valid call: the contract's result dict (from structuredContent over MCP)."""
        self.probes += 1
        wanted = f"probe-{self.probes}"
        if self.face == "jsonl":
            self.send([json.dumps({"id": wanted, "tool": tool, "arguments": args}).encode()])
            return self.wait_for(wanted)
        params: dict[str, Any] = {"name": tool, "arguments": args}
        if self.probes % 2:  # every other one at the stateless revision, on the same stream
            params["_meta"] = STATELESS_META
        self.send([json.dumps({"jsonrpc": "2.0", "id": wanted, "method": "tools/call",
                               "params": params}).encode()])
        answer = self.wait_for(wanted)
        result = answer["result"]
        assert result.get("resultType", "complete") == "complete", answer
        return _outcome(result)

    def rss_mb(self) -> float:
        return self.ps.memory_info().rss / 2**20

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(ANSWER_TIMEOUT_S)


class HttpServer:
    """A `corral serve --http` child with one tenant, spoken to over one kept-alive
    connection; each answer is checked as it comes."""

    TOKEN = "fuzz-token-0123456789"

    def __init__(self, workspace: Path) -> None:
        top = workspace.parent
        digest = hashlib.sha256(self.TOKEN.encode()).hexdigest()
        (top / "tenants.toml").write_text(
            f'[[tenant]]\nname = "fuzz"\ntoken_sha256 = "{digest}"\nworkspace = "{workspace}"\n')
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        with open(top / "stderr", "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "corral", "serve", "--http", "127.0.0.1:0",
                 "--tenants", str(top / "tenants.toml"), "--metrics", "127.0.0.1:0"],
                stderr=stderr, env=env, cwd=top)
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while "Prometheus" not in (text := (top / "stderr").read_text()):
            assert time.monotonic() < deadline and self.process.poll() is None, text
            time.sleep(0.02)
        self.port, self.metrics_port = (int(line.rsplit(":", 1)[1].split("/")[0])
                                        for line in text.splitlines()[:2])
        self.scrapes = self.metrics_raw = 0
        self.ps = psutil.Process(self.process.pid)
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port,
                                                     timeout=ANSWER_TIMEOUT_S)
        self.bad_lines: list[bytes] = []
        self.answers = 0
        self.probes = 0
        self.session = ""
        initialize = self.post(json.dumps({
            "jsonrpc": "2.0", "id": "init", "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "fuzz", "version": "0"}}}).encode(), False)
        assert initialize["result"]["protocolVersion"] == "2025-06-18", initialize

    def post(self, body: bytes, in_session: bool, mirrored: dict[str, str] | None = None) -> Any:
        """The JSON answer to one POST (None: none, or not JSON); a 5xx is a bad line.
        `mirrored`: a 2026-07-28 request's SEP-2243 headers (generated lines get
        none, or random ones: they are input like the body)."""
        headers = {"content-type": "application/json", "accept": "application/json",
                   "authorization": f"Bearer {self.TOKEN}", **(mirrored or {})}
        if in_session:
            headers["mcp-session-id"] = self.session
        for attempt in (1, 2):  # the server closes a connection after some refusals
            try:
                self.connection.request("POST", "/mcp", body=body, headers=headers)
                response = self.connection.getresponse()
                data = response.read()
                break
            except (http.client.HTTPException, OSError):
                self.connection.close()
                if attempt == 2:
                    raise
        self.answers += 1
        if response.status >= 500:
            self.bad_lines.append(b"%d %s" % (response.status, data[:200]))
        self.session = response.getheader("mcp-session-id") or self.session
        if not response.getheader("content-type", "").startswith("application/json"):
            return None
        try:
            return json.loads(data, parse_constant=_not_json)
        except ValueError:
            self.bad_lines.append(data[:200])
            return None

    def send(self, lines: list[bytes]) -> None:
        for index, line in enumerate(lines):
            self.post(line, in_session=bool(index % 2),
                      mirrored=_mirrored(line) if index % 4 == 0 else None)
        for line in lines[:METRICS_LINES]:
            self.raw_to_metrics(line)
        self.scrape()

    def raw_to_metrics(self, line: bytes) -> None:
        """`line` as the bytes of a request to the metrics port; a 5xx is a bad line."""
        with socket.create_connection(("127.0.0.1", self.metrics_port), timeout=10) as sock:
            # The port may answer a malformed head and close before all of it is
            # sent: then sendall or shutdown fails, and the answer is still read.
            with contextlib.suppress(OSError):
                sock.sendall(line + b"\r\n\r\n")
                sock.shutdown(socket.SHUT_WR)
            reply = b""
            with contextlib.suppress(OSError):
                while chunk := sock.recv(65536):
                    reply += chunk
        self.metrics_raw += 1
        status = reply.split(b" ", 2)[1] if reply.startswith(b"HTTP/1.1 ") else b""
        if status.startswith(b"5"):
            self.bad_lines.append(b"metrics port: " + reply[:200])

    def scrape(self) -> None:
        """The metrics page, which must parse as Prometheus text."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=ANSWER_TIMEOUT_S) as page:
            families = list(text_string_to_metric_families(page.read().decode()))
        assert any(family.name == "corral_calls" for family in families), families
        self.scrapes += 1

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """A valid call, every other one at the stateless revision (no session)."""
        self.probes += 1
        params: dict[str, Any] = {"name": tool, "arguments": args}
        if self.probes % 2:
            params["_meta"] = STATELESS_META
        wanted = f"probe-{self.probes}"
        mirrored = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call",
                    "mcp-name": tool} if self.probes % 2 else None
        answer = self.post(json.dumps({"jsonrpc": "2.0", "id": wanted, "method": "tools/call",
                                       "params": params}).encode(), not self.probes % 2,
                           mirrored)
        assert answer is not None and answer["id"] == wanted, answer
        result = answer["result"]
        return _outcome(result)

    def rss_mb(self) -> float:
        return self.ps.memory_info().rss / 2**20

    def close(self) -> int:
        """0 when the server stopped as SIGINT asks (exit code 130, the shell's way)."""
        self.connection.close()
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(ANSWER_TIMEOUT_S)
        return 0 if code == 130 else code


def _mirrored(line: bytes) -> dict[str, str]:
    """The SEP-2243 headers a client would send for `line`, where it is a request of
    the stateless revision and they can be spelled in ASCII."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than json parses
        return {}
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return {}
    values = {"mcp-protocol-version": meta.get(PROTOCOL_VERSION_KEY),
              "mcp-method": message.get("method"),
              "mcp-name": params.get("uri" if message.get("method") == "resources/read"
                                     else "name")}
    return {name: value for name, value in values.items()
            if isinstance(value, str) and value.isascii() and value.isprintable()}


def _outcome(result: dict[str, Any]) -> dict[str, Any]:
    """A tools/call result as the contract's answer, whichever face carried it."""
    if result.get("isError"):
        return {"ok": False, "error": result["structuredContent"]["error"]}
    return {"ok": True, "result": result["structuredContent"]}


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def check_valid_calls(server: Server) -> None:
    """Calls with known answers: each must be answered, and right."""
    read = server.call("read_file", {"path": PROBE})
    assert read["ok"] and read["result"]["content"] == PROBE_TEXT, read
    stat = server.call("stat_file", {"path": PROBE})
    assert stat["ok"] and stat["result"]["size"] == len(PROBE_TEXT), stat
    found = server.call("grep", {"pattern": "known line", "path": os.path.dirname(PROBE)})
    assert found["ok"] and [m["path"] for m in found["result"]["matches"]] == [PROBE], found
    outside = server.call("read_file", {"path": "../outside.txt"})
    assert not outside["ok"] and outside["error"]["code"] == "outside_workspace", outside


def fuzz(face: str, workspace: Path, messages: int, seed: int | None = None) -> dict[str, Any]:
    """Send `messages` generated lines to a fresh server; AssertionError on a broken
    promise. Returns counts and RSS figures (MiB)."""
    (workspace / os.path.dirname(PROBE)).mkdir(parents=True, exist_ok=True)
    (workspace / PROBE).write_text(PROBE_TEXT)
    (workspace / "hello.txt").write_text("hello\n")  # a file the generated calls may change
    (workspace.parent / "outside.txt").write_text("outside\n")
    server = HttpServer(workspace) if face == "http" else Server(face, workspace)
    shaped = jsonl_message() if face == "jsonl" else mcp_message()
    stats: dict[str, Any] = {"sent": 0, "rss_start_mb": server.rss_mb(), "rss_max_mb": 0.0}
    examples = max(1, math.ceil(messages / BATCH))

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is not None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.lists(as_line(shaped), min_size=BATCH, max_size=BATCH))
    def batch(lines: list[bytes]) -> None:
        if stats["sent"] >= messages:
            return
        server.send(lines)
        stats["sent"] += len(lines)
        check_valid_calls(server)
        assert server.process.poll() is None, "the server died"
        assert not server.bad_lines, f"output that is not strict JSON: {server.bad_lines[:3]}"
        rss = server.rss_mb()
        stats["rss_max_mb"] = max(stats["rss_max_mb"], rss)
        if stats["sent"] == BATCH * 20:
            stats["rss_warm_mb"] = rss  # after the first 1,000 messages

    try:
        batch()
        stats["rss_end_mb"] = server.rss_mb()
        stats["answers"] = server.answers
        stats["valid_calls"] = server.probes
        if isinstance(server, HttpServer):
            stats["metrics_raw"], stats["scrapes"] = server.metrics_raw, server.scrapes
    finally:
        code = server.close()
    assert code == 0, f"the server exited with {code}"
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--face", default="all", choices=["mcp", "jsonl", "http", "all"])
    args = parser.parse_args()
    for face in ["mcp", "jsonl", "http"] if args.face == "all" else [args.face]:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.monotonic()
            stats = fuzz(face, Path(tmp) / "ws", args.messages)
            took = time.monotonic() - start
        print(f"{face}: {stats['sent']} generated messages + {stats['valid_calls']} valid calls "
              f"(all answered right) in {took:.0f} s; {stats['answers']} output lines, all "
              f"strict JSON; server RSS start {stats['rss_start_mb']:.1f} MiB, after 1,000 "
              f"{stats.get('rss_warm_mb', 0):.1f}, max {stats['rss_max_mb']:.1f}, end "
              f"{stats['rss_end_mb']:.1f}")
        if "scrapes" in stats:
            print(f"  metrics port: {stats['metrics_raw']} generated requests, none answered "
                  f"5xx; {stats['scrapes']} scrapes between them, each parsed")


if __name__ == "__main__":
    main()
