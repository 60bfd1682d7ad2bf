"""corral/cli.py and corral/mcp_server.py stay where the design names them, as thin
entry points over corral/faces/: every public name they had is still theirs, and
the console script and `python -m corral` still start the command."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import corral

REPO = Path(corral.__file__).parent.parent


def public_names(module: ModuleType) -> list[str]:
    """What a module defines at its top level (not what it imports), minus _private."""
    tree = ast.parse(Path(str(module.__file__)).read_text())
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


@pytest.mark.parametrize(("name", "named"), [("cli", {"main"}),
                                             ("mcp_server", {"serve", "McpServer"})])
def test_the_designs_entry_points_expose_what_they_did(name: str, named: set[str]) -> None:
    entry = importlib.import_module(f"corral.{name}")
    face = importlib.import_module(f"corral.faces.{name}")
    assert named <= set(entry.__all__) and named <= set(public_names(face))
    # corral.cli.main starts the zygote template first, then runs the face's main
    wrappers = {"main"} if name == "cli" else set()
    assert sorted(n for n in entry.__all__ if getattr(entry, n) is not getattr(face, n)) \
        == sorted(wrappers)


def test_the_entry_points_import_by_name() -> None:
    from corral.cli import main
    from corral.mcp_server import McpServer, serve

    assert callable(main) and callable(serve)
    assert McpServer.__module__ == "corral.faces.mcp_server"


def test_the_console_script_is_corral_cli_main() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"corral": "corral.cli:main"}
    module, _, attribute = scripts["corral"].partition(":")
    with pytest.raises(SystemExit) as done:  # argparse's --version exits
        getattr(importlib.import_module(module), attribute)(["--version"])
    assert done.value.code == 0


def test_python_dash_m_corral_runs_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "corral", "--version"], capture_output=True,
                          text=True, timeout=60, cwd=REPO, check=True)
    assert done.stdout.strip() == f"corral {corral.__version__}"


def test_the_entry_point_loads_nothing_of_corral_before_its_command_starts() -> None:
    # `corral call` starts the zygote template first, then imports the rest of corral:
    # importing the entry point must not load it already (the import system's lookups
    # of __path__ and the like reach the module's __getattr__)
    code = ("import sys; from corral.cli import main; "
            "print(sorted(m for m in sys.modules if m.startswith('corral.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=True)
    assert done.stdout.split("'corral.faces")[0] == done.stdout  # no face loaded
    assert "corral.api" not in done.stdout and "corral.sandbox.call_path" not in done.stdout
