"""The tools page reads right as rendered, and the docs call it by its name."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
USER_PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_no_escaped_pipe_in_the_tools_table() -> None:
    # inside a code span MkDocs shows the backslash of `a\|b` as typed
    assert "\\|" not in (REPO / "docs" / "tools.md").read_text()


def test_no_page_calls_the_tools_page_a_contract() -> None:
    # "contract" is a word of the design, not one a user knows
    said = [page.name for page in USER_PAGES if "tool contract" in page.read_text()
            or "contract leaves open" in page.read_text()]
    assert said == []
