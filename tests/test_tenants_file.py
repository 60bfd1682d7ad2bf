"""tenants.toml parsing and the token lookup (pure: pyfakefs-free, no server)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from corral.config import ConfigError
from corral.faces.tenants import find_tenant, load_tenants, parse_tenants

ALICE = hashlib.sha256(b"alice-token").hexdigest()
BOB = hashlib.sha256(b"bob-token").hexdigest()


def entry(**fields: object) -> dict[str, object]:
    return {"name": "alice", "token_sha256": ALICE, "workspace": "/srv/ws/alice", **fields}


def test_a_tenants_file_parses(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(
        f'[[tenant]]\nname = "alice"\ntoken_sha256 = "{ALICE.upper()}"\nconfig = "a/corral.toml"\n'
        f'[[tenant]]\nname = "bob"\ntoken_sha256 = "{BOB}"\nworkspace = "/srv/ws/bob"\n'
    )
    alice, bob = load_tenants(path)
    assert alice.config == str(tmp_path / "a/corral.toml") and alice.workspace is None
    assert bob.workspace == "/srv/ws/bob" and bob.config is None
    assert alice.token_sha256 == bytes.fromhex(ALICE)


@pytest.mark.parametrize("data, key", [
    ({}, "[[tenant]]"),
    ({"tenant": []}, "[[tenant]]"),
    ({"tenant": [entry()], "extra": 1}, "extra"),
    ({"tenant": [entry(token_sha256="abc")]}, "tenant[0].token_sha256"),
    ({"tenant": [entry(token_sha256="g" * 64)]}, "tenant[0].token_sha256"),
    ({"tenant": [entry(name="")]}, "tenant[0].name"),
    ({"tenant": [entry(name="a/b")]}, "tenant[0].name"),
    ({"tenant": [entry(config="/c.toml")]}, "tenant[0]"),
    ({"tenant": [{"name": "alice", "token_sha256": ALICE}]}, "tenant[0]"),
    ({"tenant": [entry(token="plain")]}, "tenant[0].token"),
    ({"tenant": [entry(), entry(token_sha256=BOB)]}, "tenant[1].name"),
    ({"tenant": [entry(), entry(name="bob")]}, "tenant[1].token_sha256"),
    ({"tenant": [entry(workspace="")]}, "tenant[0].workspace"),
])
def test_a_bad_tenants_file_names_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_tenants("/etc/corral/tenants.toml", data)
    assert caught.value.key == key, caught.value


def test_a_token_finds_only_its_tenant() -> None:
    tenants = parse_tenants("/t.toml", {"tenant": [entry(), entry(name="bob", token_sha256=BOB)]})
    assert find_tenant(tenants, "alice-token") is tenants[0]
    assert find_tenant(tenants, "bob-token") is tenants[1]
    for wrong in (None, "", "alice-token ", "ALICE-TOKEN", ALICE, "bob"):
        assert find_tenant(tenants, wrong) is None
