"""scripts/conformance.py's bookkeeping, without running the suite (`tox -e conformance`
does, in CI): every scenario it runs or calls not applicable is named in docs/mcp.md,
and the tox env runs it."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from tests.helpers.scripts_loader import load_script

conformance = load_script("conformance")
REPO = Path(__file__).resolve().parent.parent


def test_docs_name_every_scenario_run_or_not_applicable() -> None:
    section = (REPO / "docs" / "mcp.md").read_text().split("## The conformance suite")[1]
    section = section.split("\n## ")[0]
    named = set(re.findall(r"`([a-z0-9*-]+)`", section))
    scenarios = {*conformance.NOT_APPLICABLE,
                 *(s for run in conformance.REVISIONS.values() for s in run)}
    unnamed = {s for s in scenarios if not any(fnmatch.fnmatch(s, n) for n in named)}
    assert not unnamed, unnamed
    for revision, run in conformance.REVISIONS.items():
        assert f"{revision}: " + ", ".join(f"`{s}`" for s in run) in " ".join(section.split())


def test_a_scenario_is_run_or_not_applicable_never_both() -> None:
    for run in conformance.REVISIONS.values():
        assert not set(run) & set(conformance.NOT_APPLICABLE)


def test_the_tox_env_runs_the_script() -> None:
    tox = (REPO / "tox.ini").read_text()
    env = tox.split("[testenv:conformance]")[1]
    assert "commands = python scripts/conformance.py" in env
    assert re.search(r"^envlist = .*\bconformance\b", tox, re.M)
