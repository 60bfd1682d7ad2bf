"""Shared fixtures: a workspace with a sibling 'outside' directory holding a secret
whose content must never appear in any result."""

from __future__ import annotations

from pathlib import Path

import pytest

SECRET = "TOP-SECRET-OUTSIDE-7f3a9c"


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
