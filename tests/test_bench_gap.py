"""scripts/bench_gap.py, short: one row against this checkout, and the floor."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.scripts_loader import load_script

bench = load_script("bench_gap")


def test_a_short_run_checks_its_answers_and_reports_cpu(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "read.txt").write_text(bench.SMALL)
    config = tmp_path / "corral.toml"
    config.write_text(f'[history]\npath = "{tmp_path}/history"\n')
    server = bench.Server(bench.REPO, ws, config)
    try:
        cells = bench.measure({"this": server}, "read 4 KiB", ws, bench.ROUND_CALLS, 0.0)
    finally:
        server.close()
    cell = cells["this"]
    assert 0 < cell["p50"] <= cell["p99"]
    assert 0 < cell["host"] < cell["cpu"]  # the workers' share is counted too


def test_the_floor_is_measured() -> None:
    python = bench.floor_python(200)
    assert set(python) == {"open + read 4 KiB", "stat", "pipe round trip"}
    assert all(seconds > 0 for seconds in python.values())
    c = bench.floor_c(200)
    assert c is None or set(c) == set(python)
