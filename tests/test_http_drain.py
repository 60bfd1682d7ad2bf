"""`corral serve --http` where platforms run it: the probes (/healthz, /readyz),
SIGTERM's drain with calls in flight, and SIGHUP's reload of the tenants file
under load. Real servers, real signals; the slow calls are a grep whose pattern
backtracks until its timeout, and writes queued behind it (--max-workers 1)."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral.faces.health import Readiness
from tests.helpers.http_helpers import (
    STATELESS_META,
    TOKENS,
    Server,
    call,
    mirrored,
    post,
    running_server,
    sha256,
)

SETTLE_S = 30.0  # only a safety net: what the tests wait for happens in seconds
CAROL = "carol-token-0000000000"
SLOW = {"pattern": "(a+)+$"}  # backtracks on slow.txt until the call's timeout_s


def get(server: Server, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def entry(name: str, token: str, workspace: Path) -> str:
    return (f'[[tenant]]\nname = "{name}"\ntoken_sha256 = "{sha256(token)}"\n'
            f'workspace = "{workspace}"\n')


@contextlib.contextmanager
def serving(tmp_path: Path, timeout_s: int, *flags: str) -> Iterator[Server]:
    """alice (a config: timeout_s, delete on) and bob (a workspace), each with slow.txt."""
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    for workspace in (alice, bob):
        workspace.mkdir()
        (workspace / "slow.txt").write_text("a" * 40 + "b\n")
    (tmp_path / "alice.toml").write_text(
        f'[workspace]\nroot = "{alice}"\n[limits]\ntimeout_s = {timeout_s}\n')
    (tmp_path / "tenants.toml").write_text(
        f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{sha256(TOKENS["alice"])}"\n'
        f'config = "{tmp_path / "alice.toml"}"\n' + entry("bob", TOKENS["bob"], bob))
    yield from running_server(tmp_path, alice, bob, *flags)


class Client(threading.Thread):
    """One POST on a thread of its own; `sent` once the request is on the wire."""

    def __init__(self, server: Server, message: dict[str, Any], token: str = "alice") -> None:
        super().__init__(daemon=True)
        self.server, self.message, self.token = server, message, token
        self.sent = threading.Event()
        self.status: int | None = None
        self.body: Any = None
        self.start()

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        try:
            connection.request("POST", "/mcp", body=json.dumps(self.message).encode(), headers={
                "content-type": "application/json", "accept": "application/json",
                "authorization": f"Bearer {TOKENS.get(self.token, self.token)}",
                **mirrored(self.message)})
            self.sent.set()
            response = connection.getresponse()
            self.status, raw = response.status, response.read()
            self.body = json.loads(raw) if self.status == 200 else raw
        finally:
            self.sent.set()
            connection.close()

    def result(self) -> dict[str, Any]:
        self.join(SETTLE_S)
        assert self.status == 200, (self.status, self.body)
        structured: dict[str, Any] = self.body["result"]["structuredContent"]
        return structured


def grep_running(server: Server) -> bool:
    """A worker of the server burns CPU: the slow grep runs."""
    for process in psutil.Process(server.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # an idle worker may exit meanwhile
            if process.cpu_percent(0.05) > 30:
                return True
    return False


# -- the probes ----------------------------------------------------------------------


def test_the_probes_answer_without_a_token_and_name_nothing(tmp_path: Path) -> None:
    with serving(tmp_path, 10) as server:
        status, headers, body = get(server, "/healthz")
        assert (status, body) == (200, b"ok\n") and headers["cache-control"] == "no-store"
        until(lambda: get(server, "/readyz")[0] == 200, "never ready")
        assert get(server, "/readyz")[2] == b"ready\n"
        assert get(server, "/readyz", "HEAD")[:1] == (200,)
        status, headers, _ = get(server, "/readyz", "POST")
        assert status == 405 and headers["allow"] == "GET, HEAD"
        assert get(server, "/metrics")[0] == 404  # the MCP face's 404, not a probe
        for path in ("/healthz", "/readyz"):
            text = get(server, path)[2].decode()
            assert "alice" not in text and "bob" not in text and str(tmp_path) not in text
        # no --drain-timeout: the longest timeout_s of the tenants (alice's 10 s), plus 5
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(SETTLE_S) == 0
        assert "those in flight have up to 15 s" in _log_so_far(server).decode()


class _Stub:
    """A probe sandbox whose worker reports `layers` and answers `ok`."""

    def __init__(self, layers: dict[str, Any], ok: bool = True) -> None:
        self.confinement = {"landlock_abi": 0, "seccomp": False, "no_new_privs": False,
                            "openat2": False, "rlimits": False, "mount_namespace": False,
                            **layers}
        self.ok = ok

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True} if self.ok else {"ok": False, "error": {"code": "worker_crashed"}}

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("layers", "ok", "short"), [
    ({"landlock_abi": 7, "seccomp": True}, True, None),
    ({"seccomp": True}, True, "the confinement lacks required layer(s): landlock"),
    ({"landlock_abi": 7, "seccomp": True}, False,
     "halted: a worker of the pool fails its call (worker_crashed)"),
])
def test_readiness_says_why_not_in_a_few_words(
    layers: dict[str, Any], ok: bool, short: str | None
) -> None:
    """What the probe's worker reports decides (the real server's layers are all
    there on this machine; the container test meets a missing one for real)."""
    readiness = Readiness(None, ["landlock", "seccomp"])  # type: ignore[arg-type]
    readiness._sandbox = _Stub(layers, ok)
    try:
        assert readiness.short == "starting"
        assert readiness.check() == short
    finally:
        readiness.close()


# -- SIGTERM ---------------------------------------------------------------------------


def test_sigterm_drains_and_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """The grep holds the one worker for its 8 s; four writes queue behind it. At
    SIGTERM /readyz is 503 at once, a new request is still served during the 2 s
    delay, then refused 503 with Retry-After; the grep and the queued writes end
    and are answered; the server exits 0 and every acknowledged write is on disk."""
    with serving(tmp_path, 8, "--max-workers", "1", "--drain-delay", "2",
                 "--drain-timeout", "60") as server:
        until(lambda: get(server, "/readyz")[0] == 200, "never ready")
        slow = Client(server, call("grep", SLOW))
        until(lambda: grep_running(server), "the grep never ran")
        writes = [Client(server, call("write_file", {"path": f"w{n}.txt", "content": f"{n}\n"},
                                      request_id=n)) for n in range(4)]
        for client in writes:
            assert client.sent.wait(SETTLE_S)
        server.process.send_signal(signal.SIGTERM)
        until(lambda: get(server, "/readyz")[::2] == (503, b"not ready: draining\n"),
              "still ready")
        assert get(server, "/healthz")[0] == 200  # alive: it serves
        # within the delay a new request is served (it waits behind the writes)
        late = Client(server, call("write_file", {"path": "late.txt", "content": "late\n"}))
        assert late.sent.wait(SETTLE_S)

        # the probe needs no worker: served during the delay it is answered at once
        # (a call would queue behind the grep, and the server could drain meanwhile)
        listing = {"jsonrpc": "2.0", "id": 9, "method": "tools/list",
                   "params": {"_meta": STATELESS_META}}

        def refused() -> bool:
            status, headers, body = post(server, listing)
            return status == 503 and headers["retry-after"] == "5" and b"shutting down" in body
        until(refused, "new requests were never refused")
        assert slow.result()["error"]["code"] == "timeout"
        assert server.process.wait(SETTLE_S) == 0
    for n, client in enumerate(writes):
        assert "error" not in client.result(), client.body
        assert (server.alice / f"w{n}.txt").read_text() == f"{n}\n"
    assert "error" not in late.result() and (server.alice / "late.txt").read_text() == "late\n"


def test_the_drain_deadline_ends_what_is_left_and_exits_0(tmp_path: Path) -> None:
    with serving(tmp_path, 60, "--drain-timeout", "1") as server:
        slow = Client(server, call("grep", SLOW))
        until(lambda: grep_running(server), "the grep never ran")
        workers = psutil.Process(server.process.pid).children(recursive=True)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(SETTLE_S) == 0  # long before the grep's 60 s
        assert slow.result()["error"]["code"] == "worker_crashed"
        assert not [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        stderr = server.process.stderr.read().decode()  # type: ignore[union-attr]
        assert "1 request(s) still in flight after 1 s: their calls are ended" in stderr


# -- SIGHUP ----------------------------------------------------------------------------


def test_sighup_reloads_the_tenants_under_load(tmp_path: Path) -> None:
    """alice calls without a pause all along and none of her calls fails. bob is
    removed while his slow grep runs: his token is refused from then on and his
    grep still gets its own answer; carol, added, is served at once. A broken file
    then is one error in the log and changes nothing."""
    with serving(tmp_path, 3) as server:
        tenants = tmp_path / "tenants.toml"
        carol = tmp_path / "carol"
        carol.mkdir()
        (carol / "c.txt").write_text("carol\n")
        failures: list[Any] = []
        calls = 0
        stop = threading.Event()

        def load() -> None:
            nonlocal calls
            while not stop.is_set():
                status, _, body = post(server, call("stat_file", {"path": "slow.txt"}))
                calls += 1
                if status != 200 or json.loads(body)["result"].get("isError"):
                    failures.append((status, body))

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        bobs = Client(server, call("grep", SLOW), token="bob")
        until(lambda: grep_running(server), "bob's grep never ran")
        alice_entry = tenants.read_text().split("[[tenant]]")[1]
        tenants.write_text(f"[[tenant]]{alice_entry}" + entry("carol", CAROL, carol))
        server.process.send_signal(signal.SIGHUP)
        until(lambda: post(server, call("read_file", {"path": "c.txt"}), token=CAROL)[0] == 200,
              "carol was never served")
        assert post(server, call("stat_file", {"path": "slow.txt"}), token="bob")[0] == 401
        assert bobs.result()["error"]["code"] == "timeout"  # its own end, not cut off

        tenants.write_text(tenants.read_text() + "[[tenant]]\nname = 'alice'\n")
        server.process.send_signal(signal.SIGHUP)
        until(lambda: calls > 20 and b"not reloaded" in _log_so_far(server), "no error said")
        status, _, body = post(server, call("read_file", {"path": "c.txt"}), token=CAROL)
        assert status == 200 and b"carol" in body
        assert post(server, call("stat_file", {"path": "slow.txt"}), token="bob")[0] == 401
        stop.set()
        loader.join(SETTLE_S)
        assert calls > 20 and not failures, failures[:3]
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(SETTLE_S) == 0
        log = _log_so_far(server).decode()
    errors = [line for line in log.splitlines() if "not reloaded" in line]
    assert len(errors) == 1, log
    assert "tenants served stay as they were" in errors[0] and "tenant[2]" in errors[0]


_logs: dict[int, bytearray] = {}


def _log_so_far(server: Server) -> bytes:
    """What the server has written to stderr so far (read without blocking)."""
    seen = _logs.setdefault(server.process.pid, bytearray())
    stream = server.process.stderr
    assert stream is not None
    os.set_blocking(stream.fileno(), False)
    with contextlib.suppress(BlockingIOError, TypeError):
        while chunk := os.read(stream.fileno(), 65536):
            seen += chunk
    return bytes(seen)


def test_readiness_logs_a_change_once(caplog: pytest.LogCaptureFixture) -> None:
    """A pool that keeps failing its check is one error line, not one every 10 s."""
    readiness = Readiness(None, [])  # type: ignore[arg-type]
    stub = _Stub({"landlock_abi": 7}, ok=False)
    readiness._sandbox = stub
    try:
        with caplog.at_level(logging.INFO, logger="corral.serve"):
            readiness.check()
            readiness.check()
            stub.ok = True
            assert readiness.check() is None
    finally:
        readiness.close()
    said = [record.getMessage() for record in caplog.records]
    assert said == ["corral: not ready: halted: a worker of the pool fails its call "
                    "(worker_crashed)", "corral: ready again"]
