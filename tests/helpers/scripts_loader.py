"""Load a script of scripts/ as a module, for the short versions of its runs in
the tests (scripts/ is not a package: each script runs on its own)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """The module of scripts/NAME.py, run once per call."""
    if str(SCRIPTS) not in sys.path:  # a script imports its siblings by bare name (run, its
        sys.path.append(str(SCRIPTS))  # directory is sys.path[0]); last: it shadows nothing
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a script's dataclasses look their module up
    spec.loader.exec_module(module)
    return module
