"""Shared fixtures: a workspace with a sibling 'outside' directory holding a secret
whose content must never appear in any result."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from corral import Sandbox
from corral.config import Limits, SandboxOptions
from corral.policy import Policy, RootSpec
from corral.sandbox.broker import Broker
from tests.helpers.calls import SECRET

if TYPE_CHECKING:
    from tests.helpers.broker_helpers import MakeBroker
    from tests.helpers.http_helpers import Server


SLOW_LIST = Path(__file__).with_name("slow.txt")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `slow` mark, from one table (tests/slow.txt: a test's id marks it; a
    function's id without parameters marks all of them). A whole-suite run refuses an
    entry that names no test, so the table cannot go stale unseen."""
    slow = {line.strip() for line in SLOW_LIST.read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    named = set()
    for item in items:
        for name in (item.nodeid, item.nodeid.partition("[")[0]):
            if name in slow:
                item.add_marker(pytest.mark.slow)
                named.add(name)
    stale = slow - named
    if stale and config.args_source is pytest.Config.ArgsSource.TESTPATHS:
        raise pytest.UsageError(f"{SLOW_LIST} names no such test: {', '.join(sorted(stale))}")


@pytest.fixture(autouse=True, scope="session")
def _no_user_config(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The tests (and the `corral` processes they start) never pick up the user
    config of whoever runs them: $XDG_CONFIG_HOME points at an empty directory."""
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("xdg-config"))


@pytest.fixture(scope="session", autouse=True)
def state_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """History stores (and any other state) go under a session temp directory, never
    the user's ~/.local/state; subprocesses (the corral CLI) inherit it."""
    state = tmp_path_factory.mktemp("state")
    os.environ["XDG_STATE_HOME"] = str(state)
    return state


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SECRET + "\n")
    return out


@pytest.fixture
def workspace(tmp_path: Path, outside: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello\nworld\n")
    return ws


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace; a module whose tests need files in it builds its own
    fixture, named for what it holds."""
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def sb(ws: Path) -> Iterator[Sandbox]:
    """A sandbox with the defaults over the empty workspace `ws`."""
    with Sandbox(ws) as sandbox:
        yield sandbox


@pytest.fixture
def make_broker(workspace: Path) -> Iterator[MakeBroker]:
    """Brokers over `workspace`, each closed after the test."""
    started: list[Broker] = []

    def make(*, limits: Limits | None = None, **options: Any) -> Broker:
        broker = Broker(
            [RootSpec(str(workspace), "rw")], limits or Limits(), Policy(),
            SandboxOptions(**options),
        )
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # Imported here: the MCP client it needs loads only for tests that start a server.
    from tests.helpers.http_helpers import serve_two_tenants

    yield from serve_two_tenants(tmp_path_factory)


@pytest.fixture(scope="module", params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest) -> SandboxOptions:
    """Every semantics test runs over both resolvers (walk: kernels without openat2)."""
    return SandboxOptions(resolver=request.param)
