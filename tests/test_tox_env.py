"""`tox` (the README's test command and CI's) runs the tests on whichever Python 3
the machine has, not on one pinned minor version that another machine lacks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _tox_config(workdir: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tox", "config", "--workdir", str(workdir), *args],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )
    return done.stdout


def test_the_test_env_takes_any_python_3(tmp_path: Path) -> None:
    envs = re.findall(r"^\[testenv:(.+)\]$", _tox_config(tmp_path, "-k", "base_python"), re.M)
    tests = [env for env in envs if env not in ("lint", "docs", "conformance")]
    assert tests == ["py3"]  # not py311: its interpreter is missing on a machine with 3.12
    shown = _tox_config(tmp_path, "-e", "py3", "-k", "py_dot_ver")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"py_dot_ver = {here}" in shown


def test_a_missing_interpreter_fails_rather_than_skips() -> None:
    text = (REPO / "tox.ini").read_text()
    assert re.search(r"^skip_missing_interpreters = false$", text, re.M)
