"""Pure parts of the tools layer: the schema validator, rendering, the specs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.errors import CorralError
from corral.fs import Entry
from corral.tools import render, schema
from corral.tools.diff import unified_diff
from corral.tools.edit import Applied, Edit, apply
from corral.tools.listing import ENTRY_OVERHEAD, hidden, take
from corral.tools.read import image_type, is_binary, page, split_lines, whole_file_lines
from corral.tools.registry import TOOLS, validate

# The contract's argument names (DESIGN.md "Tools"), exactly.
CONTRACT_ARGUMENTS = {
    # byte_offset is corral's one addition: it reads the rest of a line cut by max_bytes.
    "read_file": {"path", "offset", "limit", "max_bytes", "encoding", "byte_offset"},
    "write_file": {"path", "content", "encoding", "expected_version"},
    "edit_file": {"path", "old_string", "new_string", "replace_all", "edits",
                  "expected_version", "dry_run", "match"},
    "read_multiple_files": {"paths", "offset", "limit", "max_bytes"},
    "append_file": {"path", "content"},
    "list_directory": {"path", "recursive", "max_entries", "include_hidden", "include_ignored"},
    "create_directory": {"path"},
    "stat_file": {"path"},
    "move_file": {"source", "destination", "overwrite"},
    "copy_file": {"source", "destination", "overwrite"},
    "delete_file": {"path"},
    "search_files": {"pattern", "path", "max_results", "include_ignored"},
    "grep": {"pattern", "path", "glob", "ignore_case", "max_results", "include_ignored"},
    "list_allowed_directories": set(),
    "delete_directory": {"path", "recursive"},
    "apply_patch": {"patch", "dry_run", "match"},
}

CONTRACT_DEFAULTS = {
    "read_file": {"offset": 1, "limit": 2000, "max_bytes": 262144, "encoding": "utf-8",
                  "byte_offset": 0},
    "write_file": {"encoding": "utf-8", "expected_version": None},
    "edit_file": {"replace_all": False, "dry_run": False, "expected_version": None,
                  "match": "tolerant"},
    "list_directory": {"path": ".", "recursive": False, "max_entries": 500,
                       "include_hidden": True, "include_ignored": False},
    "move_file": {"overwrite": False},
    "delete_directory": {"recursive": False},
    "copy_file": {"overwrite": False},
    "apply_patch": {"dry_run": False, "match": "tolerant"},
    "search_files": {"path": ".", "max_results": 500, "include_ignored": False},
    "grep": {"path": ".", "glob": None, "ignore_case": False, "max_results": 200,
             "include_ignored": False},
}

READ_ONLY = {"read_file", "read_multiple_files", "list_directory", "stat_file",
             "search_files", "grep", "list_allowed_directories"}


class TestSpecs:
    def test_every_contract_tool_and_no_other(self) -> None:
        assert set(TOOLS) == set(CONTRACT_ARGUMENTS)

    @pytest.mark.parametrize("name", sorted(CONTRACT_ARGUMENTS))
    def test_argument_names_are_the_contract(self, name: str) -> None:
        assert set(TOOLS[name].input_schema["properties"]) == CONTRACT_ARGUMENTS[name]

    @pytest.mark.parametrize("name", sorted(CONTRACT_DEFAULTS))
    def test_defaults_are_the_contract(self, name: str) -> None:
        props = TOOLS[name].input_schema["properties"]
        assert {k: props[k]["default"] for k in CONTRACT_DEFAULTS[name]} == CONTRACT_DEFAULTS[name]

    @pytest.mark.parametrize("name", sorted(CONTRACT_ARGUMENTS))
    def test_spec_shape(self, name: str) -> None:
        tool = TOOLS[name]
        spec = tool.spec()
        assert set(spec) == {"name", "title", "description", "input_schema", "output_schema",
                             "annotations"}
        assert tool.title and tool.output_schema["type"] == "object"
        assert spec["input_schema"]["type"] == "object"
        assert spec["input_schema"]["additionalProperties"] is False
        assert len(tool.description) > 80 and "\n" not in tool.description
        assert set(tool.annotations) == {"readOnlyHint", "destructiveHint", "idempotentHint",
                                         "openWorldHint"}
        assert tool.annotations["openWorldHint"] is False
        assert tool.annotations["readOnlyHint"] is (name in READ_ONLY)
        assert tool.writes is (name not in READ_ONLY)
        if tool.annotations["readOnlyHint"]:
            assert tool.annotations["destructiveHint"] is False


def _invalid(name: str, arguments: object) -> str:
    with pytest.raises(CorralError) as caught:
        validate(TOOLS[name], arguments)
    assert caught.value.code == "invalid_arguments"
    return caught.value.message


def _walk(schema: object) -> list[dict]:
    """Every schema object beneath (and including) `schema`."""
    if isinstance(schema, list):
        return [found for item in schema for found in _walk(item)]
    if not isinstance(schema, dict):
        return []
    return [schema, *(found for value in schema.values() for found in _walk(value))]


class TestStrictShapes:
    @pytest.mark.parametrize("name", sorted(CONTRACT_ARGUMENTS))
    def test_no_type_arrays_and_every_optional_takes_null(self, name: str) -> None:
        for node in _walk(TOOLS[name].input_schema):
            assert not isinstance(node.get("type"), list), node
            if node.get("type") == "object":
                for key, prop in node["properties"].items():
                    if key not in node.get("required", ()):
                        assert {"type": "null"} in prop["anyOf"], (name, key)

    @pytest.mark.parametrize("name", sorted(CONTRACT_ARGUMENTS))
    def test_null_for_every_optional_argument_means_its_default(self, name: str) -> None:
        props = TOOLS[name].input_schema["properties"]
        required = TOOLS[name].input_schema.get("required", [])
        given = {key: "x" if key != "paths" else ["x"] for key in required}
        nulls = {key: None for key in props if key not in required}
        assert validate(TOOLS[name], {**given, **nulls}) == validate(TOOLS[name], given)

    def test_strict_edit_file_is_one_edit_or_a_list(self) -> None:
        single = validate(TOOLS["edit_file"], {
            "path": "a", "old_string": "x", "new_string": "y", "replace_all": None,
            "edits": None, "expected_version": None, "dry_run": None, "match": None,
        })
        assert single == {"path": "a", "old_string": "x", "new_string": "y",
                          "replace_all": False, "expected_version": None, "dry_run": False,
                          "match": "tolerant"}
        many = validate(TOOLS["edit_file"], {
            "path": "a", "old_string": None, "new_string": None, "replace_all": None,
            "edits": [{"old_string": "x", "new_string": "y", "replace_all": None}],
            "expected_version": None, "dry_run": None,
        })
        assert many["edits"] == [{"old_string": "x", "new_string": "y", "replace_all": False}]
        assert "old_string" not in many

    def test_null_for_a_required_argument_is_refused(self) -> None:
        assert "'path'" in _invalid("read_file", {"path": None})
        assert "'edits[0].old_string'" in _invalid(
            "edit_file", {"path": "a", "edits": [{"old_string": None, "new_string": "y"}]}
        )

    def test_any_of_names_what_is_wrong(self) -> None:
        assert "must be an integer" in _invalid("read_file", {"path": "a", "offset": "01"})
        with pytest.raises(CorralError, match="must be null"):
            schema.check(1, {"anyOf": [{"type": "null"}]}, "x")
        either = {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}
        assert schema.check("s", either, "x") == "s"
        with pytest.raises(CorralError, match="must be a string"):
            schema.check(1.5, either, "x")


class TestValidate:
    def test_fills_defaults_without_touching_given_values(self) -> None:
        args = validate(TOOLS["read_file"], {"path": "a", "limit": 5})
        assert args == {"path": "a", "offset": 1, "limit": 5, "max_bytes": 262144,
                        "encoding": "utf-8", "byte_offset": 0}

    def test_unknown_argument_is_named(self) -> None:
        assert "'lenght'" in _invalid("read_file", {"path": "a", "lenght": 3})

    def test_missing_required_is_named(self) -> None:
        assert "'content'" in _invalid("write_file", {"path": "a"})

    @pytest.mark.parametrize(
        ("name", "arguments", "field"),
        [
            ("read_file", {"path": 3}, "'path'"),
            ("read_file", {"path": "a", "offset": "1.0"}, "'offset'"),
            ("read_file", {"path": "a", "limit": True}, "'limit'"),  # bool is not an integer
            ("read_file", {"path": "a", "limit": 1.5}, "'limit'"),
            ("read_file", {"path": "a", "limit": 0}, "'limit'"),
            ("read_file", {"path": "a", "encoding": "latin-1"}, "'encoding'"),
            ("list_directory", {"recursive": "yes"}, "'recursive'"),
            ("read_multiple_files", {"paths": "a"}, "'paths'"),
            ("read_multiple_files", {"paths": []}, "'paths'"),
            ("read_multiple_files", {"paths": ["a", 1]}, "'paths[1]'"),
            ("edit_file", {"path": "a", "edits": [{"old_string": "x"}]}, "'edits[0].new_string'"),
            ("edit_file", {"path": "a", "edits": [{"old_string": "x", "new_string": "y",
                                                   "extra": 1}]}, "'edits[0].extra'"),
            ("edit_file", {"path": "a", "old_string": "", "new_string": "y"}, "'old_string'"),
            ("write_file", {"path": "a", "content": "x", "expected_version": 5},
             "'expected_version'"),
            ("grep", {"pattern": "x", "glob": 3}, "'glob'"),
            ("stat_file", {"path": ""}, "'path'"),
        ],
    )
    def test_mistyped_argument_is_named(self, name: str, arguments: dict, field: str) -> None:
        assert field in _invalid(name, arguments)

    def test_too_many_paths(self) -> None:
        assert "at most 50" in _invalid("read_multiple_files", {"paths": ["a"] * 51})

    @pytest.mark.parametrize("arguments", [None, [], "path", 3])
    def test_arguments_must_be_an_object(self, arguments: object) -> None:
        assert "object" in _invalid("stat_file", arguments)

    def test_null_means_the_default_only_for_optional_arguments(self) -> None:
        assert validate(TOOLS["grep"], {"pattern": "x", "glob": None})["glob"] is None
        assert validate(TOOLS["grep"], {"pattern": "x", "path": None})["path"] == "."
        assert "'pattern'" in _invalid("grep", {"pattern": None})

    def test_schema_rejects_unsupported_type_names(self) -> None:
        with pytest.raises(ValueError):
            schema.check(1, {"type": "integr"}, "x")

    def test_number_bounds(self) -> None:
        schema.check(2.5, {"type": "number", "minimum": 1, "maximum": 3}, "x")
        with pytest.raises(CorralError, match="at most 3"):
            schema.check(4, {"type": "number", "maximum": 3}, "x")


class TestRender:
    def test_numbered_is_cat_n(self) -> None:
        assert render.numbered(["a\n", "b\r\n", "c"], 9) == "     9\ta\n    10\tb\n    11\tc"

    @pytest.mark.parametrize("start", [1, 1990, render.MAX_PREFIXED_LINES - 5])
    def test_numbered_many_lines_is_cat_n_and_makes_prefixes_once(self, start: int) -> None:
        lines = [f"line {n}\n" for n in range(20_000)]
        expected = "\n".join(f"{n:6d}\t{line[:-1]}" for n, line in enumerate(lines, start))
        assert render.numbered(lines, start) == expected
        if start + len(lines) <= render.MAX_PREFIXED_LINES:
            # a 1 MiB read's 16k lines: their prefixes are kept for the next read
            assert len(render._PREFIXES) > start + len(lines) - 1

    def test_long_lines_are_cut_with_their_length(self) -> None:
        text = render.numbered(["x" * 2500 + "\n"], 1)
        assert text.startswith("     1\t" + "x" * 2000 + "...")
        assert "2500 chars" in text
        assert "x" * 2001 not in text

    def test_line_of_exactly_the_limit_is_kept(self) -> None:
        assert render.cut_line("y" * 2000) == "y" * 2000

    def test_read_text_paging_hint(self) -> None:
        text = render.read_text("f", ["a\n", "b\n"], 3, 10, 5)
        assert text.endswith("[showing lines 3-4 of 10; continue with offset=5]")

    def test_read_text_empty_and_past_end(self) -> None:
        assert render.read_text("f", [], 1, 0, None) == "f is empty."
        assert "none at line 7" in render.read_text("f", [], 7, 3, None)


class TestReadHelpers:
    LINES = split_lines(b"1\n2\n3\n4\n5\n")

    def test_split_keeps_ends_and_only_splits_on_newline(self) -> None:
        assert split_lines(b"a\r\nb\x0bc\rd") == [b"a\r\n", b"b\x0bc\rd"]
        assert split_lines(b"") == []

    def test_page_from_start_with_limit(self) -> None:
        got, raw = page(self.LINES, 2, 2, 1000)
        assert (got.start, got.lines, raw, got.next_offset) == (2, 2, b"2\n3\n", 4)

    def test_page_tail(self) -> None:
        got, raw = page(self.LINES, -2, 2000, 1000)
        assert (got.start, got.lines, raw, got.next_offset) == (4, 2, b"4\n5\n", None)

    def test_page_tail_longer_than_file(self) -> None:
        assert page(self.LINES, -50, 2000, 1000)[0].start == 1

    def test_page_byte_budget_stops_at_whole_lines(self) -> None:
        got, raw = page(self.LINES, 1, 2000, 5, text=False)  # base64: raw bytes
        assert (got.lines, raw, got.next_offset) == (2, b"1\n2\n", 3)

    def test_page_budget_counts_json_escapes_and_numbering(self) -> None:
        # "1\n" is 3 bytes in JSON; numbered ("     1\t1\n") 10: two lines take
        # 6 of an 11-byte budget and 20 of the 22 their text may take; three, 30
        got, raw = page(self.LINES, 1, 2000, 11)
        assert (raw, got.next_offset, got.cut_from) == (b"1\n2\n", 3, None)
        controls, raw = page([b"\x01" * 10 + b"\n"], 1, 10, 13)  # \u0001 is six bytes
        assert (controls.lines, raw, controls.cut_from) == (1, b"\x01\x01", 11)

    def test_page_cuts_a_first_line_longer_than_the_budget(self) -> None:
        got, raw = page([b"abcdefgh\n", b"x\n"], 1, 10, 4)
        assert (got.lines, raw, got.next_offset) == (1, b"abcd", 2)

    def test_page_past_the_end(self) -> None:
        got, raw = page(self.LINES, 9, 10, 100)
        assert (got.lines, raw, got.next_offset) == (0, b"", None)

    @given(
        data=st.lists(st.sampled_from([b"a", b"\n", b"\x01", b"\xc3\xa9", b"\r", b'"']),
                      max_size=40).map(b"".join),
        limit=st.integers(1, 12), budget=st.integers(0, 60),
    )
    def test_whole_file_lines_agrees_with_page(self, data: bytes, limit: int, budget: int) -> None:
        """The whole-file shortcut counts lines without splitting: where it answers,
        page() returns the whole file with that count (where it does not, page() decides)."""
        total = whole_file_lines(data, {"offset": 1, "limit": limit}, budget)
        got, raw = page(split_lines(data), 1, limit, budget)
        if total is not None:
            assert (raw, got.next_offset, got.cut_from) == (data, None, None)
            assert total == got.lines == len(split_lines(data))
        elif len(data) < budget // 8 and len(split_lines(data)) <= limit:
            raise AssertionError("a small file within the limit is read whole without a split")

    @pytest.mark.parametrize(
        ("data", "media_type"),
        [
            (b"\x89PNG\r\n\x1a\n" + b"\0" * 8, "image/png"),
            (b"\xff\xd8\xff\xe0" + b"\0" * 8, "image/jpeg"),
            (b"GIF89a" + b"\0" * 8, "image/gif"),
            (b"RIFF\0\0\0\0WEBPVP8 ", "image/webp"),
            (b"BM" + b"\0" * 12 + (40).to_bytes(4, "little") + b"\0" * 8, "image/bmp"),
            (b"BMW drivers rarely signal\n" * 2, None),
            (b"RIFF\0\0\0\0WAVEfmt ", None),
        ],
    )
    def test_image_type_from_magic_bytes(self, data: bytes, media_type: str | None) -> None:
        assert image_type(data) == media_type

    def test_is_binary(self) -> None:
        assert is_binary(b"a\0b")
        assert is_binary(b"caf\xe9")  # latin-1: reading it as text would lose bytes
        assert not is_binary("café ☕".encode())


class TestEditHelpers:
    def test_apply_in_order(self) -> None:
        applied = apply("f", "a b c", [Edit("a", "x", False), Edit("x b", "y", False)])
        assert (applied.text, applied.replacements, applied.match) == ("y c", 2, "exact")

    def test_apply_tells_what_no_edit_touched(self) -> None:
        edits = [Edit("c", "C", True), Edit("e", "", False)]
        assert apply("f", "abcdcefg", edits) == Applied("abCdCfg", 3, "exact", (2, 2))

    def test_ambiguous_names_the_count(self) -> None:
        with pytest.raises(CorralError) as caught:
            apply("f", "a a a", [Edit("a", "b", False)])
        assert caught.value.code == "ambiguous_match"
        assert "3 times" in caught.value.message

    def test_replace_all_counts_every_occurrence(self) -> None:
        applied = apply("f", "a a a", [Edit("a", "b", True)])
        assert (applied.text, applied.replacements) == ("b b b", 3)

    def test_no_match_names_the_edit(self) -> None:
        with pytest.raises(CorralError) as caught:
            apply("f", "abc", [Edit("a", "x", False), Edit("zz", "y", False)])
        assert caught.value.code == "no_match"
        assert "edit 2 of 2" in caught.value.message

    def test_diff_marks_a_missing_final_newline(self) -> None:
        diff = unified_diff("f", "a\nb", "a\nc")
        assert diff.startswith("--- a/f\n+++ b/f\n")
        assert "-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n" in diff

    @pytest.mark.parametrize(("old", "new"), [("0500", "X"), ("0000 ", ""), ("\n0999 x", "")])
    def test_diff_of_the_changed_lines_only_equals_the_whole_file_diff(
        self, old: str, new: str
    ) -> None:
        before = "".join(f"{n:04d} x\n" for n in range(1000))
        applied = apply("f", before, [Edit(old, new, False)])
        after, unchanged = applied.text, applied.unchanged
        assert unchanged != (0, 0)
        diff = unified_diff("f", before, after, unchanged)
        assert diff == unified_diff("f", before, after)
        assert diff.count("\n") < 15  # one hunk: the changed line(s) and 3 of context


class TestListingHelpers:
    @given(
        names=st.lists(st.text(alphabet='ab"\\\u00e9\x01', min_size=1, max_size=6), max_size=12),
        limit=st.integers(1, 14), slack=st.integers(-40, 40),
    )
    def test_take_of_a_list_is_take_of_its_entries_one_by_one(
        self, names: list[str], limit: int, slack: int
    ) -> None:
        # a budget near what the names take, where an escape's bytes decide
        budget = ENTRY_OVERHEAD * len(names) + sum(map(len, names)) + slack
        entries = [Entry(name, "file", 1, 0.0) for name in names]
        assert take(entries, limit, budget) == take(iter(entries), limit, budget)

    @given(st.text(alphabet="./ab", max_size=12))
    def test_hidden_is_a_part_starting_with_a_dot(self, path: str) -> None:
        assert hidden(path) == any(part.startswith(".") for part in path.split("/"))



def test_a_call_s_context_shares_the_sandbox_s_parts_and_none_of_another_call_s_state() -> None:
    from dataclasses import fields

    from corral.config import Limits
    from corral.policy import Policy
    from corral.tools.base import Context

    per_call = {"approved", "grants", "within", "tool"}  # for_call's arguments
    fresh = {"grants_used", "touched", "needs_approval", "given", "wrote"}  # a call's own
    shared = {"roots", "limits", "policy", "supervised", "history", "keep", "seen"}
    # a field added to Context must be put in one of the three
    assert per_call | fresh | shared == {field.name for field in fields(Context)}
    base = Context(
        object(), Limits(), Policy.from_dict({}), approved=frozenset({"old"}),  # type: ignore[arg-type]
        grants=("g",), grants_used=["u"], touched=["t"], tool="old",  # type: ignore[arg-type, list-item]
        needs_approval=["n"], given={"a": "b"}, supervised=True,  # type: ignore[list-item]
        within={"/x": ["."]}, history=object(), keep=object(),  # type: ignore[arg-type]
        seen={"k": "v"}, wrote={"w": "v"},
    )
    arguments = {"approved": frozenset({"a"}), "grants": (), "within": {"/w": ["."]},
                 "tool": "read_file"}
    call, other = base.for_call(**arguments), base.for_call(**arguments)  # type: ignore[arg-type]
    for name in per_call:
        assert getattr(call, name) is arguments[name], name
    for name in shared:
        assert getattr(call, name) is getattr(base, name), name
    for name in fresh:
        value = getattr(call, name)
        assert value == type(value)(), name
        assert value is not getattr(other, name) and value is not getattr(base, name), name
