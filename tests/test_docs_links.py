"""Every relative link in the README and the docs/ pages points at a file that
exists and, with a #fragment, at a heading that page has (as mkdocs slugs it)."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

from corral.config_keys import KEYS, Key

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)


def slug(heading: str) -> str:
    """Python-Markdown's toc slugify, which mkdocs uses for heading ids."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)}


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment}")
    assert not broken, f"{page.name}: {broken}"


def test_every_page_in_the_site_is_linked_from_the_readme() -> None:
    nav = set(re.findall(r"^\s*- [^:]+: (\S+\.md)$", (REPO / "mkdocs.yml").read_text(), flags=re.M))
    linked = {t.partition("#")[0] for t in links(REPO / "README.md")}
    assert nav - {"index.md"}, "mkdocs.yml lists no pages"
    assert not {f"docs/{page}" for page in nav - {"index.md"}} - linked


def section_text(section: str) -> str:
    page = (REPO / "docs" / "configuration.md").read_text()
    assert f"## `[{section}]`" in page, f"docs/configuration.md has no [{section}] section"
    return page.split(f"## `[{section}]`")[1].split("\n## ")[0]


@pytest.mark.parametrize("key", [key for key in KEYS if key.section != "tools"],
                         ids=lambda key: key.where)
def test_configuration_page_documents_every_key_and_default(key: Key) -> None:
    """Each key of the table has a row `| `key` | type | `default` | ...` in its
    section of the page (a default of None: a cell that starts with "none")."""
    cells = [re.split(r"(?<!\\)\|", line)[1:-1] for line in section_text(key.section).splitlines()
             if line.startswith("| `")]
    rows = {cell[0].strip(" `"): cell[2].strip() for cell in cells}
    assert key.name in rows, f"docs/configuration.md [{key.section}] lacks {key.name}"
    if key.default is None:
        assert rows[key.name].startswith("none"), (key.where, rows[key.name])
        return
    shown = json.dumps(list(key.default) if isinstance(key.default, tuple) else key.default)
    assert json.loads(rows[key.name].split("`")[1]) == json.loads(shown), (
        key.where, rows[key.name])


def test_configuration_page_names_every_tool_and_its_default() -> None:
    body = section_text("tools")
    default_line = next(line for line in body.splitlines() if line.startswith("- Default:"))
    for key in KEYS:
        if key.section == "tools":
            assert f"`{key.name}`" in body, key.name
            assert (key.default == "allow") != (f"`{key.name}`" in default_line), key.name
