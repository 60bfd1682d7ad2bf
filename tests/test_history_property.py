"""Property: any sequence of changes over a small tree, rewound to a checkpoint, gives
back the tree as it was, byte for byte, modes included."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral import Sandbox
from corral.config import HistoryOptions
from corral.policy import Policy
from tests.helpers.history_helpers import snapshot

NAMES = ["a.txt", "b.sh", "d/c.txt", "d/e/f.txt", "g"]
TEXT = st.text(alphabet="xyz\n", max_size=40)
CALL = st.one_of(
    st.builds(lambda p, c: ("write_file", {"path": p, "content": c}), st.sampled_from(NAMES), TEXT),
    st.builds(lambda p, c: ("append_file", {"path": p, "content": c}),
              st.sampled_from(NAMES), TEXT.filter(bool)),
    st.builds(lambda p: ("edit_file", {"path": p, "old_string": "x", "new_string": "yy",
                                       "replace_all": True}), st.sampled_from(NAMES)),
    st.builds(lambda p: ("create_directory", {"path": p}), st.sampled_from([*NAMES, "h/i"])),
    st.builds(lambda s, d, o: ("move_file", {"source": s, "destination": d, "overwrite": o}),
              st.sampled_from(NAMES), st.sampled_from(NAMES), st.booleans()),
    st.builds(lambda s, d, o: ("copy_file", {"source": s, "destination": d, "overwrite": o}),
              st.sampled_from(NAMES), st.sampled_from(NAMES), st.booleans()),
    st.builds(lambda p: ("delete_file", {"path": p}), st.sampled_from(NAMES)),
)
_runs = itertools.count()


def _seed(workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "a.txt").write_text("xa\nx\n")
    script = workspace / "b.sh"
    script.write_text("#!/bin/sh\nx\n")
    script.chmod(0o755)
    (workspace / "d" / "c.txt").write_text("private x\n")
    (workspace / "d" / "c.txt").chmod(0o600)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(before=st.lists(CALL, max_size=6), after=st.lists(CALL, min_size=1, max_size=30))
def test_rewind_gives_back_the_tree_at_the_checkpoint(
    tmp_path: Path, before: list[tuple[str, dict[str, Any]]],
    after: list[tuple[str, dict[str, Any]]],
) -> None:
    base = tmp_path / str(next(_runs))
    workspace = base / "ws"
    workspace.mkdir(parents=True)
    _seed(workspace)
    history = HistoryOptions(path=str(base / "history"))
    policy = Policy(tool_modes={"delete_file": "allow"})
    try:
        with Sandbox(workspace, policy=policy, history=history, workers=1) as sb:
            for tool, arguments in before:
                sb.call(tool, arguments)
            at_checkpoint = snapshot(workspace)
            checkpoint = sb.checkpoint()
            for tool, arguments in after:
                sb.call(tool, arguments)  # many fail (missing, exists): that is part of it
            rewound = sb.rewind(checkpoint)
            assert rewound["ok"] and rewound["result"]["conflicts"] == [], rewound
            assert snapshot(workspace) == at_checkpoint
    finally:
        shutil.rmtree(base, ignore_errors=True)
