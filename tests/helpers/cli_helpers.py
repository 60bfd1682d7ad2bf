"""The command line run in-process, its output captured: shared by the
first-run and config-remedy tests."""

from __future__ import annotations

import pytest

from corral.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, error = capsys.readouterr()
    return code, out, error
