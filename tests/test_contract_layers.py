"""Where the call's contract lives, checked on the source: the faces import nothing
from corral/sandbox/ (their error answers, wait policies and errors come from
corral/calls/, corral.errors or corral.api), corral/calls/ imports only the layers
below tools/, and every frame written is a typed message's to_wire()."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import corral

PACKAGE = Path(corral.__file__).parent
# The faces: what a person or a client talks to, above corral.pool in the layout: every
# module of corral/faces/, and the top-level entry points that re-export them.
FACES = (*sorted(f"faces/{path.name}" for path in (PACKAGE / "faces").glob("*.py")),
         "__main__.py", "cli.py", "mcp_server.py")
# What corral/calls/ may import: the layers below tools/ (docs/development.md).
BELOW_TOOLS = ("corral.calls", "corral.history", "corral.config", "corral.config_keys",
               "corral.fs", "corral.policy", "corral.globs", "corral.audit", "corral.errors",
               "corral.jsonfast", "corral.tool_table")
# protocol.py's functions that make a frame of a message: (name, the message's position).
FRAME_WRITERS = {"encode": 0, "write_frame": 1, "send_frame_with_fds": 1}


def imported(path: Path) -> list[str]:
    """Every module `path` imports, at any depth (a function's lazy import too)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


@pytest.mark.parametrize("face", FACES)
def test_a_face_imports_nothing_from_the_sandbox(face: str) -> None:
    found = [name for name in imported(PACKAGE / face) if within(name, ("corral.sandbox",))]
    assert found == [], f"{face} imports {found}"


def test_nothing_below_the_faces_imports_them() -> None:
    """The faces sit on top: the public API and every layer below it import none of them."""
    above = [f"{path.relative_to(PACKAGE)}: {name}" for path in sorted(PACKAGE.rglob("*.py"))
             if str(path.relative_to(PACKAGE)) not in FACES
             for name in imported(path) if within(name, ("corral.faces",))]
    assert above == []


def test_the_calls_contract_imports_only_layers_below_tools() -> None:
    for path in sorted((PACKAGE / "calls").glob("*.py")):
        found = [name for name in imported(path)
                 if within(name, ("corral",)) and not within(name, BELOW_TOOLS)
                 and name not in ("corral", "corral.calls")]
        assert found == [], f"calls/{path.name} imports {found}"


def test_every_frame_written_is_a_typed_messages_wire() -> None:
    """A frame's message is always `<message>.to_wire()`: no module builds one from a
    dict literal or a dict it assembled (protocol.py, which frames any message, aside)."""
    loose = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "sandbox" / "protocol.py":
            continue
        tree = ast.parse(path.read_text())
        writers = {alias.asname or alias.name for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.module == "corral.sandbox.protocol"
                   for alias in node.names if alias.name in FRAME_WRITERS}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in writers):
                continue
            message = node.args[FRAME_WRITERS[node.func.id]]
            if not (isinstance(message, ast.Call) and isinstance(message.func, ast.Attribute)
                    and message.func.attr == "to_wire"):
                loose.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert loose == []


def test_fs_imports_only_the_layers_below_it() -> None:
    """Root's history hook is a Protocol with a no-op default (NO_KEEP): fs never
    imports history, which sits above it."""
    below = ("corral.fs", "corral.policy", "corral.globs", "corral.audit", "corral.seccomp",
             "corral._prctl", "corral._syscall", "corral.errors")
    for path in sorted((PACKAGE / "fs").glob("*.py")):
        found = [name for name in imported(path)
                 if within(name, ("corral",)) and not within(name, below) and name != "corral"]
        assert found == [], f"fs/{path.name} imports {found}"


def test_the_zygote_loads_nothing_of_the_hosts_audit_log() -> None:
    """The messages name a touched path's fields themselves: importing corral.audit for
    them would load hmac and OpenSSL (~4 MiB of RSS) into the zygote and every worker."""
    code = ("import sys, corral.sandbox.zygote, corral.sandbox.worker; "
            "print(sorted(m for m in ('corral.audit', 'hmac', '_hashlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=PACKAGE.parent, check=True)
    assert done.stdout.strip() == "[]"
