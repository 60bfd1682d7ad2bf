"""Shared by the apply_patch tests: a small tree and a patch that adds, updates,
deletes and moves, with the tree it leaves; a patch applied by a child killed at
a given step."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corral.calls.messages import CallRequest
from corral.config import HistoryOptions, Limits
from corral.fs import Root, Roots
from corral.history.host import History
from corral.history.store import Store
from corral.policy import Policy
from corral.tools.base import Context
from corral.tools.registry import execute

BEFORE = {
    "src/app.py": b"def main():\n    print('hello')\n    return 0\n",
    "old.txt": b"to be removed\n",
    "notes/draft.md": b"# Draft\n\nsome notes\n",
}

PATCH = """*** Begin Patch
*** Add File: src/util.py
+def helper():
+    return 42
*** Update File: src/app.py
@@ def main():
-    print('hello')
+    print('hello, patch')
     return 0
*** Delete File: old.txt
*** Update File: notes/draft.md
*** Move to: notes/final.md
@@
-# Draft
+# Final
*** End Patch
"""

AFTER = {
    "src/util.py": b"def helper():\n    return 42\n",
    "src/app.py": b"def main():\n    print('hello, patch')\n    return 0\n",
    "notes/final.md": b"# Final\n\nsome notes\n",
}

DELETES = Policy(tool_modes={"delete_file": "allow"})


def build(root: Path, files: dict[str, bytes] = BEFORE) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def files_of(root: Path) -> dict[str, bytes]:
    """Every regular file beneath `root` but corral's temps, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".corral-tmp-")}


def temps_of(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".corral-tmp-*"))


def _dying_at(step: int, hooks: Sequence[tuple[Any, str]]) -> None:
    """In the child: the process dies (as kill -9 would) just before step `step`,
    each call of a hook (owner, name) being a step."""
    count = [0]

    def counted(owner: Any, name: str) -> None:
        real = getattr(owner, name)

        def step_then(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == step:
                os._exit(9)
            return real(*args, **kwargs)

        setattr(owner, name, step_then)

    for owner, name in hooks:
        counted(owner, name)


def apply_in_child(workspace: str, step: int, patch: str, policy: Policy,
                   hooks: Sequence[tuple[Any, str]]) -> int:
    """`patch` applied as a worker applies it, by a forked child that dies before
    `step` (past the last step: it finishes); the child's exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child exits or dies
        try:
            history = History(HistoryOptions(), workspace, [workspace], writable=[workspace])
            assert history.work_path is not None
            store = Store.open(history.work_path)
            ctx = Context(Roots(Root(workspace)), Limits(), policy, history=store)
            _dying_at(step, hooks)
            answer = execute(ctx, CallRequest("apply_patch", {"patch": patch}))
            os._exit(0 if answer.ok else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
