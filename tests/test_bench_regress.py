"""scripts/bench_regress.py, short: a row of this checkout against itself, the
strace count and a commit exported as a checkout."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.scripts_loader import load_script

bench = load_script("bench_regress")

SUMMARY = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 66.13    0.055351          75       733       125 futex
  9.25    0.007746          95        81           read
  7.82    0.006543          74        88           poll
  2.46    0.002063         257         8           sched_yield
------ ----------- ----------- --------- --------- ----------------
100.00    0.083699          61       910       133 total
"""


def test_the_count_leaves_a_spin_out() -> None:
    assert bench._total(SUMMARY) == 733 + 81


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_a_short_row_reports_every_measure(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    bench.make_workspace(ws)
    servers = {label: bench.corral_server(ws, bench.configs(str(tmp_path), bench.REPO, label)[1],
                                          bench.REPO, equal=True) for label in ("base", "new")}
    args = argparse.Namespace(calls=bench.ROUND_CALLS, strace_calls=4, keep_strace=tmp_path)
    try:
        cells = bench.run_row("write 4 KiB", bench.operations(ws)["write 4 KiB"], servers, None,
                              args, 0.0)
    finally:
        for server in servers.values():
            server.close()
    for cell in cells.values():
        assert cell.median > 0 and 0 < cell.host < cell.cpu  # the workers' share counted too
        assert cell.syscalls[0] > 0 and cell.syscalls[1] > 0 and cell.answer > 0
    assert (tmp_path / "write_4_KiB-new-workers.txt").is_file()
    assert len(bench.table([("write 4 KiB", cells)], with_ref=False, counted=True)) == 3


def test_a_commit_is_exported_as_a_checkout() -> None:
    head = subprocess.run(["git", "-C", str(bench.REPO), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode:
        pytest.skip("not a git checkout")
    with bench.exported(head.stdout.strip()) as tree:
        assert (tree / "corral" / "__init__.py").is_file()
        kept = tree
    assert not kept.exists()
