"""What `corral serve --http` serves, read from its tenants file: the tenants,
the server's own files no tool may write, the layers some tenant requires, and
the longest call any of them may run. Read at the start and again at each
SIGHUP (faces/drain.py): every check that stops a start stops a reload, so a
file that could not start the server never replaces the set it serves."""

from __future__ import annotations

import os
from dataclasses import dataclass

from corral.api import check_history_path
from corral.faces.tenants import (
    Tenant,
    check_outside_roots,
    load_tenants,
    server_files,
    tenant_config,
)


@dataclass(frozen=True)
class Roster:
    tenants: list[Tenant]
    protected: tuple[str, ...]  # the tenants file and every tenant's config, as real paths
    require: tuple[str, ...]  # every layer some tenant's [sandbox] require names
    longest_timeout_s: float  # the longest [limits] timeout_s of any tenant's config


def load_roster(path: str | os.PathLike[str]) -> Roster:
    """The tenants file's roster, every tenant's config checked (ConfigError)."""
    tenants = load_tenants(path)
    configs = [tenant_config(tenant) for tenant in tenants]
    check_outside_roots(path, tenants, configs)
    for config in configs:
        # a store the operator named inside a root: refused before anything starts
        check_history_path(config.history, [root.path for root in config.roots])
    return Roster(
        tenants, server_files(path, tenants),
        tuple(dict.fromkeys(layer for config in configs for layer in config.sandbox.require)),
        max(config.limits.timeout_s for config in configs),
    )
