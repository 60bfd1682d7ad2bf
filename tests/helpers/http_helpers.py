"""`corral serve --http` with two tenants, and raw requests to it: shared by the
HTTP, first-run, docs and config tests."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.calls import SECRET
from tests.helpers.mcp_helpers import REPO

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-9876543210"}
STATELESS_META_VERSION = "io.modelcontextprotocol/protocolVersion"
STATELESS_META = {
    STATELESS_META_VERSION: "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


@dataclass
class Server:
    port: int
    process: subprocess.Popen[bytes]
    alice: Path
    bob: Path
    metrics_port: int | None = None  # with --metrics: where Prometheus scrapes

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def tenant(name: str, keys: str) -> str:
    """A [[tenant]] entry of tenants.toml for `name`, holding TOKENS[name], and `keys`
    (its other lines: workspace or config, quota)."""
    return f'[[tenant]]\nname = "{name}"\ntoken_sha256 = "{sha256(TOKENS[name])}"\n{keys}\n'


def serve_two_tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`corral serve --http` for alice (a config, delete on) and bob (a workspace
    holding the secret), until the generator is closed: the `server` fixture."""
    top = tmp_path_factory.mktemp("http")
    alice, bob = top / "alice", top / "bob"
    alice.mkdir()
    bob.mkdir()
    (alice / "hello.txt").write_text("hello\nworld\n")
    (bob / "secret.txt").write_text(SECRET + "\n")
    (top / "alice.toml").write_text(
        f'[workspace]\nroot = "{alice}"\n[tools]\ndelete_file = "allow"\n'
        "[limits]\ntimeout_s = 60\n"
    )
    (top / "tenants.toml").write_text(
        tenant("alice", f'config = "{top / "alice.toml"}"') + tenant("bob", f'workspace = "{bob}"')
    )
    yield from running_server(top, alice, bob, "--max-body-bytes", "65536")


def running_server(top: Path, alice: Path, bob: Path, *flags: str) -> Iterator[Server]:
    """`corral serve --http` on a free port for `top`/tenants.toml (with `flags`),
    until the generator is closed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "corral", "serve", "--http", "127.0.0.1:0",
         "--tenants", str(top / "tenants.toml"), *flags],
        stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=top,
    )
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    assert "serving MCP over HTTP at http://127.0.0.1:" in line, line
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    metrics_port = None
    if "--metrics" in flags:  # its line comes next
        line = process.stderr.readline().decode()
        assert "serving Prometheus metrics at http://" in line, line
        metrics_port = int(line.rsplit(":", 1)[1].split("/")[0])
    try:
        yield Server(port, process, alice, bob, metrics_port)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def mirrored(body: dict[str, Any]) -> dict[str, str]:
    """The SEP-2243 headers a 2026-07-28 client sends for `body` (none for a body of
    a handshake revision)."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or not isinstance(body.get("method"), str):
        return {}
    headers = {"mcp-protocol-version": str(meta.get(STATELESS_META_VERSION)),
               "mcp-method": body["method"]}
    named = params.get("uri" if body["method"] == "resources/read" else "name")
    if body["method"] in ("tools/call", "prompts/get", "resources/read") and isinstance(named, str):
        headers["mcp-name"] = named
    return headers


def mirrored_lines(request: bytes) -> bytes:
    """`mirrored` as raw header lines, for the encoded body `request`."""
    return b"".join(f"{name}: {value}\r\n".encode()
                    for name, value in mirrored(json.loads(request)).items())


def post(server: Server, body: bytes | dict[str, Any], *, token: str | None = "alice",
         headers: dict[str, str | None] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One raw POST to /mcp; (status, headers, body). A 2026-07-28 body is sent with
    its SEP-2243 headers (`mirrored`); `headers` adds to them, or drops one (None)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent: dict[str, str | None] = {
        "content-type": "application/json", "accept": "application/json, text/event-stream",
        **({} if isinstance(body, bytes) else mirrored(body))}
    if token is not None:
        sent["authorization"] = f"Bearer {TOKENS.get(token, token)}"
    sent.update(headers or {})
    sent = {name: value for name, value in sent.items() if value is not None}
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/mcp", body=raw, headers=sent)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def call(name: str, arguments: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": STATELESS_META}}


def start_http(tmp_path: Path, address: str) -> tuple[subprocess.Popen[bytes], str, int]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "secret.txt").write_text(SECRET + "\n")
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(tenant("alice", f'workspace = "{ws}"'))
    process = subprocess.Popen(
        [sys.executable, "-m", "corral", "serve", "--http", address, "--tenants", str(tenants)],
        stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path,
    )
    assert process.stderr is not None
    lines = []
    while "serving MCP over HTTP" not in (lines or [""])[-1]:
        line = process.stderr.readline().decode()
        assert line, lines
        lines.append(line)
    port = int(lines[-1].rsplit(":", 1)[1].split("/")[0])
    return process, "".join(lines[:-1]), port


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    process.wait(30)
