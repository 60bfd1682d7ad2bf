"""Metrics: `corral serve --http --metrics` scraped and parsed as Prometheus text
(calls by tool and code, the latency histogram, the gauges, worker deaths by
signal with SIGSYS apart from SIGKILL); the observer hooks under it, in a
Pool and a private Sandbox; the option's errors; and a library that never loads
prometheus_client."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from corral import Approval, Pool, Sandbox, seccomp
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.faces.logs import JsonFormatter, TextFormatter
from corral.faces.metrics import BUCKETS, Metrics, Tally
from corral.sandbox import supplies, worker_set
from corral.sandbox.call_path import CallPath
from corral.sandbox.worker_set import WorkerSet
from corral.seccomp.arches import load_arch, native_arch
from tests.helpers.cli_helpers import run
from tests.helpers.evil_zygote import FRAME_LIMIT, REQUEST, EvilZygote, honest
from tests.helpers.http_helpers import TOKENS, Server, call, post, running_server, sha256
from tests.helpers.mcp_helpers import REPO

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]
CAROL = "carol-token-5555555555"


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`corral serve --http` with --metrics, JSON logs: alice and bob, a workspace
    each, and carol, whose quota is one call a minute."""
    top = tmp_path_factory.mktemp("metrics")
    alice, bob, carol = top / "alice", top / "bob", top / "carol"
    for workspace in (alice, bob, carol):
        workspace.mkdir()
        (workspace / "hello.txt").write_text("hello\n")
        (workspace / ".env").write_text("KEY=secret\n")
    (top / "tenants.toml").write_text("".join(
        f'[[tenant]]\nname = "{name}"\ntoken_sha256 = "{sha256(TOKENS.get(name, CAROL))}"\n'
        f'workspace = "{workspace}"\n{extra}\n' for name, workspace, extra in (
            ("alice", alice, ""), ("bob", bob, ""),
            ("carol", carol, "quota = { calls_per_minute = 1 }\n"))))
    yield from running_server(top, alice, bob, "--metrics", "127.0.0.1:0", "--log-format", "json")


def parsed(text: str) -> Samples:
    """Every sample of a Prometheus text page: name -> {sorted labels: value}."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def scrape(server: Server) -> Samples:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        return parsed(response.read().decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def called(server: Server, tenant: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    status, _, body = post(server, call(tool, arguments), token=tenant)
    assert status == 200, body
    return dict(json.loads(body))


def test_calls_are_counted_by_tool_and_code_with_their_latency(metered: Server) -> None:
    before = scrape(metered)
    called(metered, "alice", "read_file", {"path": "hello.txt"})
    called(metered, "alice", "read_file", {"path": "missing.txt"})
    called(metered, "alice", "read_file", {"path": ".env"})  # a built-in deny rule
    after = scrape(metered)

    def more(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert more("corral_calls_total", tool="read_file", code="ok") == 1
    assert more("corral_calls_total", tool="read_file", code="not_found") == 1
    assert more("corral_calls_total", tool="read_file", code="path_denied") == 1
    assert more("corral_call_duration_seconds_count", tool="read_file") == 3
    assert value(after, "corral_call_duration_seconds_sum", tool="read_file") > 0
    buckets = {dict(labels)["le"]: count for labels, count
               in after["corral_call_duration_seconds_bucket"].items()
               if dict(labels)["tool"] == "read_file"}
    bounds = [float(le) for le in buckets]
    assert bounds == sorted(bounds) and bounds[0] == BUCKETS[0] and bounds[-2] == BUCKETS[-1]
    counts = list(buckets.values())
    assert counts == sorted(counts)  # cumulative
    assert buckets["+Inf"] == value(after, "corral_call_duration_seconds_count", tool="read_file")


def test_quota_refusals_are_counted_by_tenant_over_http(metered: Server) -> None:
    before = scrape(metered)
    first = called(metered, CAROL, "read_file", {"path": "hello.txt"})
    second = called(metered, CAROL, "read_file", {"path": "hello.txt"})
    assert first["result"]["isError"] is False
    assert second["result"]["structuredContent"]["error"]["code"] == "quota_exceeded", second
    after = scrape(metered)
    assert value(after, "corral_quota_refusals_total", tenant="carol") == 1
    assert value(before, "corral_quota_refusals_total", tenant="carol") == 0
    assert value(after, "corral_calls_total", tool="read_file", code="quota_exceeded") - value(
        before, "corral_calls_total", tool="read_file", code="quota_exceeded") == 1


def test_gauges_are_read_from_the_pool_when_scraped(metered: Server) -> None:
    called(metered, "alice", "read_file", {"path": "hello.txt"})
    samples = quiet(metered)
    assert value(samples, "corral_workers_busy") == 0
    assert value(samples, "corral_workers_idle") >= 1
    assert value(samples, "corral_sandboxes") >= 1
    assert value(samples, "corral_queued_calls", tenant="alice") == 0
    assert ("tenant", "bob") in {label for labels in samples["corral_queued_calls"]
                                 for label in labels}


def quiet(server: Server) -> Samples:
    """A scrape once no worker runs a call or starts (a sandbox's start-up sweep is
    done with the worker it took or forked)."""
    deadline = time.monotonic() + 30
    while value(samples := scrape(server), "corral_workers_busy") and (
            time.monotonic() < deadline):
        time.sleep(0.02)
    return samples


def workers(server: Server) -> set[int]:
    """The pool's workers: the children of its zygote, which the zygote template
    (the server's one child) forked."""
    host = psutil.Process(server.process.pid)
    return {worker.pid for template in host.children() for zygote in template.children()
            for worker in zygote.children()}


def kill_and_wait(pid: int, sig: signal.Signals) -> None:
    os.kill(pid, sig)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)
    raise AssertionError(f"worker {pid} did not die of {sig.name}")


def test_worker_deaths_are_counted_by_signal_sigsys_apart(metered: Server) -> None:
    """bob's idle workers die of SIGSYS, then their successors of SIGKILL: bob's next
    call finds each dead (and a fresh worker answers it). Each round waits for the
    pool to be quiet first: a new sandbox's start-up sweep runs in the background,
    taking a worker or forking one, and a worker killed while it starts halts its
    sandbox (by design) where the next call expects an answer."""
    before = scrape(metered)
    known = workers(metered)
    called(metered, "bob", "read_file", {"path": "hello.txt"})
    killed = {}
    for sig in (signal.SIGSYS, signal.SIGKILL):
        quiet(metered)
        bobs = workers(metered) - known  # its call's worker, and its start-up sweep's
        assert bobs
        for pid in bobs:
            kill_and_wait(pid, sig)
        known |= bobs
        killed[sig.name] = len(bobs)
        assert called(metered, "bob", "read_file", {"path": "hello.txt"})["result"]["isError"] \
            is False

    def counted(samples: Samples) -> dict[str, float]:
        return {name: value(samples, "corral_worker_deaths_total", signal=name) - value(
            before, "corral_worker_deaths_total", signal=name) for name in killed}

    # a death the sweep finds is counted on its thread, maybe after the call's answer
    deadline = time.monotonic() + 30
    while counted(after := scrape(metered)) != killed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counted(after) == killed


def test_log_lines_are_json_objects_one_a_line(metered: Server) -> None:
    """uvicorn's warning about a malformed request, and the lines saying where the
    server listens (read by running_server), are JSON: checked once it stops."""
    with socket.create_connection(("127.0.0.1", metered.port), timeout=30) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        raw.recv(1024)
    metered.process.send_signal(signal.SIGINT)
    metered.process.wait(30)
    assert metered.process.stderr is not None
    lines = metered.process.stderr.read().decode().splitlines()
    records = [json.loads(line) for line in lines]
    assert all({"ts", "level", "logger", "msg"} <= record.keys() for record in records), lines
    assert any(record["logger"].startswith("uvicorn") and record["level"] == "warning"
               for record in records), lines


def test_stdio_serve_logs_json_too(tmp_path: Path) -> None:
    """The warning that history is off (its default store lies in the workspace)
    comes as one JSON object on stderr."""
    state = tmp_path / "state"
    state.mkdir()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    done = subprocess.run(
        [sys.executable, "-m", "corral", "serve", "--workspace", str(tmp_path),
         "--log-format", "json"],
        input=(json.dumps(init) + "\n").encode(), capture_output=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(state)},
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.decode().splitlines()]
    assert [(r["level"], r["logger"]) for r in records] == [("warning", "corral")], records
    assert records[0]["msg"].startswith("history is off"), records


def test_the_pools_observer_hears_calls_and_approvals(ws: Path) -> None:
    (ws / "corral.toml").write_text('[tools]\nwrite_file = "supervised"\n')
    answers = [True, False]
    tally = Tally()
    with Pool(max_workers=2, observer=tally) as pool:
        sandbox = pool.sandbox_from_config(ws / "corral.toml",
                                           approve=lambda request: answers.pop(0))
        assert sandbox.call("write_file", {"path": "a.txt", "content": "x"})["ok"]
        assert not sandbox.call("write_file", {"path": "b.txt", "content": "x"})["ok"]
        sandbox.call("no such tool", {})
        stats = sandbox.stats()
        assert stats["busy_workers"] == stats["queued_calls"] == 0
        assert stats["idle_workers"] == stats["workers"] >= 1
    assert tally.calls == {("write_file", "ok"): 1, ("write_file", "approval_denied"): 1,
                           ("unknown", "unknown_tool"): 1}
    assert tally.approvals == {"asked": 2, "granted": 1, "denied": 1}


def test_a_call_let_through_by_a_remembered_grant_is_counted_remembered(ws: Path) -> None:
    (ws / "corral.toml").write_text('[tools]\nwrite_file = "supervised"\n')
    tally = Tally()
    with Pool(max_workers=1, observer=tally) as pool:
        sandbox = pool.sandbox_from_config(
            ws / "corral.toml", approve=lambda request: Approval(True, remember="path"))
        for _ in range(3):
            assert sandbox.call("write_file", {"path": "a.txt", "content": "x"})["ok"]
    assert tally.approvals == {"asked": 1, "granted": 1, "remembered": 2}


def test_a_private_sandboxs_observer_hears_its_workers_death(ws: Path) -> None:
    tally = Tally()
    with Sandbox(ws, observer=tally) as sandbox:
        (worker,) = sandbox.pids()["workers"]
        os.kill(worker, signal.SIGSYS)
        psutil.Process(worker).wait(30)  # a child of the sandbox's zygote: not ours to reap
        assert sandbox.call("list_directory", {})["ok"]
    assert tally.deaths == {"SIGSYS": 1}


@pytest.mark.parametrize("where", ["hub", "worker_set"])
def test_a_worker_that_dies_under_the_start_up_sweep_is_counted(
    ws: Path, monkeypatch: pytest.MonkeyPatch, where: str,
) -> None:
    """A sandbox's start-up sweep runs on a worker of its own (a private sandbox) or
    one taken as a call takes one (a pool): one killed by SIGSYS under it is a death
    as much as under a call."""
    sweep = supplies.sweep_on

    def killed_first(worker: Any, *args: Any) -> int:
        os.kill(worker.pid, signal.SIGSYS)
        psutil.Process(worker.pid).wait(30)
        return int(sweep(worker, *args))  # finds it dead: WorkerLost

    # sweep_taken's (a taken worker) and a private set's own worker's
    for module in (supplies, worker_set):
        monkeypatch.setattr(module, "sweep_on", killed_first)
    tally = Tally()
    if where == "hub":
        with Pool(max_workers=2, observer=tally) as pool:
            pool.sandbox(ws).close()  # close waits for its sweep
    else:
        Sandbox(ws, observer=tally).close()
    assert tally.deaths == {"SIGSYS": 1}


def test_a_worker_killed_while_it_starts_is_counted() -> None:
    """Two workers SIGKILLed before they report (the OOM killer, say): the set forks
    a third, and both deaths count, as a death under a call does."""
    tally = Tally()
    zygote = EvilZygote(honest, killed_at_boot=2)
    workers = WorkerSet(zygote, SandboxOptions(workers=1, max_frame_bytes=FRAME_LIMIT),
                        Limits(), tally)
    try:
        workers.start()
        assert len(workers.pids()) == 1 and zygote.spawned == 3
    finally:
        workers.close()
    assert tally.deaths == {"SIGSYS": 0, "SIGKILL": 2}


def attempts_ptrace(fd: int, request: dict[str, Any]) -> None:
    """A compromised worker: under the real worker profile, a call corral never makes."""
    libc = ctypes.CDLL(None, use_errno=True)
    nr = load_arch(native_arch() or "x86_64").syscalls["ptrace"]
    seccomp.install()
    libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(0) for _ in range(4)))
    honest(fd, request)  # reached only if the call was merely refused


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filters")
def test_a_seccomp_kill_in_a_call_is_counted_and_logged_with_its_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tally = Tally()
    options = SandboxOptions(workers=1, max_frame_bytes=FRAME_LIMIT)
    workers = WorkerSet(EvilZygote(attempts_ptrace), options, Limits(), tally)
    workers.start()
    try:
        with caplog.at_level(logging.WARNING, logger="corral.workers"):
            answer = CallPath(workers, options, Limits()).call(CallRequest(**REQUEST, id=1))
    finally:
        workers.close()
    assert answer.error is not None and answer.error["code"] == "worker_crashed"
    assert tally.deaths == {"SIGSYS": 1}
    (record,) = [r for r in caplog.records if "SIGSYS" in r.getMessage()]
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "error" and line["logger"] == "corral.workers"
    assert line["signal"] == "SIGSYS" and line["tool"] == "read_file" and line["pid"] > 0
    assert line["msg"].startswith("worker ")


# A file name as a compromised worker could make one in the history store (which the
# host names in a warning): every way a reader may see a line end, and a quote.
FORGED = ('a.txt\ncorral: worker 1 running read_file was killed by SIGSYS\r"}\u2028'
          '{"level": "error"\x85\x0b\x1e.')


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter("%(message)s")],
                         ids=["json", "text"])
def test_a_name_in_a_log_line_cannot_forge_another(formatter: logging.Formatter) -> None:
    record = logging.makeLogRecord({
        "name": "corral", "levelname": "WARNING", "levelno": logging.WARNING,
        "msg": "corral: history: skipped %s in the store: %s", "args": (FORGED, "bad")})
    line = formatter.format(record)
    assert len(line.splitlines()) == 1 and "\n" not in line, line
    if isinstance(formatter, JsonFormatter):
        assert json.loads(line)["msg"] == f"history: skipped {FORGED} in the store: bad"
    else:
        assert line.startswith("corral: history: skipped a.txt\\x0acorral: ")


def test_a_worker_dead_when_its_idle_time_is_up_is_counted(ws: Path) -> None:
    """One that died idle and was never taken again: the pool's reaper finds it."""
    tally = Tally()
    with Pool(max_workers=2, idle_timeout_s=0.2, observer=tally) as pool:
        sandbox = pool.sandbox(ws)
        assert sandbox.call("list_directory", {})["ok"]
        for worker in sandbox.pids()["workers"]:
            os.kill(worker, signal.SIGSYS)
        deadline = time.monotonic() + 30
        while not sum(tally.deaths.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert {name for name, count in tally.deaths.items() if count} == {"SIGSYS"}


def test_quota_refusals_are_counted_by_tenant() -> None:
    metrics = Metrics()
    metrics.observer("alice").on_call("write_file", "quota_exceeded", 0.0002)
    metrics.observer("bob").on_call("read_file", "ok", 0.0002)
    metrics.watch(lambda: {"sandboxes": 0, "workers": 0, "idle_workers": 0, "busy_workers": 0,
                           "queued_calls": 0}, lambda: {"alice": 3})
    samples = parsed(generate_latest(metrics.registry).decode())
    assert samples["corral_quota_refusals_total"] == {(("tenant", "alice"),): 1.0,
                                                      (("tenant", "bob"),): 0.0}
    assert value(samples, "corral_calls_total", tool="write_file", code="quota_exceeded") == 1
    assert value(samples, "corral_queued_calls", tenant="alice") == 3


def test_the_series_the_alerts_watch_are_there_at_zero_from_the_start() -> None:
    """increase() of a series that first appears at 1 is 0 to Prometheus: the first
    SIGSYS death of a server's life, or a tenant's first quota refusal, would raise
    none of deployment.md's alerts if the series began with it."""
    metrics = Metrics()
    metrics.observer("alice")
    metrics.watch(lambda: {"sandboxes": 0, "workers": 0, "idle_workers": 0, "busy_workers": 0,
                           "queued_calls": 0}, dict)
    samples = parsed(generate_latest(metrics.registry).decode())
    assert samples["corral_worker_deaths_total"] == {(("signal", "SIGSYS"),): 0.0}
    assert samples["corral_quota_refusals_total"] == {(("tenant", "alice"),): 0.0}


@pytest.fixture
def tenants(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    path = tmp_path / "tenants.toml"
    path.write_text(f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{sha256("t")}"\n'
                    f'workspace = "{tmp_path / "ws"}"\n')
    return path


def test_a_port_in_use_is_one_clear_error(capsys: pytest.CaptureFixture[str],
                                          tenants: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, _, error = run(capsys, "serve", "--http", "127.0.0.1:0", "--tenants", str(tenants),
                             "--metrics", f"127.0.0.1:{port}")
    assert code == 2
    assert error == (f"corral: error: cannot serve metrics on 127.0.0.1:{port}: "
                     "address already in use\n")


@pytest.mark.parametrize(("argv", "message"), [
    (["--metrics", "127.0.0.1:99999"], "invalid port in '127.0.0.1:99999'"),
    (["--metrics", "127.0.0.1:x"], "invalid port in '127.0.0.1:x'"),
    # an address of no interface here (TEST-NET-1)
    (["--metrics", "192.0.2.1:0"],
     "cannot serve metrics on 192.0.2.1:0: cannot assign requested address"),
    (["--metrics", ":0", "--no-http"], "--metrics goes with --http HOST:PORT"),
])
def test_a_bad_metrics_option_is_refused_before_anything_listens(
    capsys: pytest.CaptureFixture[str], tenants: Path, argv: list[str], message: str,
) -> None:
    http = [] if "--no-http" in argv else ["--http", "127.0.0.1:0", "--tenants", str(tenants)]
    code, _, error = run(capsys, "serve", *http, *[a for a in argv if a != "--no-http"])
    assert code == 2
    assert error.startswith("corral: error: ") and message in error, error


def test_log_format_takes_text_or_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run(capsys, "serve", "--log-format", "xml")
    assert exited.value.code == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def test_the_library_and_stdio_server_never_load_prometheus_client(ws: Path) -> None:
    code = (f"import sys, corral\nfrom corral import Sandbox\n"
            "from corral.faces import cli, mcp_server, http_server\n"
            f"with Sandbox({str(ws)!r}) as sb: sb.call('list_directory', {{}})\n"
            "assert 'prometheus_client' not in sys.modules, 'loaded'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_overhead_benchmark_runs() -> None:
    """scripts/bench_metrics.py, a few calls (it reports ratios; nothing is asserted of them)."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_metrics.py"),
                           "--calls", "5", "--rounds", "1"], capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    assert b"observer overhead" in done.stdout
