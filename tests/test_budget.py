"""A read's budget (max_bytes, max_read_bytes) bounds what comes back as JSON
carries it: a control character is six bytes there (\\u0001), so a file of them
must not return six times the budget; numbering must not multiply a file of
empty lines; read_multiple_files shares one budget across its files; grep and
listings count their JSON too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import Limits
from tests.helpers.calls import ok

BUDGET = 64 * 1024
CONTROL_LINE = b"\x01\x1b\x7f" * 30 + b"\n"  # 91 bytes, 542 as JSON


def size(value: Any) -> int:
    """Bytes on the wire: every face encodes results with json's defaults."""
    return len(json.dumps(value))


@pytest.fixture(scope="module")
def budget_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    budget_ws = tmp_path_factory.mktemp("ws")
    (budget_ws / "controls.txt").write_bytes(CONTROL_LINE * 4000)  # 364 KB raw
    (budget_ws / "empty-lines.txt").write_bytes(b"\n" * (BUDGET * 2))
    for index in range(50):
        (budget_ws / "many" / f"{index:02d}.txt").parent.mkdir(exist_ok=True)
        (budget_ws / "many" / f"{index:02d}.txt").write_bytes(CONTROL_LINE * 20)
    names = budget_ws / "names"
    names.mkdir()
    for index in range(300):
        (names / (f"{index:03d}" + "\x01" * 200)).write_text("x")
    return budget_ws


@pytest.fixture(scope="module")
def budget_sb(budget_ws: Path) -> Iterator[Sandbox]:
    limits = Limits(max_read_bytes=BUDGET, max_list_entries=100_000)
    with Sandbox(budget_ws, limits=limits) as sandbox:
        yield sandbox


def test_control_characters_count_as_their_json_escapes(budget_sb: Sandbox) -> None:
    response = ok(budget_sb, "read_file", path="controls.txt", limit=10**6)
    result = response["result"]
    assert result["truncated"] and result["lines_read"] > 0
    assert size(result["content"]) - 2 <= BUDGET  # 2: the quotes
    assert size(response["text"]) <= 2 * BUDGET
    assert size(response) <= 3 * BUDGET + 1024  # content, text and the fields around them
    # and paging still reaches the end
    offset, pieces = 1, []
    while offset is not None:
        page = ok(budget_sb, "read_file", path="controls.txt", offset=offset, limit=10**6)["result"]
        pieces.append(page["content"])
        offset = page["next_offset"]
    assert "".join(pieces).encode() == CONTROL_LINE * 4000


def test_numbering_cannot_multiply_a_file_of_empty_lines(budget_sb: Sandbox) -> None:
    response = ok(budget_sb, "read_file", path="empty-lines.txt", limit=10**6)
    assert response["result"]["truncated"]
    assert size(response["text"]) <= 2 * BUDGET + 200


def test_read_multiple_files_shares_one_budget(budget_sb: Sandbox) -> None:
    paths = [f"many/{index:02d}.txt" for index in range(50)]
    response = ok(budget_sb, "read_multiple_files", paths=paths, limit=10**6)
    files = response["result"]["files"]
    returned = sum(size(f["content"]) - 2 for f in files if f["ok"])
    assert returned <= BUDGET
    read = [f for f in files if f["ok"]]
    assert read[-1]["truncated"] and all(not f["truncated"] for f in read[:-1])
    refused = files[len(read):]
    assert refused and all(f["error"]["code"] == "too_large" for f in refused)
    assert "budget" in refused[0]["error"]["message"]
    assert size(response) <= 3 * BUDGET + 50 * 300  # plus a line of fields per file


def test_grep_counts_matches_as_json(budget_sb: Sandbox) -> None:
    response = ok(budget_sb, "grep", pattern="\x1b", path="controls.txt", max_results=5000)
    result = response["result"]
    assert result["truncated"]
    assert size(result["matches"]) <= BUDGET + 40 * len(result["matches"])  # {"path":..,}
    assert size(response["text"]) <= BUDGET + 100


@pytest.mark.parametrize("tool", ["list_directory", "search_files"])
def test_listings_count_names_as_json(budget_sb: Sandbox, tool: str) -> None:
    arguments = {"path": "names", "max_entries": 100_000} if tool == "list_directory" else {
        "path": "names", "pattern": "*", "max_results": 100_000}
    response = ok(budget_sb, tool, **arguments)
    result = response["result"]
    listed = result["entries"] if tool == "list_directory" else result["matches"]
    assert result["truncated"] and 0 < len(listed) < 300
    assert size(result) <= 256 * 1024 + 1024


def test_an_edit_diff_counts_its_json(tmp_path: Path) -> None:
    from corral.tools.diff import DIFF_MAX_BYTES

    (tmp_path / "c.txt").write_bytes((b"\x01" * 40 + b"\n") * 30_000)  # 1.2 MB, 7.3 MB as JSON
    limits = Limits(max_write_bytes=8 * 1024 * 1024)
    with Sandbox(tmp_path, limits=limits) as sandbox:
        edit = {"path": "c.txt", "old_string": "\x01", "new_string": "\x02", "replace_all": True}
        result = ok(sandbox, "edit_file", **edit)["result"]
    assert result["diff"] and size(result["diff"]) <= DIFF_MAX_BYTES + 2
