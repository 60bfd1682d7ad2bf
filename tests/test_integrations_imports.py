"""`import corral` (and corral.integrations itself) never imports an agent
framework: each adapter's framework is imported by that adapter's module only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("langchain", "langchain_core", "langgraph", "deepagents", "agents", "pydantic_ai",
              "pydantic")


def test_corral_imports_no_framework() -> None:
    code = ("import sys, corral, corral.api, corral.integrations, corral.integrations._common\n"
            "from corral import Sandbox, AsyncSandbox, Pool\n"
            f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
