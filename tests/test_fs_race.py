"""Short version of scripts/race_fs.py: a process swaps a workspace directory
with a symlink to the outside while every Root operation runs through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.scripts_loader import load_script

ROUNDS = 150  # each round runs every operation once; the soak in scripts/ runs for minutes

race_fs = load_script("race_fs")


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_rename_race_never_escapes(tmp_path: Path, resolver: str):
    outcomes = race_fs.race(tmp_path, resolver, ROUNDS)
    assert outcomes["outside_workspace"] > 0  # the swapper did put the link in the way
    assert outcomes["ok"] > 0  # and the real directory too
