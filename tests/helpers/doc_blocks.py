"""The docs pages' Python blocks, for the tests that check or run them
(test_docs_examples, test_docs_integrations)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def python_blocks() -> Iterator[tuple[str, int, str]]:
    for page in sorted(DOCS.glob("*.md")):
        for index, code in enumerate(BLOCK.findall(page.read_text())):
            yield page.name, index, code


def block(page: str, needle: str) -> str:
    (code,) = [code for name, _, code in python_blocks() if name == page and needle in code]
    return code
