"""Short version of scripts/race_tools.py: every tool, through a name that another
process keeps swapping between a workspace directory and a symlink to the outside,
in this process over a Root (both resolvers) and through a confined Sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.scripts_loader import load_script

race_tools = load_script("race_tools")

ROUNDS = 13 * 20  # twenty calls of each tool; the script runs 20,000 rounds


@pytest.mark.parametrize(
    ("level", "resolver"),
    [("inproc", "openat2"), ("inproc", "walk"),
     ("sandbox", "auto")],
)
def test_every_tool_holds_under_a_rename_race(tmp_path: Path, level: str, resolver: str):
    outcomes = race_tools.race(tmp_path, level, ROUNDS, resolver)  # raises on any leak
    assert sum(n for key, n in outcomes.items() if "[]" not in key) == ROUNDS
    codes = {key.split(":")[1] for key in outcomes}
    assert "outside_workspace" in codes  # the swapper did put the link in the way
    assert "ok" in codes  # and the real directory too
