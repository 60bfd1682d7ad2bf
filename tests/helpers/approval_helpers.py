"""Shared by the approval tests: an approve callback that keeps what it was asked."""

from __future__ import annotations

from typing import Any


class Asker:
    """An approve callback that answers `reply` and keeps what it was asked."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.asked: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> Any:
        self.asked.append(request)
        return self.reply

    @property
    def paths(self) -> list[str]:
        return [target["path"] for request in self.asked for target in request["targets"]]
