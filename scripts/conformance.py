"""The official MCP conformance suite (`@modelcontextprotocol/conformance` on npm)
against `corral serve --http`, at every revision it targets that corral serves.

Installs the suite, pinned, into a temporary directory (and Node 22 from the npm
registry, as the `node` package, when the machine's Node is older: the suite
needs 22), starts `corral serve --http` on 127.0.0.1 with one tenant, and a
loopback proxy in front of it that adds the tenant's token (the suite sends
none), then runs each scenario that applies to a tools-only server at each
revision in REVISIONS. Exits 1 on any failed check, or on a scenario of the
suite's list that this script neither runs nor names as not applicable (a new
release's scenario is looked at, not skipped unseen). docs/mcp.md lists the
scenarios that do not apply, and why.

    python scripts/conformance.py [--version 0.2.0-alpha.12] [--keep DIR] [--revision R]

(0.1.16, the newest stable release, knows 2025-11-25 only: `--version 0.1.16
--revision 2025-11-25`.)

tests/test_conformance.py runs it (it needs npm and the registry).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SUITE = "@modelcontextprotocol/conformance"
VERSION = "0.2.0-alpha.12"  # the release that targets 2026-07-28
NODE = "node@22"  # the npm package that carries a Node 22 binary
TOKEN = "conformance-token-0123456789"
SCENARIO_TIMEOUT_MS = 30_000

# Per revision: the scenarios that apply to corral (a server of tools only, no
# prompts, resources, logging, completions, sampling or tasks).
REVISIONS: dict[str, tuple[str, ...]] = {
    "2026-07-28": (
        "server-stateless", "tools-list", "dns-rebinding-protection", "caching",
        "http-header-validation",
    ),
    "2025-11-25": (
        "server-initialize", "server-session-lifecycle", "ping", "tools-list",
        "dns-rebinding-protection",
    ),
}
# Checks of those scenarios that do not apply, with the reason; any other check
# that fails is a failure.
NOT_APPLICABLE_CHECKS: dict[str, str] = {
    "sep-2575-server-rejects-undeclared-capability": "needs the suite's fixture tool "
                                                     "test_missing_capability",
    "sep-2575-missing-capability-http-400": "needs the suite's fixture tool "
                                            "test_missing_capability",
    "sep-2575-http-server-no-independent-requests-on-stream": "needs the suite's fixture tool "
                                                              "test_streaming_elicitation",
    "sep-2575-server-no-log-without-loglevel": "needs the suite's fixture tool test_logging_tool",
    # -32601 (HTTP 404) is what the spec asks of a server without prompts or resources
    "sep-2549-prompts-list-caching-hints": "prompts: corral offers none",
    "sep-2549-resources-list-caching-hints": "resources: corral offers none",
    "sep-2549-resources-templates-list-caching-hints": "resources: corral offers none",
}
# The scenarios of the suite that do not apply (each needs what a tools-only
# server does not have); docs/mcp.md lists them with these reasons.
NOT_APPLICABLE: dict[str, str] = {
    "logging-set-level": "logging: corral does not offer it",
    "tools-call-error": "needs the suite's fixture tools (test_error_handling)",
    "json-schema-2020-12": "needs the suite's fixture tools (json_schema_2020_12_tool)",
    "completion-complete": "completions: no prompts or resource templates to complete",
    "tools-call-simple-text": "needs the suite's fixture tools",
    "tools-call-image": "needs the suite's fixture tools",
    "tools-call-audio": "needs the suite's fixture tools",
    "tools-call-embedded-resource": "needs the suite's fixture tools",
    "tools-call-mixed-content": "needs the suite's fixture tools",
    "tools-call-with-logging": "needs the suite's fixture tools, and logging",
    "tools-call-with-progress": "needs the suite's fixture tools",
    "tools-call-sampling": "needs the suite's fixture tools, and sampling",
    "tools-call-elicitation": "needs the suite's fixture tools",
    "elicitation-sep1034-defaults": "needs the suite's fixture tools",
    "elicitation-sep1330-enums": "needs the suite's fixture tools",
    "server-sse-polling": "needs the suite's fixture tools (a tool that streams)",
    "server-sse-multiple-streams": "needs the suite's fixture tools (a tool that streams)",
    "resources-list": "resources: corral offers none",
    "resources-read-text": "resources: corral offers none",
    "resources-read-binary": "resources: corral offers none",
    "resources-templates-read": "resources: corral offers none",
    "resources-subscribe": "resources: corral offers none",
    "resources-unsubscribe": "resources: corral offers none",
    "sep-2164-resource-not-found": "resources: corral offers none",
    "prompts-list": "prompts: corral offers none",
    "prompts-get-simple": "prompts: corral offers none",
    "prompts-get-with-args": "prompts: corral offers none",
    "prompts-get-embedded-resource": "prompts: corral offers none",
    "prompts-get-with-image": "prompts: corral offers none",
    "http-custom-header-server-validation": "needs the suite's fixture tools (x-mcp-header "
                                            "parameters; corral's tools declare none)",
    "input-required-result-basic-elicitation": "needs the suite's fixture tools",
    "input-required-result-basic-sampling": "needs the suite's fixture tools, and sampling",
    "input-required-result-basic-list-roots": "needs the suite's fixture tools",
    "input-required-result-request-state": "needs the suite's fixture tools",
    "input-required-result-multiple-input-requests": "needs the suite's fixture tools",
    "input-required-result-multi-round": "needs the suite's fixture tools",
    "input-required-result-missing-input-response": "needs the suite's fixture tools",
    "input-required-result-non-tool-request": "needs the suite's fixture tools",
    "input-required-result-result-type": "needs the suite's fixture tools",
    "input-required-result-unsupported-methods": "needs the suite's fixture tools",
    "input-required-result-tampered-state": "needs the suite's fixture tools",
    "input-required-result-capability-check": "needs the suite's fixture tools",
    "input-required-result-ignore-extra-params": "needs the suite's fixture tools",
    "input-required-result-validate-input": "needs the suite's fixture tools",
}


def install(top: Path, version: str) -> list[str]:
    """The command that runs the suite, installed under `top`."""
    packages = [f"{SUITE}@{version}"]
    own = shutil.which("node")
    major = 0
    if own is not None:
        shown = subprocess.run([own, "--version"], capture_output=True, text=True).stdout
        major = int(re.match(r"v(\d+)", shown).group(1)) if re.match(r"v(\d+)", shown) else 0
    if major < 22:
        packages.append(NODE)
    node = top / "node_modules" / "node" / "bin" / "node" if major < 22 else Path(own or "node")
    package = top / "node_modules" / "@modelcontextprotocol" / "conformance"
    installed = package / "package.json"
    if not (installed.exists() and json.loads(installed.read_text())["version"] == version
            and node.exists()):  # else --keep's earlier install is used again
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("conformance: npm is needed to install the suite")
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(top),
                        *packages], check=True, stdout=subprocess.DEVNULL)
    if not node.exists():  # the node package fetches its binary in an install script
        raise SystemExit(f"conformance: {node} is missing: npm installed {NODE} without "
                         "running its install script; allow it, or install Node 22")
    return [str(node), str(package / "dist" / "index.js")]


def start_server(top: Path) -> tuple[subprocess.Popen[bytes], int]:
    workspace = top / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "hello.txt").write_text("hello\n")
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    (top / "tenants.toml").write_text(
        f'[[tenant]]\nname = "conformance"\ntoken_sha256 = "{digest}"\n'
        f'workspace = "{workspace}"\n')
    with open(top / "stderr", "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "corral", "serve", "--http", "127.0.0.1:0",
             "--tenants", str(top / "tenants.toml")],
            stderr=stderr, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=top)
    deadline = time.monotonic() + 60
    while "serving MCP" not in (text := (top / "stderr").read_text()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"conformance: the server did not start: {text}")
        time.sleep(0.05)
    return process, int(text.split("serving MCP over HTTP at ")[1].split(":")[2].split("/")[0])


class Proxy(http.server.ThreadingHTTPServer):
    """127.0.0.1 in front of the server: every request as it came, with the
    tenant's token added (the suite sends none); answers streamed back as they come."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client of the suite that hangs up (its probes do) is no error here

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.backend = port


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Proxy

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        headers = [(k, v) for k, v in self.headers.items() if k.lower() != "authorization"]
        connection = http.client.HTTPConnection("127.0.0.1", self.server.backend, timeout=120)
        connection.putrequest(self.command, self.path, skip_host=True,
                              skip_accept_encoding=True)
        for name, value in headers:
            connection.putheader(name, value)
        connection.putheader("authorization", f"Bearer {TOKEN}")
        connection.endheaders(body)
        response = connection.getresponse()
        self.send_response_only(response.status, response.reason)
        sized = response.getheader("content-length") is not None
        for name, value in response.getheaders():
            if name.lower() not in ("transfer-encoding", "connection"):
                self.send_header(name, value)
        if not sized:
            self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        while chunk := response.read1(65536) if not sized else response.read():
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if not sized else chunk)
            self.wfile.flush()
            if sized:
                break
        if not sized:
            self.wfile.write(b"0\r\n\r\n")
        connection.close()

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _forward


def listed(suite: list[str], revision: str) -> set[str]:
    """The server scenarios the suite lists for `revision`."""
    shown = subprocess.run([*suite, "list", "--server", "--spec-version", revision],
                           capture_output=True, text=True)
    if shown.returncode:
        raise SystemExit(f"conformance: this release of the suite cannot list revision "
                         f"{revision}: {shown.stderr.strip()} (choose others with --revision)")
    return set(re.findall(r"^\s*- (\S+)", shown.stdout, re.MULTILINE))


def run(
    suite: list[str], url: str, revision: str, scenario: str, out: Path
) -> list[dict[str, Any]]:
    """The checks of one scenario at one revision, as the suite reports them."""
    where = out / f"{revision}-{scenario}"
    shutil.rmtree(where, ignore_errors=True)  # --keep's earlier run
    shown = subprocess.run([*suite, "server", "--help"], capture_output=True, text=True).stdout
    timeout = ["--timeout", str(SCENARIO_TIMEOUT_MS)] if "--timeout" in shown else []  # 0.2 on
    subprocess.run([*suite, "server", "--url", url, "--scenario", scenario, "--spec-version",
                    revision, *timeout, "-o", str(where)],
                   capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_MS / 1000 + 60)
    checks: list[dict[str, Any]] = []
    for path in sorted(where.rglob("checks.json")):
        checks += json.loads(path.read_text())
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=VERSION, help="the suite's release to run")
    parser.add_argument("--keep", type=Path, help="install into and write results to DIR")
    parser.add_argument("--revision", action="append", choices=list(REVISIONS),
                        help="run at this revision only (repeatable; default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-conformance-") as tmp:
        top = args.keep or Path(tmp)
        top.mkdir(parents=True, exist_ok=True)
        suite = install(top / "suite", args.version)
        (top / "server").mkdir(exist_ok=True)
        process, port = start_server(top / "server")
        proxy = Proxy(port)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{proxy.server_address[1]}/mcp"
        failed = 0
        try:
            for revision in args.revision or REVISIONS:
                scenarios = REVISIONS[revision]
                known = listed(suite, revision)
                for scenario in sorted(known - set(scenarios) - set(NOT_APPLICABLE)):
                    print(f"{revision} {scenario}: not run and not named as not applicable")
                    failed += 1
                for scenario in scenarios:
                    if scenario not in known:  # an older release: it has not got it yet
                        print(f"{revision} {scenario}: not in release {args.version}")
                        failed += args.version == VERSION  # the pinned one must have it
                        continue
                    checks = run(suite, url, revision, scenario, top / "results")
                    moot = [c for c in checks if c.get("id") in NOT_APPLICABLE_CHECKS]
                    bad = [c for c in checks if c.get("status") in ("FAILURE", "ERROR")
                           and c not in moot]
                    failed += len(bad) + (not checks)
                    counted = len(checks) - len(moot)
                    print(f"{revision} {scenario}: {counted - len(bad)} of {counted} checks "
                          f"passed, {len(moot)} not applicable" if checks
                          else f"{revision} {scenario}: no checks ran")
                    for check in bad:
                        print(f"  {check.get('id')}: {check.get('errorMessage')}")
        finally:
            proxy.shutdown()
            process.send_signal(signal.SIGINT)
            process.wait(30)
    if failed:
        raise SystemExit(f"conformance: {failed} failures")
    print("conformance: every applicable scenario passed")


if __name__ == "__main__":
    main()
