"""Short version of scripts/race_tools.py: every tool, through a name that another
process keeps swapping between a workspace directory and a symlink to the outside,
in this process over a Root (both resolvers) and through a confined Sandbox."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "race_tools", Path(__file__).resolve().parent.parent / "scripts" / "race_tools.py"
)
assert _spec is not None and _spec.loader is not None
race_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(race_tools)

ROUNDS = 13 * 20  # twenty calls of each tool; the script runs 20,000 rounds


@pytest.mark.parametrize(
    ("level", "resolver"), [("inproc", "openat2"), ("inproc", "walk"), ("sandbox", "auto")]
)
def test_every_tool_holds_under_a_rename_race(tmp_path: Path, level: str, resolver: str):
    outcomes = race_tools.race(tmp_path, level, ROUNDS, resolver)  # raises on any leak
    assert sum(n for key, n in outcomes.items() if "[]" not in key) == ROUNDS
    codes = {key.split(":")[1] for key in outcomes}
    assert "outside_workspace" in codes  # the swapper did put the link in the way
    assert "ok" in codes  # and the real directory too
