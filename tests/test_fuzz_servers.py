"""Short version of scripts/fuzz_servers.py: a few hundred generated malformed
messages to `corral serve`, `corral serve --jsonl` and `corral serve --http`; valid
calls between them are answered right, every output line (every JSON body) is
strict JSON, no HTTP answer is a 5xx, the server lives on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.scripts_loader import load_script

fuzz_servers = load_script("fuzz_servers")

MESSAGES = 300  # the script sends 100,000


@pytest.mark.parametrize("face", ["mcp", "jsonl",
                                  "http"])
def test_malformed_messages_never_break_the_server(tmp_path: Path, face: str):
    stats = fuzz_servers.fuzz(face, tmp_path / "ws", MESSAGES, seed=1)  # raises on a failure
    assert stats["sent"] == MESSAGES
    assert stats["valid_calls"] == 4 * MESSAGES // fuzz_servers.BATCH
