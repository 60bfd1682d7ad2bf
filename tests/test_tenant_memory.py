"""No worker of a shared pool holds another sandbox's data in its memory: a
compromised worker of tenant B that reads its own address space finds nothing of
tenant A (its root paths, its rules). Each worker's memory is read from outside
(/proc/PID/mem), as B's code would read its own; B's own markers are found, so
the scan sees what a worker holds."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from corral import Pool
from corral.faces.health import PROBE_PREFIX
from corral.policy import Policy, Rule
from tests.helpers.http_helpers import TOKENS, Server, call, post, running_server, sha256
from tests.helpers.memory_helpers import markers_in_memory


def markers(tenant: str) -> tuple[str, str]:
    """(in its root path, in its deny rule): unique to `tenant`, nowhere else."""
    return f"{tenant}-root-7f3a9c", f"{tenant}-rule-5e21b8"


def workspace(top: Path, tenant: str) -> Path:
    root = top / markers(tenant)[0]
    root.mkdir()
    (root / "hello.txt").write_text(f"hello from {tenant}\n")
    return root


def deny(tenant: str) -> Rule:
    return Rule(f"deny-{tenant}", "deny", ("*",), (f"{markers(tenant)[1]}/**",))


def test_a_pool_worker_holds_nothing_of_another_sandbox(tmp_path: Path) -> None:
    with Pool(max_workers=4) as pool:
        sandboxes = {
            tenant: pool.sandbox(workspace(tmp_path, tenant), policy=Policy(rules=(deny(tenant),)))
            for tenant in ("tenantA", "tenantB")
        }
        for tenant in ("tenantA", "tenantB"):  # A's workers are forked first
            result = sandboxes[tenant].call("read_file", {"path": "hello.txt"})
            assert result["ok"] is True, result
        zygote = sandboxes["tenantB"].pids()["zygote"]
        assert not markers_in_memory(zygote, [*markers("tenantA"), *markers("tenantB")])
        workers = sandboxes["tenantB"].pids()["workers"]
        assert workers
        for pid in workers:
            assert markers_in_memory(pid, markers("tenantB")) == set(markers("tenantB"))  # control
            assert not markers_in_memory(pid, markers("tenantA")), pid


@pytest.fixture
def tenants(tmp_path: Path) -> Iterator[Server]:
    """`corral serve --http` for alice (tenantA) and bob (tenantB), each a config
    with its root and a deny rule that carry its markers."""
    # In the server's working directory, which `python -m` puts on its sys.path: the
    # template must not take that path (the import system caches a listing of each).
    alice, bob = (workspace(tmp_path, tenant) for tenant in ("tenantA", "tenantB"))
    entries = []
    for name, tenant, root in (("alice", "tenantA", alice), ("bob", "tenantB", bob)):
        (tmp_path / f"{name}.toml").write_text(
            f'[workspace]\nroot = "{root}"\n\n[[rules]]\nname = "deny-{tenant}"\n'
            f'action = "deny"\ntools = ["*"]\npaths = ["{markers(tenant)[1]}/**"]\n'
        )
        entries.append(f'[[tenant]]\nname = "{name}"\ntoken_sha256 = "{sha256(TOKENS[name])}"\n'
                       f'config = "{tmp_path / f"{name}.toml"}"\n')
    (tmp_path / "tenants.toml").write_text("\n".join(entries))
    yield from running_server(tmp_path, alice, bob)


def test_a_server_tenants_worker_holds_nothing_of_the_other_tenant(tenants: Server) -> None:
    for name in ("alice", "bob"):
        status, _, body = post(tenants, call("read_file", {"path": "hello.txt"}), token=name)
        assert status == 200 and json.loads(body)["result"]["isError"] is False, body
    (template,) = psutil.Process(tenants.process.pid).children()
    (zygote,) = template.children()
    assert not markers_in_memory(zygote.pid, [*markers("tenantA"), *markers("tenantB")])
    owners = {str(tenants.alice): "tenantA", str(tenants.bob): "tenantB"}
    seen = set()
    for worker in zygote.children():
        fds = os.listdir(f"/proc/{worker.pid}/fd")
        targets = {os.readlink(f"/proc/{worker.pid}/fd/{fd}") for fd in fds}
        held = {owners.get(target) for target in targets} - {None}
        if not held and any(os.path.basename(t).startswith(PROBE_PREFIX) for t in targets):
            # the readiness probe's own sandbox (faces/health.py): neither tenant's
            assert not markers_in_memory(worker.pid, [*markers("tenantA"), *markers("tenantB")])
            continue
        (own,) = held
        other = "tenantB" if own == "tenantA" else "tenantA"
        assert markers_in_memory(worker.pid, markers(own)) == set(markers(own))  # control
        assert not markers_in_memory(worker.pid, markers(other)), (worker.pid, own)
        seen.add(own)
    assert seen == {"tenantA", "tenantB"}
