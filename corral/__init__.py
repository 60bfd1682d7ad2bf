"""corral: kernel-confined file tools for AI agents."""

from __future__ import annotations

# typing is not imported for TYPE_CHECKING: `corral call` starts the zygote template
# right after this module loads, and each import before that delays it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from corral.api import AsyncSandbox, Sandbox
    from corral.config import ConfigError
    from corral.errors import CorralError
    from corral.host.flow import Approval, Approve, CallFlow, NoApprover, Submit
    from corral.host.quota import QuotaUsage
    from corral.pool import Pool
    from corral.sandbox.launcher import warm as prestart

__all__ = [
    "Approval", "Approve", "AsyncSandbox", "CallFlow", "ConfigError", "CorralError",
    "NoApprover", "Pool", "QuotaUsage", "Sandbox", "Submit", "__version__", "prestart",
]

__version__ = "0.1.0"  # pyproject.toml reads it from here


def __getattr__(name: str) -> Any:
    # Lazy: the zygote imports corral.sandbox without the host's API (asyncio and all).
    if name in ("Sandbox", "AsyncSandbox"):
        from corral import api

        return getattr(api, name)
    if name in ("CallFlow", "Submit", "Approve", "Approval", "NoApprover"):
        from corral.host import flow

        return getattr(flow, name)
    if name == "CorralError":
        from corral.errors import CorralError

        return CorralError
    if name == "ConfigError":
        from corral.config import ConfigError

        return ConfigError
    if name == "prestart":  # light: a program calls it before it imports the rest
        from corral.sandbox.launcher import warm

        return warm
    if name == "QuotaUsage":
        from corral.host.quota import QuotaUsage

        return QuotaUsage
    if name == "Pool":
        from corral.pool import Pool

        return Pool
    raise AttributeError(f"module 'corral' has no attribute {name!r}")
