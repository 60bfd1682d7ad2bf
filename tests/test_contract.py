"""Conformance to DESIGN.md, line by line: the gaps a review found between the
contract (or what a careful user expects where it is silent) and the tools."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import Limits
from corral.fs import Root, Roots, _listing
from corral.policy import Policy, Rule
from corral.tools.base import Context
from corral.tools.registry import TOOLS
from tests.helpers.wire_calls import execute

TEMP = ".corral-tmp-4242-deadbeef"  # how corral/fs names a write's temp file while in flight


@pytest.fixture(scope="module")
def module_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    module_ws = tmp_path_factory.mktemp("contract")
    (module_ws / "a.txt").write_text("alpha\nbeta\n")
    (module_ws / "sub").mkdir()
    (module_ws / "sub" / "b.txt").write_text("beta\n")
    (module_ws / "sub" / TEMP).write_text("beta half-written\n")  # a write in flight
    (module_ws / ".cache").mkdir()
    (module_ws / ".cache" / "deep").mkdir()
    (module_ws / ".cache" / "deep" / "c.txt").write_text("cached\n")
    for n in range(5):
        (module_ws / f"n{n}.md").write_text("md\n")
    return module_ws


@pytest.fixture(scope="module")
def module_sb(module_ws: Path) -> Iterator[Sandbox]:
    with Sandbox(module_ws) as sandbox:
        yield sandbox


def error_of(module_sb: Sandbox, tool: str, **arguments: Any) -> dict[str, str]:
    response = module_sb.call(tool, arguments)
    assert not response["ok"], response
    return response["error"]


def in_process(*roots: Root, limits: Limits | None = None) -> Context:
    """A worker's Context without the worker: for what a kernel confinement test
    cannot observe (which directories a walk opens, a real second filesystem)."""
    return Context(Roots(roots[0], list(roots[1:])), limits or Limits(), Policy())


class TestTempFilesAreNotListed:
    """A write in flight leaves a .corral-tmp-* file beside its target for a few
    milliseconds; no listing may show it (a model would read or edit it)."""

    def test_list_directory(self, module_sb: Sandbox) -> None:
        result = module_sb.call("list_directory", {"path": "sub"})["result"]
        assert [e["name"] for e in result["entries"]] == ["b.txt"]
        tree = module_sb.call("list_directory", {"recursive": True})["result"]["entries"]
        assert not any(TEMP in e["name"] for e in tree)

    def test_search_files(self, module_sb: Sandbox) -> None:
        matches = module_sb.call("search_files", {"pattern": "**"})["result"]["matches"]
        assert matches and not any(TEMP in match for match in matches)

    def test_grep(self, module_sb: Sandbox) -> None:
        matches = module_sb.call("grep", {"pattern": "beta"})["result"]["matches"]
        assert sorted(m["path"] for m in matches) == ["a.txt", "sub/b.txt"]


def test_hidden_directories_are_not_walked_when_hidden_is_off(
    module_ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """include_hidden=false must not walk .git or node_modules-sized hidden trees
    only to throw their entries away."""
    listed: list[str] = []
    real = _listing.entries

    def spy(dir_fd: int) -> list[tuple[str, os.stat_result]]:
        listed.append(os.readlink(f"/proc/self/fd/{dir_fd}"))
        return real(dir_fd)

    monkeypatch.setattr(_listing, "entries", spy)
    with Root(str(module_ws)) as root:
        response = execute(in_process(root), {
            "tool": "list_directory",
            "arguments": {"recursive": True, "include_hidden": False},
        })
    assert response["ok"], response
    assert not any(".cache" in e["name"] for e in response["result"]["entries"])
    assert listed and not any("/.cache" in path for path in listed), listed


def test_search_files_honours_max_list_entries(module_ws: Path) -> None:
    with Sandbox(module_ws, limits=Limits(max_list_entries=2)) as capped:
        result = capped.call("search_files", {"pattern": "*.md"})["result"]
    assert (len(result["matches"]), result["truncated"]) == (2, True)


class TestMessages:
    """One clear sentence that names the path as the caller gave it."""

    @pytest.mark.parametrize(
        ("tool", "arguments", "code", "named"),
        [
            ("read_file", {"path": "nope.txt"}, "not_found", "nope.txt"),
            ("read_file", {"path": "sub"}, "is_a_directory", "sub"),
            ("read_file", {"path": "../up.txt"}, "outside_workspace", "../up.txt"),
            ("list_directory", {"path": "a.txt"}, "not_a_directory", "a.txt"),
            ("search_files", {"pattern": "*", "path": "a.txt"}, "not_a_directory", "a.txt"),
            ("create_directory", {"path": "a.txt"}, "already_exists", "a.txt"),
            ("move_file", {"source": "gone", "destination": "x"}, "not_found", "gone"),
            ("move_file", {"source": "a.txt", "destination": "no/dir/x"}, "not_found", "no/dir/x"),
            ("copy_file", {"source": "a.txt", "destination": "sub/b.txt"}, "already_exists",
             "sub/b.txt"),
            ("edit_file", {"path": "nope.txt", "old_string": "a", "new_string": "b"},
             "not_found", "nope.txt"),
            ("write_file", {"path": "a.txt", "content": "", "expected_version": "x"},
             "conflict", "a.txt"),
            ("read_file", {"path": "a\0b"}, "invalid_arguments", "a"),
        ],
    )
    def test_one_sentence_naming_the_path(
        self, module_sb: Sandbox, tool: str, arguments: dict[str, Any], code: str, named: str
    ) -> None:
        error = error_of(module_sb, tool, **arguments)
        assert error["code"] == code
        message = error["message"]
        assert named in message
        assert message.endswith(".") and "\n" not in message, message

    def test_too_large_names_both_sizes(self, module_ws: Path) -> None:
        with Sandbox(module_ws, limits=Limits(max_file_bytes=5)) as small:
            message = error_of(
                small, "edit_file", path="a.txt", old_string="beta", new_string="gamma"
            )["message"]
        assert "a.txt" in message and "11" in message and "5" in message
        assert message.endswith(".")

    def test_absolute_path_is_named_as_given(self, module_sb: Sandbox, module_ws: Path) -> None:
        given = f"{module_ws}/missing.txt"
        message = error_of(module_sb, "read_file", path=given)["message"]
        assert given in message and message.endswith(".")


class TestAuditDecisions:
    """A call refused by its tool's mode was decided by policy: the audit line says so."""

    def lines(self, log: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in log.read_text().splitlines()]

    def test_tool_mode_refusals(self, module_ws: Path, tmp_path: Path) -> None:
        log = tmp_path / "audit.jsonl"
        policy = Policy(tool_modes={"stat_file": "supervised"})
        with Sandbox(module_ws, policy=policy, audit=log) as audited:
            audited.call("delete_file", {"path": "a.txt"})
            audited.call("stat_file", {"path": "a.txt"})
        with Sandbox(
            module_ws, policy=policy, audit=log, approve=lambda request: False
        ) as refusing:
            refusing.call("stat_file", {"path": "a.txt"})
        with Sandbox(module_ws, policy=Policy(read_only=True), audit=log) as read_only:
            read_only.call("write_file", {"path": "a.txt", "content": ""})
        got = [
            (r["tool"], r["path"], r["error"], r["decision"], r["rule"]) for r in self.lines(log)
        ]
        assert got == [
            ("delete_file", "a.txt", "tool_disabled", "deny", "tool-mode"),
            ("stat_file", "a.txt", "approval_required", "supervised", "tool-mode"),
            ("stat_file", "a.txt", None, "supervised", "tool-mode"),  # the decision's record
            ("stat_file", "a.txt", "approval_denied", "supervised", "tool-mode"),
            ("write_file", "a.txt", "tool_disabled", "deny", "read-only"),
        ]


@pytest.fixture
def other_fs(tmp_path: Path) -> Iterator[Path]:
    """A directory on another file system than tmp_path (/dev/shm is tmpfs)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a file system of its own")
    other = shm / f"corral-test-{uuid.uuid4().hex}"
    other.mkdir()
    try:
        yield other
    finally:
        shutil.rmtree(other)


class TestMoveAcrossFileSystems:
    """rename(2) cannot cross file systems; a file is then copied and removed."""

    def test_file_is_copied_then_removed(self, tmp_path: Path, other_fs: Path) -> None:
        (tmp_path / "f.txt").write_text("moving\n")
        (tmp_path / "f.txt").chmod(0o640)
        with Root(str(tmp_path)) as here, Root(str(other_fs)) as there:
            response = execute(in_process(here, there), {
                "tool": "move_file",
                "arguments": {"source": "f.txt", "destination": f"{other_fs}/g.txt"},
            })
        assert response["ok"], response
        assert response["result"] == {"source": "f.txt", "destination": f"{other_fs}/g.txt"}
        assert not (tmp_path / "f.txt").exists()
        assert (other_fs / "g.txt").read_text() == "moving\n"
        assert (other_fs / "g.txt").stat().st_mode & 0o777 == 0o640

    def test_existing_destination_is_kept(self, tmp_path: Path, other_fs: Path) -> None:
        (tmp_path / "f.txt").write_text("new\n")
        (other_fs / "g.txt").write_text("old\n")
        with Root(str(tmp_path)) as here, Root(str(other_fs)) as there:
            response = execute(in_process(here, there), {
                "tool": "move_file",
                "arguments": {"source": "f.txt", "destination": f"{other_fs}/g.txt"},
            })
        assert response["error"]["code"] == "already_exists"
        assert (tmp_path / "f.txt").read_text() == "new\n"
        assert (other_fs / "g.txt").read_text() == "old\n"

    def test_directory_is_refused(self, tmp_path: Path, other_fs: Path) -> None:
        (tmp_path / "d").mkdir()
        with Root(str(tmp_path)) as here, Root(str(other_fs)) as there:
            response = execute(in_process(here, there), {
                "tool": "move_file",
                "arguments": {"source": "d", "destination": f"{other_fs}/d"},
            })
        assert response["error"]["code"] == "io_error"
        assert "d" in response["error"]["message"]
        assert (tmp_path / "d").is_dir() and not (other_fs / "d").exists()


def test_every_description_is_one_paragraph() -> None:
    for tool in TOOLS.values():
        assert tool.description and "\n\n" not in tool.description, tool.name
        assert set(tool.annotations) == {"readOnlyHint", "destructiveHint", "idempotentHint",
                                         "openWorldHint"}


def test_copy_keeps_the_permission_bits(module_ws: Path, module_sb: Sandbox) -> None:
    """A copied script stays executable (as cp does); set-id bits are never copied."""
    (module_ws / "run.sh").write_text("#!/bin/sh\n")
    (module_ws / "run.sh").chmod(0o4755)
    response = module_sb.call("copy_file", {"source": "run.sh", "destination": "bin/run2.sh"})
    assert response["ok"], response
    assert (module_ws / "bin" / "run2.sh").stat().st_mode & 0o7777 == 0o755


class TestFoundPathsAreRootRelative:
    """search_files and grep name what they find relative to the workspace root,
    however the directory searched was spelled ("matches (paths relative to the root)")."""

    @pytest.mark.parametrize("spelling", ["sub", "./sub", "sub/", "sub/../sub", "{ws}/sub"])
    def test_search_files(self, module_sb: Sandbox, module_ws: Path, spelling: str) -> None:
        path = spelling.format(ws=module_ws)
        result = module_sb.call("search_files", {"pattern": "*.txt", "path": path})["result"]
        assert result["matches"] == ["sub/b.txt"]

    @pytest.mark.parametrize("spelling", ["./sub", "{ws}/sub"])
    def test_grep(self, module_sb: Sandbox, module_ws: Path, spelling: str) -> None:
        path = spelling.format(ws=module_ws)
        matches = module_sb.call("grep", {"pattern": "beta", "path": path})["result"]["matches"]
        assert [m["path"] for m in matches] == ["sub/b.txt"]

    def test_other_roots_are_named_absolutely(self, tmp_path: Path) -> None:
        """A path relative to an allowed root would be read from the workspace."""
        (tmp_path / "ws").mkdir()
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "d.txt").write_text("beta\n")
        with Root(str(tmp_path / "ws")) as here, Root(str(tmp_path / "data"), mode="ro") as data:
            ctx = in_process(here, data)
            found = execute(ctx, {"tool": "search_files",
                                  "arguments": {"pattern": "*.txt", "path": f"{data.path}/."}})
            grepped = execute(ctx, {"tool": "grep",
                                    "arguments": {"pattern": "beta", "path": data.path}})
        assert found["result"]["matches"] == [f"{data.path}/d.txt"]
        assert [m["path"] for m in grepped["result"]["matches"]] == [f"{data.path}/d.txt"]


def test_a_line_cut_to_max_bytes_is_said_so(module_sb: Sandbox, module_ws: Path) -> None:
    """A line longer than max_bytes comes back cut: the model must be told, and how
    to read the rest, not sent on to the next line as if nothing was lost."""
    (module_ws / "wide.txt").write_text("w" * 300 + "\nnext\n")
    response = module_sb.call("read_file", {"path": "wide.txt", "max_bytes": 100})
    assert response["result"]["content"] == "w" * 100
    assert "line 1 was cut at 100 of 301 bytes" in response["text"]
    assert "read the rest with offset=1, byte_offset=100" in response["text"]
    assert (response["result"]["truncated"], response["result"]["next_byte_offset"]) == (True, 100)


class TestEditLimits:
    """max_file_bytes is the "largest file read, edited or grown by append";
    max_write_bytes bounds what one call writes anew, not the file it edits."""

    @pytest.fixture
    def tight(self, tmp_path: Path) -> Iterator[tuple[Sandbox, Path]]:
        with Sandbox(tmp_path, limits=Limits(max_write_bytes=50, max_file_bytes=400)) as sandbox:
            yield sandbox, tmp_path

    def test_a_file_larger_than_max_write_bytes_can_be_edited(
        self, tight: tuple[Sandbox, Path]
    ) -> None:
        sandbox, module_ws = tight
        (module_ws / "big.txt").write_text("a" * 200 + "\nneedle\n")
        response = sandbox.call("edit_file", {"path": "big.txt", "old_string": "needle",
                                              "new_string": "thread"})
        assert response["ok"], response
        assert (module_ws / "big.txt").read_text() == "a" * 200 + "\nthread\n"

    def test_new_bytes_past_max_write_bytes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, module_ws = tight
        (module_ws / "x.txt").write_text("x" * 30)
        edit = {"path": "x.txt", "old_string": "x", "new_string": "xy", "replace_all": True}
        error = sandbox.call("edit_file", edit)["error"]
        assert error["code"] == "too_large"
        assert "x.txt" in error["message"] and "60" in error["message"]
        assert "50" in error["message"]
        assert (module_ws / "x.txt").read_text() == "x" * 30

    def test_result_past_max_file_bytes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, module_ws = tight
        (module_ws / "f.txt").write_text("b" * 380 + "\n")
        edit = {"path": "f.txt", "old_string": "\n", "new_string": "c" * 40 + "\n"}
        error = sandbox.call("edit_file", edit)["error"]
        assert error["code"] == "too_large"
        assert "421" in error["message"] and "400" in error["message"]
        assert (module_ws / "f.txt").read_text() == "b" * 380 + "\n"


def test_a_base64_page_says_where_to_continue(module_sb: Sandbox) -> None:
    response = module_sb.call("read_file", {"path": "a.txt", "encoding": "base64", "max_bytes": 8})
    assert response["result"]["truncated"] and response["result"]["next_offset"] == 2
    assert "offset=2" in response["text"]


def test_stat_of_a_missing_path_has_every_field(module_sb: Sandbox) -> None:
    """exists=false is not an error, and the result keeps its shape (fields null)."""
    result = module_sb.call("stat_file", {"path": "missing/file.txt"})["result"]
    assert result == {"path": "missing/file.txt", "exists": False, "type": None, "size": None,
                      "modified": None, "mode": None, "version": None}
    present = module_sb.call("stat_file", {"path": "a.txt"})["result"]
    assert set(present) == set(result)


def test_grep_returns_at_most_max_read_bytes_of_lines(tmp_path: Path) -> None:
    """grep hands back file contents: max_read_bytes bounds them as it bounds a read."""
    (tmp_path / "many.txt").write_text("".join(f"match {n:04d}\n" for n in range(50)))
    with Sandbox(tmp_path, limits=Limits(max_read_bytes=100)) as small:
        result = small.call("grep", {"pattern": "match", "max_results": 1000})["result"]
    assert result["truncated"] and 0 < len(result["matches"]) < 50
    assert sum(len(m["text"].encode()) for m in result["matches"]) <= 100


def test_a_refused_path_approval_names_its_rule(module_ws: Path) -> None:
    rule = Rule("ask-for-text", "supervised", ("*",), ("**/*.txt",))
    with Sandbox(module_ws, policy=Policy(rules=(rule,)), approve=lambda request: False) as asking:
        error = asking.call("read_file", {"path": "a.txt"})["error"]
    assert (error["code"], error.get("rule")) == ("approval_denied", "ask-for-text")
    assert "a.txt" in error["message"]
