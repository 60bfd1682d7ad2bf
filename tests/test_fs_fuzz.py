"""Short version of scripts/fuzz_resolvers.py: on random trees of tangled
symlinks, openat2 and the walk give the same answer for every path, and every
change leaves both copies of a tree alike and the outside untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.scripts_loader import load_script

TREES = 12  # fixed seeds: the same trees every run; the script explores new ones
PATHS_PER_TREE = 60
CHANGES_PER_TREE = 30

fuzz_resolvers = load_script("fuzz_resolvers")


@pytest.mark.parametrize("seed", range(TREES))
def test_resolvers_agree(tmp_path: Path, seed: int):
    assert fuzz_resolvers.fuzz(tmp_path, seed, PATHS_PER_TREE) > 0


@pytest.mark.parametrize("seed", range(TREES))
def test_changes_agree_and_stay_inside(tmp_path: Path, seed: int):
    assert fuzz_resolvers.fuzz_changes(tmp_path, seed, CHANGES_PER_TREE) > 0
