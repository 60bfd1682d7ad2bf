"""Driving the sans-I/O MCP core by hand, as a face would: shared by the core's
tests and the approval tests of older protocol revisions."""

from __future__ import annotations

from corral.faces.mcp_actions import Action, Run
from corral.faces.mcp_core import McpSession


def run_all(session: McpSession, actions: list[Action]) -> list[Action]:
    """Carry out every Run (as a face does) until none is left; what else came."""
    rest: list[Action] = []
    while actions:
        action, *actions = actions
        if isinstance(action, Run):
            actions += session.submitted(action.call, action.sandbox.submit(action.request))
        else:
            rest.append(action)
    return rest
