"""Short version of scripts/soak_pool.py: mixed calls from several threads while
workers are SIGKILLed at random; the pool heals, and no temp file, fd, thread or
process is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.scripts_loader import load_script

CALLS = 400  # the script runs thousands
THREADS = 4
KILLS = 25

soak_pool = load_script("soak_pool")


@pytest.mark.parametrize("seed", [1, 2])
def test_the_pool_heals_under_random_kills_and_leaks_nothing(tmp_path: Path, seed: int) -> None:
    report = soak_pool.soak(tmp_path, CALLS, THREADS, KILLS, seed)
    assert sum(report["answers"].values()) == CALLS
    assert report["answers"]["ok"] > CALLS // 2
    assert report["kills"] > 0
