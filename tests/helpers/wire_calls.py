"""Test helper: the registry as the worker's serve loop runs it, a request as it
comes off the wire in and the answer as it goes back out, for tests written
against frames."""

from __future__ import annotations

from typing import Any

from corral.calls.messages import CallRequest
from corral.tools import registry
from corral.tools.base import Context


def execute(ctx: Context, wire: dict[str, Any]) -> dict[str, Any]:
    return registry.execute(ctx, CallRequest.from_wire(wire)).to_wire()
