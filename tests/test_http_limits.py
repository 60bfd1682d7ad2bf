"""`corral serve --http` against clients that hold on, crowd in or collide, and what
a tenant is served with: half-sent requests (slowloris), a body that never
arrives, a tenant past its bound of requests, more connections than the cap,
stateless clients that number their requests alike, a WebSocket upgrade, a
port in use; a `workspace =` tenant never gets the server account's user
config, and no tenant writes the server's own files."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from corral.faces import cli, http_server
from tests.helpers.http_helpers import TOKENS, Server, call, mirrored_lines, post, sha256
from tests.helpers.mcp_helpers import REPO

SETTLE_S = 20.0  # only a safety net: what the tests wait for happens in ms
LORIS = 200  # half-sent requests, more than the strict server's file limit allows
# Answers a client asks for at once and never reads: far more than the socket's
# buffers hold (4 MiB at most), each read a whole max_read_bytes (256 KiB)
PIPELINED = 40


def start(top: Path, *flags: str, env: dict[str, str] | None = None,
          max_files: int | None = None) -> subprocess.Popen[bytes]:
    """The server, its stderr in top/stderr (a pipe nobody reads could block it)."""
    def limit_files() -> None:
        if max_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max_files, max_files))

    with open(top / "stderr", "wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "corral", "serve", "--http", "127.0.0.1:0",
             "--tenants", str(top / "tenants.toml"), *flags],
            stderr=stderr, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            cwd=top, preexec_fn=limit_files,
        )


def serving(process: subprocess.Popen[bytes], top: Path, alice: Path, bob: Path) -> Server:
    deadline = time.monotonic() + SETTLE_S
    line = ""
    while not line.endswith("\n"):
        assert time.monotonic() < deadline and process.poll() is None, line
        time.sleep(0.02)
        line = (top / "stderr").read_text()
    assert "serving MCP over HTTP at http://127.0.0.1:" in line, line
    return Server(int(line.split("\n")[0].rsplit(":", 1)[1].split("/")[0]), process, alice, bob)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    process.wait(30)


def tenant(name: str, place: str, path: Path) -> str:
    return (f'[[tenant]]\nname = "{name}"\ntoken_sha256 = "{sha256(TOKENS[name])}"\n'
            f'{place} = "{path}"\n\n')


def _alone(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, Path]:
    """A server's directory, with alice its one tenant, her workspace holding hello.txt."""
    top = tmp_path_factory.mktemp(name)
    alice = top / "alice"
    alice.mkdir()
    (alice / "hello.txt").write_text("hello\n")
    (top / "tenants.toml").write_text(tenant("alice", "workspace", alice))
    return top, alice


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with a 1 s read timeout, 8 connections and 128 open files at most."""
    top, alice = _alone(tmp_path_factory, "strict")
    process = start(top, "--client-timeout", "1", "--max-connections", "8", max_files=128)
    try:
        yield serving(process, top, alice, alice)
    finally:
        stop(process)


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two tenants of 3 requests each, 6 connections at most. The server account's
    user config would add a root and deny hello.txt; alice's config lies in bob's
    workspace."""
    top = tmp_path_factory.mktemp("bounded")
    alice, bob, extra = top / "alice", top / "bob", top / "extra"
    for directory in (alice, bob, extra):
        directory.mkdir()
        (directory / "hello.txt").write_text("hello\n")
    (bob / "alice.toml").write_text(f'[workspace]\nroot = "{alice}"\n')
    user = top / "xdg" / "corral"
    user.mkdir(parents=True)
    (user / "corral.toml").write_text(
        f'[workspace]\nallowed_paths = ["{extra}"]\n'
        '[[rules]]\nname = "operator-only"\naction = "deny"\npaths = ["**/hello.txt"]\n'
    )
    (top / "tenants.toml").write_text(
        tenant("alice", "config", bob / "alice.toml") + tenant("bob", "workspace", bob))
    process = start(top, "--max-connections", "6", "--max-tenant-requests", "3",
                    env={"XDG_CONFIG_HOME": str(top / "xdg")})
    try:
        yield serving(process, top, alice, bob)
    finally:
        stop(process)


def open_request(server: Server, tenant_name: str, *, body_bytes: int = 200) -> socket.socket:
    """A request whose headers are sent and whose body never comes; returns once the
    server is reading the body (it sent 100 Continue, as asked)."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=SETTLE_S)
    sock.sendall(
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer " + TOKENS[tenant_name].encode() + b"\r\n"
        b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % body_bytes
    )
    assert sock.recv(4096).startswith(b"HTTP/1.1 100"), "the server did not read the body"
    return sock


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends on `sock` until it closes it."""
    sock.settimeout(SETTLE_S)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def assert_stat_served(server: Server) -> None:
    status, _, body = post(server, call("stat_file", {"path": "hello.txt"}))
    assert status == 200 and json.loads(body)["result"]["structuredContent"]["exists"]


def assert_each_closed(socks: list[socket.socket]) -> None:
    """Each is closed by the server: pushed out, or its time is up."""
    for sock in socks:
        reply = until_closed(sock)
        assert reply == b"" or status_of(reply) == 408, reply


# -- connections ------------------------------------------------------------------------


def test_half_sent_requests_never_crowd_out_a_real_call(strict: Server) -> None:
    loris = []
    try:
        for _ in range(LORIS):  # each sends half a header and waits
            sock = socket.create_connection(("127.0.0.1", strict.port), timeout=SETTLE_S)
            sock.sendall(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-wait: ")
            loris.append(sock)
        assert_stat_served(strict)
        assert_each_closed(loris)
    finally:
        for sock in loris:
            sock.close()


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The strict server with --metrics: 1 s timeout, 128 open files at most."""
    top, alice = _alone(tmp_path_factory, "metered")
    process = start(top, "--client-timeout", "1", "--max-connections", "8",
                    "--metrics", "127.0.0.1:0", max_files=128)
    try:
        server = serving(process, top, alice, alice)
        deadline = time.monotonic() + SETTLE_S
        while "serving Prometheus metrics" not in (lines := (top / "stderr").read_text()):
            assert time.monotonic() < deadline and process.poll() is None, lines
            time.sleep(0.02)
        line = next(line for line in lines.splitlines() if "Prometheus" in line)
        server.metrics_port = int(line.rsplit(":", 1)[1].split("/")[0])
        yield server
    finally:
        stop(process)


def test_idle_metrics_connections_never_crowd_out_a_real_call(metered: Server) -> None:
    """The metrics port needs no token: connections that never send a request there
    are closed as on /mcp, and neither the MCP endpoint nor a scrape runs short of
    files."""
    idle = []
    try:
        for _ in range(LORIS):
            sock = socket.create_connection(("127.0.0.1", metered.metrics_port), timeout=SETTLE_S)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nx-wait: ")
            idle.append(sock)
        assert_stat_served(metered)
        url = f"http://127.0.0.1:{metered.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=SETTLE_S) as response:
            assert b"corral_calls_total" in response.read()
        assert_each_closed(idle)
    finally:
        for sock in idle:
            sock.close()
    assert b"Too many open files" not in (metered.alice.parent / "stderr").read_bytes()


def test_a_body_that_never_arrives_is_answered_408(strict: Server) -> None:
    request = json.dumps(call("write_file", {"path": "late.txt", "content": "x"})).encode()
    with socket.create_connection(("127.0.0.1", strict.port), timeout=SETTLE_S) as sock:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + TOKENS["alice"].encode() + b"\r\n"
            + mirrored_lines(request)
            + b"content-length: %d\r\n\r\n%s" % (len(request), request[:20])
        )
        reply = until_closed(sock)
    assert status_of(reply) == 408, reply
    assert not (strict.alice / "late.txt").exists()


def test_a_client_that_never_takes_its_answers_is_cut_off(strict: Server) -> None:
    (strict.alice / "big.txt").write_text(("z" * 99 + "\n") * 5_000)
    request = json.dumps(call("read_file", {"path": "big.txt", "limit": 5_000})).encode()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(SETTLE_S)
        sock.connect(("127.0.0.1", strict.port))
        sock.sendall(PIPELINED * (  # HTTP/1.1 pipelining: request after request, no reading
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + TOKENS["alice"].encode() + b"\r\n"
            + mirrored_lines(request)
            + b"content-length: %d\r\n\r\n%s" % (len(request), request)
        ))
        deadline = time.monotonic() + SETTLE_S
        while connections_to(strict):
            assert time.monotonic() < deadline, "the server still holds the connection"
            time.sleep(0.05)
    assert_stat_served(strict)


def connections_to(server: Server) -> int:
    """The connections the server holds open (not its listening socket)."""
    return sum(1 for c in psutil.Process(server.process.pid).net_connections("tcp")
               if c.laddr.port == server.port and c.raddr)


def test_past_the_connection_cap_a_new_connection_is_answered_503(bounded: Server) -> None:
    deadline = time.monotonic() + SETTLE_S
    while connections_to(bounded):  # earlier tests' connections are gone
        assert time.monotonic() < deadline, "the server still holds connections"
        time.sleep(0.05)
    busy = []
    try:
        for name in ("alice", "bob"):
            busy += [open_request(bounded, name) for _ in range(3)]  # 6: the cap
        with socket.create_connection(("127.0.0.1", bounded.port), timeout=SETTLE_S) as sock:
            reply = until_closed(sock)
        assert status_of(reply) == 503 and b"\r\nretry-after: " in reply.lower(), reply
    finally:
        for sock in busy:
            sock.close()
    for name in ("alice", "bob"):
        status = 503
        deadline = time.monotonic() + SETTLE_S
        while status != 200:  # the server notices the closed ones, and serves again
            assert time.monotonic() < deadline, "the server never served again"
            status = post(bounded, call("stat_file", {"path": "hello.txt"}), token=name)[0]


# -- a tenant's requests -------------------------------------------------------------------


def test_a_tenant_past_its_bound_is_answered_429_while_others_are_served(
    bounded: Server,
) -> None:
    stat = call("stat_file", {"path": "hello.txt"})
    held = [open_request(bounded, "alice") for _ in range(3)]  # alice's bound
    try:
        status, headers, _ = post(bounded, stat, token="alice")
        assert status == 429 and headers["retry-after"].isdigit()
        status, _, body = post(bounded, stat, token="bob")
        assert status == 200 and json.loads(body)["result"]["structuredContent"]["exists"]
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + SETTLE_S
    while status != 200:  # alice's closed requests leave the bound
        assert time.monotonic() < deadline, "alice's requests never left the bound"
        status = post(bounded, stat, token="alice")[0]


SLOW_CALLS = http_server.CALL_THREADS_PER_TENANT  # as many as a tenant has call threads


@pytest.fixture(scope="module")
def rationed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """alice may make SLOW_CALLS calls a minute, each up to 60 s; with --metrics."""
    top = tmp_path_factory.mktemp("rationed")
    alice = top / "alice"
    alice.mkdir()
    (alice / "slow.txt").write_text("a" * 40 + "b\n")  # "(a+)+$" backtracks on it for long
    (top / "alice.toml").write_text(f'[workspace]\nroot = "{alice}"\n[limits]\ntimeout_s = 60\n')
    (top / "tenants.toml").write_text(
        tenant("alice", "config", top / "alice.toml")
        + f"quota = {{calls_per_minute = {SLOW_CALLS}}}\n")
    process = start(top, "--max-workers", str(SLOW_CALLS), "--metrics", "127.0.0.1:0")
    try:
        server = serving(process, top, alice, alice)
        line = ""
        while "Prometheus" not in line:
            line = (top / "stderr").read_text().split("\n")[1]
        server.metrics_port = int(line.rsplit(":", 1)[1].split("/")[0])
        yield server
    finally:
        stop(process)


def calls_in_progress(server: Server) -> float:
    """Calls running on a worker or queued for one (each holds a call thread)."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=SETTLE_S) as response:
        page = response.read().decode()
    return sum(float(line.split()[1]) for line in page.splitlines()
               if line.startswith(("corral_workers_busy ", "corral_queued_calls{")))


def test_a_call_refused_for_quota_needs_no_call_thread(rationed: Server) -> None:
    """Every call thread of alice's is running a slow call, which took her whole
    calls_per_minute: her next call is refused at once, not after a thread frees."""
    grep = json.dumps(call("grep", {"pattern": "(a+)+$", "path": "slow.txt"})).encode()
    slow = []
    try:
        for _ in range(SLOW_CALLS):
            sock = socket.create_connection(("127.0.0.1", rationed.port), timeout=SETTLE_S)
            sock.sendall(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json"
                         b"\r\nauthorization: Bearer " + TOKENS["alice"].encode() + b"\r\n"
                         + mirrored_lines(grep)
                         + b"content-length: %d\r\n\r\n%s" % (len(grep), grep))
            slow.append(sock)
        deadline = time.monotonic() + SETTLE_S
        while calls_in_progress(rationed) < SLOW_CALLS:  # each holds a call thread
            assert time.monotonic() < deadline, "the slow calls never all ran"
            time.sleep(0.05)
        status, _, body = post(rationed, call("stat_file", {"path": "slow.txt"}))
        assert status == 200
        assert json.loads(body)["result"]["structuredContent"]["error"]["code"] == "quota_exceeded"
        for sock in slow:  # still running: the refusal did not wait for one of them
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in slow:
            sock.close()


def test_stateless_clients_each_number_their_requests_from_1(bounded: Server) -> None:
    answers: list[tuple[int, int, bytes]] = []

    def client(tenant_name: str) -> None:  # one request at a time, as a client would
        for request_id in range(1, 21):
            request = call("list_directory", {}, request_id=request_id)
            status, _, body = post(bounded, request, token=tenant_name)
            answers.append((request_id, status, body))

    clients = [threading.Thread(target=client, args=(name,))
               for name in ("alice", "alice", "alice", "bob", "bob", "bob")]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    assert len(answers) == 120
    for sent, status, body in answers:
        answer = json.loads(body)
        assert status == 200 and "error" not in answer, answer
        assert answer["id"] == sent


@pytest.mark.parametrize("request_id, code", [
    ("http-1", None), (0, None), (True, -32600), (1.5, -32600), (None, -32600), ([1], -32600),
])
def test_a_stateless_answer_carries_the_id_its_client_sent(
    bounded: Server, request_id: object, code: int | None,
) -> None:
    request = call("stat_file", {"path": "hello.txt"}) | {"id": request_id}
    status, _, body = post(bounded, request, token="bob")
    answer = json.loads(body)
    assert status == 200
    if code is None:
        assert answer["id"] == request_id and "result" in answer, answer
    else:
        assert answer["id"] is None and answer["error"]["code"] == code, answer


def test_a_failed_initialize_opens_no_session(bounded: Server) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    status, headers, body = post(bounded, initialize, token="bob")
    assert status == 200 and json.loads(body)["error"]["code"] == -32602
    assert "mcp-session-id" not in headers  # nor does it push out one of the tenant's


def test_a_websocket_upgrade_is_answered_like_any_request(bounded: Server) -> None:
    upgrade = (b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: Upgrade\r\n"
               b"upgrade: websocket\r\nsec-websocket-version: 13\r\n"
               b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
    bearer = b"authorization: Bearer " + TOKENS["bob"].encode() + b"\r\n"
    for token, expected in ((b"", 401), (bearer, 405)):
        with socket.create_connection(("127.0.0.1", bounded.port), timeout=SETTLE_S) as sock:
            sock.sendall(upgrade + token + b"\r\n")
            assert status_of(sock.recv(4096)) == expected


# -- what a tenant is served with ------------------------------------------------------------


def test_a_workspace_tenant_gets_the_defaults_not_the_user_config(bounded: Server) -> None:
    status, _, body = post(bounded, call("list_allowed_directories", {}), token="bob")
    assert status == 200
    listed = json.loads(body)["result"]["structuredContent"]
    assert "extra" not in json.dumps(listed)
    status, _, body = post(bounded, call("read_file", {"path": "hello.txt"}), token="bob")
    assert json.loads(body)["result"]["structuredContent"]["content"] == "hello\n"


def test_no_tenant_writes_the_servers_own_files(bounded: Server) -> None:
    before = (bounded.bob / "alice.toml").read_text()
    widen = call("write_file", {"path": "alice.toml", "content": '[workspace]\nroot = "/"\n'})
    status, _, body = post(bounded, widen, token="bob")
    assert status == 200
    error = json.loads(body)["result"]["structuredContent"]["error"]
    assert error["code"] == "path_denied", error
    assert (bounded.bob / "alice.toml").read_text() == before


@pytest.mark.parametrize("place", ["workspace", "config", "link"])
def test_a_tenants_file_inside_a_tenants_root_is_refused(
    tmp_path: Path, place: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "bob.toml").write_text(f'[workspace]\nroot = "{workspace}"\n')
    where = tmp_path / "bob.toml" if place == "config" else workspace
    tenants = workspace / "tenants.toml"
    tenants.write_text(tenant("bob", "config" if place == "config" else "workspace", where))
    if place == "link":  # named from outside the root, it is still the file inside
        (tmp_path / "tenants.toml").symlink_to(tenants)
        tenants = tmp_path / "tenants.toml"
    monkeypatch.setattr(http_server, "serve", lambda *a, **k: pytest.fail("it served"))
    assert cli.main(["serve", "--http", "127.0.0.1:0", "--tenants", str(tenants)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("corral: error: ")
    assert str(tenants) in error and "tenant[0]" in error and "inside" in error


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "tenants.toml").write_text(tenant("bob", "workspace", tmp_path / "ws"))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "corral", "serve", "--http", f"127.0.0.1:{port}",
             "--tenants", str(tmp_path / "tenants.toml")],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("corral: error: ") and result.stderr.count("\n") == 1, (
        result.stderr)
    assert f"127.0.0.1:{port}" in result.stderr and "in use" in result.stderr


@pytest.mark.parametrize("flag, value", [("--max-connections", "0"),
                                         ("--max-tenant-requests", "-1"),
                                         ("--client-timeout", "nan")])
def test_a_limit_must_be_positive(flag: str, value: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--http", "127.0.0.1:0", "--tenants", "t.toml", flag, value])
    assert exited.value.code == 2
    assert f"{flag}: expected a positive number, not '{value}'" in capsys.readouterr().err


def test_connections_are_accepted_with_tcp_nodelay() -> None:
    """Each answer goes out at once: without TCP_NODELAY (which asyncio sets only on
    connections of a socket made for TCP) it waited 40 ms for a delayed ack."""
    async def accept_one() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        with http_server.listen("127.0.0.1", 0) as sock:
            server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
            async with server:
                _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
                nodelay = await asyncio.wait_for(accepted, SETTLE_S)
                writer.close()
        return nodelay

    assert asyncio.run(accept_one())


def test_an_audited_tenants_refusals_are_recorded(tmp_path: Path) -> None:
    """An audited tenant's quota refusals are each in its audit log (they go to its
    call threads, not the event loop: writing the record is file I/O)."""
    alice = tmp_path / "alice"
    alice.mkdir()
    (alice / "hello.txt").write_text("hello\n")
    (tmp_path / "alice.toml").write_text(
        f'[workspace]\nroot = "{alice}"\n[audit]\npath = "{tmp_path / "audit.jsonl"}"\n')
    (tmp_path / "tenants.toml").write_text(
        tenant("alice", "config", tmp_path / "alice.toml") + "quota = {calls_per_minute = 1}\n")
    process = start(tmp_path)
    try:
        server = serving(process, tmp_path, alice, alice)
        codes = []
        for request_id in (1, 2, 3):
            status, _, body = post(server, call("stat_file", {"path": "hello.txt"}, request_id))
            assert status == 200, body
            result = json.loads(body)["result"]
            codes.append(result["structuredContent"]["error"]["code"] if result["isError"]
                         else "ok")
        assert codes == ["ok", "quota_exceeded", "quota_exceeded"]
    finally:
        stop(process)
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [r["error"] for r in records if r.get("tool") == "stat_file"] == [
        None, "quota_exceeded", "quota_exceeded"]
