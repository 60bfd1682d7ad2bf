"""The calls most tests make: one that must succeed, one that must fail, each
checked against the contract's shape; and the secret outside the workspace
(conftest's `outside` fixture) that no result may ever show."""

from __future__ import annotations

from typing import Any

from corral import Sandbox

SECRET = "TOP-SECRET-OUTSIDE-7f3a9c"


def ok(sb: Sandbox, tool: str, **arguments: Any) -> dict[str, Any]:
    """A call that must succeed, with exactly the contract's success shape."""
    response = sb.call(tool, arguments)
    assert response["ok"], response
    assert set(response) == {"ok", "tool", "result", "text"}
    assert response["tool"] == tool
    return response


def err(sb: Sandbox, tool: str, **arguments: Any) -> dict[str, Any]:
    """A call that must fail, with exactly the contract's error shape; its error."""
    response = sb.call(tool, arguments)
    assert not response["ok"], response
    assert set(response) == {"ok", "tool", "error"}
    return response["error"]
