"""tenants.toml: who may reach which workspace through `corral serve --http`.

    [[tenant]]
    name = "alice"
    token_sha256 = "9f86d0..."              # hex SHA-256 of the bearer token
    config = "/srv/ws/alice/corral.toml"    # or: workspace = "/srv/ws/alice"
    quota = {calls_per_minute = 600}        # optional: [quota] keys, for the tenant

Parsing and checking, the constant-time token lookup, and what a tenant is
served with. Relative paths are taken from the tenants file's directory. Errors
are ConfigError naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.config import (
    Config,
    ConfigError,
    QuotaOptions,
    load_config,
    read_config,
    resolve_roots,
)
from corral.config_keys import SECTION_KEYS
from corral.errors import did_you_mean
from corral.trust import narrowed

TENANT_KEYS = ("name", "token_sha256", "config", "workspace", "quota")
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Tenant:
    name: str
    token_sha256: bytes  # the digest itself (32 bytes), not its hex
    config: str | None = None  # an operator's corral.toml (trusted)
    workspace: str | None = None  # or a workspace, served with the defaults
    # The operator's, like the file: the tenant's config, and its workspace's own
    # corral.toml, may lower it, never raise it. All its sessions count against it.
    quota: QuotaOptions = dataclasses.field(default_factory=QuotaOptions)


def load_tenants(path: str | os.PathLike[str]) -> list[Tenant]:
    source, data = read_config(path)
    return parse_tenants(source, data)


def parse_tenants(source: str, data: dict[str, Any]) -> list[Tenant]:
    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(message, file=source, key=key)

    unknown = sorted(set(data) - {"tenant"})
    if unknown:
        raise fail(unknown[0], "unknown key; a tenants file holds [[tenant]] tables only")
    entries = data.get("tenant", [])
    if not isinstance(entries, list) or not entries:
        raise fail("[[tenant]]", "expected at least one [[tenant]] table")
    tenants: list[Tenant] = []
    for index, entry in enumerate(entries):
        key = f"tenant[{index}]"
        if not isinstance(entry, dict):
            raise fail(key, "expected a table")
        extra = sorted(set(entry) - set(TENANT_KEYS))
        if extra:
            raise fail(f"{key}.{extra[0]}", f"unknown key; expected {', '.join(TENANT_KEYS)}")
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise fail(f"{key}.name", "expected a name of letters, digits, '.', '_' or '-'")
        digest = entry.get("token_sha256")
        if not isinstance(digest, str) or not _HEX_SHA256.fullmatch(digest):
            raise fail(f"{key}.token_sha256", "expected the hex SHA-256 of the token (64 hex "
                       "digits), e.g. from: printf %s \"$TOKEN\" | sha256sum")
        places = [k for k in ("config", "workspace") if k in entry]
        if len(places) != 1:
            raise fail(key, "expected exactly one of config or workspace")
        place = entry[places[0]]
        if not isinstance(place, str) or not place:
            raise fail(f"{key}.{places[0]}", "expected a path")
        place = os.path.join(os.path.dirname(source), place)
        tenant = Tenant(name, bytes.fromhex(digest), **{places[0]: os.path.normpath(place)},
                        quota=_quota(entry.get("quota", {}), f"{key}.quota", fail))
        for other in tenants:
            if other.name == name:
                raise fail(f"{key}.name", f"the name {name!r} is used twice")
            if other.token_sha256 == tenant.token_sha256:
                raise fail(f"{key}.token_sha256", f"the same token as tenant {other.name!r}")
        tenants.append(tenant)
    return tenants


def _quota(value: Any, key: str, fail: Callable[[str, str], ConfigError]) -> QuotaOptions:
    """A tenant's `quota = {..}`: [quota]'s keys, each a positive integer."""
    if not isinstance(value, dict):
        raise fail(key, "expected a table of [quota] keys, e.g. {calls_per_minute = 600}")
    allowed = SECTION_KEYS["quota"]
    for name, setting in value.items():
        if name not in allowed:
            raise fail(f"{key}.{name}", f"unknown key; expected {', '.join(allowed)}"
                       f"{did_you_mean(name, allowed)}")
        if isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
            raise fail(f"{key}.{name}", f"expected a positive integer, not {setting!r}")
    return QuotaOptions(**value)


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def find_tenant(tenants: list[Tenant], token: str | None) -> Tenant | None:
    """The tenant whose token this is, comparing digests in constant time with every
    tenant's (no early exit, so the time says nothing about which one matched)."""
    if not token:
        return None
    digest = token_digest(token)
    found = None
    for tenant in tenants:
        if hmac.compare_digest(digest, tenant.token_sha256):
            found = tenant
    return found


def tenant_config(tenant: Tenant) -> Config:
    """What a tenant's session is served with: its operator config, or for a
    `workspace =` tenant the defaults; either narrowed by the workspace's own
    corral.toml. Never the server account's user config: every workspace tenant
    would share its extra roots (a channel between them), its rules and its
    audit log."""
    if tenant.config is not None:
        base = load_config(tenant.config)
    else:
        assert tenant.workspace is not None  # parse_tenants: exactly one of the two
        real, others = resolve_roots(tenant.workspace)
        base = Config(workspace=real, allowed_paths=others)
    # The tenant's quota and its config's [quota] are both the operator's: the
    # stricter holds, and the workspace may only lower it further.
    base = dataclasses.replace(base, quota=base.quota.stricter(tenant.quota))
    return narrowed(base, tenant.config)


def server_files(path: str | os.PathLike[str], tenants: list[Tenant]) -> tuple[str, ...]:
    """The files the server runs on, as real paths: the tenants file and every
    tenant's config (no tool of any tenant may write them)."""
    files = [os.fspath(path), *(tenant.config for tenant in tenants if tenant.config)]
    return tuple(dict.fromkeys(os.path.realpath(file) for file in files))


def check_outside_roots(
    path: str | os.PathLike[str], tenants: list[Tenant], configs: list[Config]
) -> None:
    """ConfigError if the tenants file lies inside a tenant's root, where that
    tenant's agent could rewrite it (a token for another workspace, or its own
    tenant pointed at a config it wrote, trusted at the next start)."""
    real = os.path.realpath(path)
    for index, (tenant, config) in enumerate(zip(tenants, configs, strict=True)):
        for root in config.roots:
            if real.startswith(root.path.rstrip("/") + "/"):
                raise ConfigError(
                    f"the tenants file lies inside the root {root.path} of tenant "
                    f"{tenant.name!r}, whose agent could rewrite it; move it out of every "
                    "tenant's root", file=os.fspath(path), key=f"tenant[{index}]")
