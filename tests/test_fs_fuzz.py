"""Short version of scripts/fuzz_resolvers.py: on random trees of tangled
symlinks, openat2 and the walk give the same answer for every path, and every
change leaves both copies of a tree alike and the outside untouched."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TREES = 12  # fixed seeds: the same trees every run; the script explores new ones
PATHS_PER_TREE = 60
CHANGES_PER_TREE = 30

_spec = importlib.util.spec_from_file_location(
    "fuzz_resolvers", Path(__file__).resolve().parent.parent / "scripts" / "fuzz_resolvers.py"
)
assert _spec is not None and _spec.loader is not None
fuzz_resolvers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz_resolvers)


@pytest.mark.parametrize("seed", range(TREES))
def test_resolvers_agree(tmp_path: Path, seed: int):
    assert fuzz_resolvers.fuzz(tmp_path, seed, PATHS_PER_TREE) > 0


@pytest.mark.parametrize("seed", range(TREES))
def test_changes_agree_and_stay_inside(tmp_path: Path, seed: int):
    assert fuzz_resolvers.fuzz_changes(tmp_path, seed, CHANGES_PER_TREE) > 0
