"""The one table of every tool's facts (corral/tool_table.py) against the registry
of the tools themselves: a tool is in both or in neither, writes in both or in
neither, and a writing tool says what its writes cost and how history records
them (else its bytes and files would escape their quotas, and nobody notice).
And the host reads a patch's files once a call, for the grants and the quotas."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from corral import Approval, Sandbox
from corral.calls.messages import CallRequest, CleanupRequest
from corral.config import QuotaOptions
from corral.config_keys import TOOL_NAMES
from corral.policy import ACCESS_KINDS, Policy
from corral.tool_table import (
    APPLY_PATCH,
    EVERY_PATH_ARGUMENT,
    PATCH_ARGUMENT,
    ROWS,
    TABLE,
    ToolRow,
    check,
)
from corral.tools import patch_format
from corral.tools.base import Outcome, Tool
from corral.tools.registry import TOOLS


def unaccounted(tools: Mapping[str, Tool], table: Mapping[str, ToolRow]) -> list[str]:
    """What the table leaves out of the registry (or the other way round)."""
    found = [f"{name}: a row but no tool" for name in table if name not in tools]
    for name, tool in tools.items():
        row = table.get(name)
        if row is None:
            found.append(f"{name}: a tool but no row")
            continue
        if row.writes != tool.writes:
            found.append(f"{name}: writes {tool.writes} but its row says {row.writes}")
        if tool.writes and row.cost is None:
            found.append(f"{name} writes without a cost kind")
        if tool.writes and row.creates is None:
            found.append(f"{name} writes without saying what it creates")
        if tool.writes and row.record is None:
            found.append(f"{name} writes without a record kind")
        taken = set(tool.input_schema["properties"])
        for argument in (*row.path_arguments, *row.cleanup_arguments):
            if argument not in taken:
                found.append(f"{name} takes no argument {argument!r}")
    return found


def test_every_tool_of_the_registry_has_its_row_and_every_row_its_tool() -> None:
    assert unaccounted(TOOLS, TABLE) == []


def test_a_writing_tool_without_a_cost_or_a_record_kind_is_found() -> None:
    def run(ctx: Any, args: dict[str, Any]) -> Outcome:
        return Outcome({}, "")

    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    fake = Tool("shred_file", "Shred", "Shreds a file.", schema, {}, {}, True, run)
    row = ToolRow("shred_file", True, (frozenset({"list"}), frozenset({"write"})),
                  path_arguments=("path",))
    assert unaccounted({**TOOLS, "shred_file": fake}, {**TABLE, "shred_file": row}) == [
        "shred_file writes without a cost kind",
        "shred_file writes without saying what it creates",
        "shred_file writes without a record kind",
    ]
    assert unaccounted({**TOOLS, "shred_file": fake}, TABLE) == ["shred_file: a tool but no row"]
    # and the table refuses such a row when it is imported: nothing would count its writes
    with pytest.raises(ValueError, match="shred_file has no cost, creates, record"):
        check(row)
    with pytest.raises(ValueError, match="cost 'cheap' is not one of"):
        check(row._replace(cost="cheap", creates="one", record="change"))
    check(row._replace(cost="sized", creates="one", record="change"))


def test_the_table_holds_the_contracts_names_and_policys_kinds() -> None:
    assert tuple(row.name for row in ROWS) == TOOL_NAMES and len(set(TOOL_NAMES)) == len(ROWS)
    assert TOOL_NAMES[0] == "read_file" and TOOL_NAMES[-1] == APPLY_PATCH
    for row in ROWS:
        assert set().union(*row.access) <= set(ACCESS_KINDS), row.name
        assert set(row.cleanup_arguments) <= set(row.path_arguments), row.name
        # a reader costs, creates and records nothing, and needs no version
        assert row.writes or (row.cost, row.creates, row.record) == (None, None, None)
        assert row.writes or row.session in (None, "reads"), row.name
    assert PATCH_ARGUMENT not in EVERY_PATH_ARGUMENT
    assert [row.name for row in ROWS if PATCH_ARGUMENT in row.path_arguments] == [APPLY_PATCH]


def test_a_crashs_cleanup_gets_the_arguments_that_name_where_a_temp_lies() -> None:
    def kept(tool: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        return CleanupRequest.after(7, CallRequest(tool, arguments, id=3)).arguments

    assert kept("copy_file", {"source": "a", "destination": "b", "overwrite": True}) == {
        "destination": "b"}
    assert kept("write_file", {"path": "a", "content": "x" * 100}) == {"path": "a"}
    assert kept(APPLY_PATCH, {"patch": "*** Begin Patch\n*** End Patch\n"}) == {}
    assert kept("no_such_tool", {"path": "a"}) == {}


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The patches the host reads the headers of (the worker, another process, parses
    its own)."""
    read: list[str] = []
    headers = patch_format._headers_of

    def counted(patch: str) -> tuple[patch_format.FilePatch, ...]:
        read.append(patch)
        return headers(patch)

    monkeypatch.setattr(patch_format, "_headers_of", counted)
    return read


def _patch(path: str) -> dict[str, str]:
    return {"patch": f"*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch\n"}


def test_the_host_reads_a_patchs_files_once_for_its_grants_and_its_quotas(
        ws: Path, parses: list[str]) -> None:
    supervised = Policy(tool_modes={APPLY_PATCH: "supervised"})
    with Sandbox(ws, policy=supervised, approve=lambda request: Approval(True, remember="rule"),
                 quota=QuotaOptions(write_bytes_per_hour=10**6,
                                    files_created_per_hour=100)) as sb:
        assert sb.call(APPLY_PATCH, _patch("a/one.txt"))["ok"]  # asked, and remembered
        assert len(parses) == 1
        assert sb.call(APPLY_PATCH, _patch("a/two.txt"))["ok"]  # carries the grant
        assert len(parses) == 2
        assert [grant["uses"] for grant in sb.approvals()] == [1]
    assert (ws / "a/two.txt").read_text() == "x\n"


def test_a_host_with_no_quota_and_no_grant_reads_no_patch(ws: Path, parses: list[str]) -> None:
    with Sandbox(ws) as sb:
        assert sb.call(APPLY_PATCH, _patch("one.txt"))["ok"]
    assert parses == []
