"""The processes of `corral serve --http` with two tenants, seen from /proc: no
tenant's worker holds another's directories, nothing of the host's environment
(a secret in it) reaches the template, the zygote or a worker, and killing the
zygote template or the pool's zygote (each shared by every tenant) takes no
tenant down."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from corral.faces.health import PROBE_PREFIX
from corral.history.location import workspace_key
from tests.helpers.broker_helpers import wait_gone
from tests.helpers.http_helpers import Server, call, post, serve_two_tenants

# In the server's environment, as an API key would be: it must stay in the host.
HOST_SECRET = "host-secret-7a1c9e"


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CORRAL_TEST_API_KEY", HOST_SECRET)
        yield from serve_two_tenants(tmp_path_factory)


def read_ok(server: Server, tenant: str) -> bool:
    path = "hello.txt" if tenant == "alice" else "secret.txt"
    status, _, body = post(server, call("read_file", {"path": path}), token=tenant)
    return status == 200 and json.loads(body)["result"]["isError"] is False


def descendants(server: Server) -> list[psutil.Process]:
    return psutil.Process(server.process.pid).children(recursive=True)


def zygote(server: Server) -> psutil.Process:
    """The server's pool's zygote: the one child of its template."""
    (template,) = psutil.Process(server.process.pid).children()
    (pool,) = template.children()
    return pool


def held(pid: int) -> set[str]:
    """What the fds of `pid` point at."""
    targets = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:  # closed meanwhile
            continue
    return targets


def test_each_tenants_workers_hold_only_that_tenants_directories(tenants: Server) -> None:
    assert read_ok(tenants, "alice") and read_ok(tenants, "bob")
    owners = {str(tenants.alice): "alice", str(tenants.bob): "bob"}
    histories = {workspace_key(str(tenants.alice)): "alice", workspace_key(str(tenants.bob)): "bob"}
    pool = zygote(tenants)
    assert not {target for target in held(pool.pid) if target.startswith("/")} - {"/dev/null"}
    seen = set()
    for worker in pool.children():
        paths = {target for target in held(worker.pid) if target.startswith("/")} - {"/dev/null"}
        whose = [owners.get(path) or next((owner for key, owner in histories.items()
                                           if key in path), None) or probes(path)
                 for path in paths]
        assert len(set(whose)) == 1 and None not in whose, (worker.pid, paths)
        seen |= set(whose)
    assert seen - {"probe"} == {"alice", "bob"}


def probes(path: str) -> str | None:
    """"probe" for the directory of the readiness probe's own sandbox (faces/health.py),
    which holds no tenant's files."""
    return "probe" if os.path.basename(path).startswith(PROBE_PREFIX) else None


def test_no_process_under_the_host_has_its_environment(tenants: Server) -> None:
    assert read_ok(tenants, "alice") and read_ok(tenants, "bob")
    below = descendants(tenants)
    assert len(below) >= 3  # the template, the pool's zygote, a worker at least
    for process in below:
        environ = Path(f"/proc/{process.pid}/environ").read_bytes()
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert HOST_SECRET.encode() not in environ + cmdline, process.pid
        names = {entry.split(b"=", 1)[0] for entry in environ.split(b"\0") if entry}
        assert names <= {b"LANG", b"PYTHONHOME", b"PYTHONUTF8"} | {
            name for name in names if name.startswith(b"LC_")}, (process.pid, names)


def test_every_tenant_keeps_serving_when_the_pools_zygote_is_killed(tenants: Server) -> None:
    """The pool's zygote serves every tenant: the pool forks another, from the same
    template (a call in flight would end worker_crashed; idle workers are replaced)."""
    assert read_ok(tenants, "alice") and read_ok(tenants, "bob")
    (template,) = psutil.Process(tenants.process.pid).children()
    pool = zygote(tenants)
    idle = [worker.pid for worker in pool.children()]
    os.kill(pool.pid, signal.SIGKILL)
    assert wait_gone([pool.pid, *idle]) == []  # its workers go with it (a call then: crashed)
    for _ in range(2):
        assert read_ok(tenants, "alice") and read_ok(tenants, "bob")
    assert zygote(tenants).pid != pool.pid and zygote(tenants).ppid() == template.pid


def test_every_tenant_keeps_serving_when_the_template_is_killed(tenants: Server) -> None:
    """The template is shared by every sandbox of the host: its death takes no zygote."""
    assert read_ok(tenants, "alice") and read_ok(tenants, "bob")
    pool = zygote(tenants)
    (template,) = psutil.Process(tenants.process.pid).children()
    os.kill(template.pid, signal.SIGKILL)
    assert wait_gone([template.pid]) == []
    for _ in range(2):
        assert read_ok(tenants, "alice") and read_ok(tenants, "bob")
    lost = [worker.pid for worker in pool.children()]
    for pid in lost:  # and the pool's zygote, alone now, still forks their successors
        os.kill(pid, signal.SIGKILL)
    assert lost and wait_gone(lost) == []
    assert read_ok(tenants, "alice") and read_ok(tenants, "bob")
    assert {worker.pid for worker in pool.children()}.isdisjoint(lost)
