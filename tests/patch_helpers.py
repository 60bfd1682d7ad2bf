"""Shared by the apply_patch tests: a small tree and a patch that adds, updates,
deletes and moves, with the tree it leaves."""

from __future__ import annotations

from pathlib import Path

from corral.policy import Policy

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
