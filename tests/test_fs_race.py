"""Short version of scripts/race_fs.py: a process swaps a workspace directory
with a symlink to the outside while every Root operation runs through it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROUNDS = 150  # each round runs every operation once; the soak in scripts/ runs for minutes

_spec = importlib.util.spec_from_file_location(
    "race_fs", Path(__file__).resolve().parent.parent / "scripts" / "race_fs.py"
)
assert _spec is not None and _spec.loader is not None
race_fs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(race_fs)


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_rename_race_never_escapes(tmp_path: Path, resolver: str):
    outcomes = race_fs.race(tmp_path, resolver, ROUNDS)
    assert outcomes["outside_workspace"] > 0  # the swapper did put the link in the way
    assert outcomes["ok"] > 0  # and the real directory too
