"""Start-up does only what the first call needs: `corral call` starts one worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.cli import main
from corral.sandbox.worker_set import WorkerSet


def test_corral_call_starts_one_worker(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "corral.toml"
    config.write_text(f'[workspace]\nroot = "{workspace}"\n\n[sandbox]\nworkers = 4\n')
    started: list[int] = []
    start = WorkerSet.start

    def counted(self: WorkerSet) -> None:
        start(self)
        started.append(len(self.pids()))

    monkeypatch.setattr(WorkerSet, "start", counted)
    code = main(["call", "read_file", '{"path": "hello.txt"}', "--config", str(config)])
    assert code == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out)["result"]["content"] == "hello\nworld\n"
    assert started == [1]
