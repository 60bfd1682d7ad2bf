"""edit_file's tolerant matching and the bytes it keeps (line endings, BOMs,
UTF-16/32, fallback encodings), through Sandbox.call: real confined workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral import Sandbox
from corral.config import ConfigError
from corral.policy import Policy
from corral.tools.matching import LESSON_LINE_CHARS, MAX_WINDOWS
from tests.helpers.calls import err, ok
from tests.helpers.scripts_loader import load_script

drift_corpus = load_script("drift_corpus")


@pytest.fixture(scope="module")
def match_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("match")


@pytest.fixture(scope="module")
def cp1252_sb(match_ws: Path) -> Iterator[Sandbox]:
    with Sandbox(match_ws, policy=Policy(fallback_encodings=("cp1252",))) as sandbox:
        yield sandbox


def edit(cp1252_sb: Sandbox, match_ws: Path, name: str, data: bytes, old: str, new: str,
         **more: object) -> dict[str, object]:
    (match_ws / name).write_bytes(data)
    return ok(cp1252_sb, "edit_file", path=name, old_string=old, new_string=new, **more)["result"]


class TestLadder:
    def test_exact_is_reported(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        result = edit(cp1252_sb, match_ws, "a.py", b"x = 1\ny = 2\n", "y = 2", "y = 3")
        assert result["match"] == "exact"
        assert (match_ws / "a.py").read_bytes() == b"x = 1\ny = 3\n"

    def test_trailing_whitespace(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        result = edit(
            cp1252_sb,
            match_ws,
            "b.py",
            b"if a:  \n    go()\t\nend\n",
            "if a:\n    go()\n",
            "if b:\n    go()\n",
        )
        assert result["match"] == "whitespace"
        assert (match_ws / "b.py").read_bytes() == b"if b:\n    go()\nend\n"

    def test_line_endings_and_crlf_kept(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        result = edit(cp1252_sb, match_ws, "c.py", b"one\r\ntwo\r\nthree\r\n", "one\ntwo\n",
                      "one\n1.5\ntwo\n")
        assert result["match"] == "whitespace"
        assert (match_ws / "c.py").read_bytes() == b"one\r\n1.5\r\ntwo\r\nthree\r\n"

    def test_tabs_for_spaces_reindents_with_tabs(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        data = b"func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n"
        result = edit(cp1252_sb, match_ws, "d.go", data, "    if x {\n        return 1\n",
                      "    if x {\n        log()\n        return 2\n")
        assert result["match"] == "indentation"
        assert (match_ws / "d.go").read_bytes() == (
            b"func f() {\n\tif x {\n\t\tlog()\n\t\treturn 2\n\t}\n}\n")

    def test_wrong_indent_level_is_shifted_back(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        data = b"class A:\n    def f(self):\n        return 1\n"
        result = edit(cp1252_sb, match_ws, "e.py", data, "def f(self):\n    return 1\n",
                      "def f(self):\n    if self:\n        return 2\n    return 1\n")
        assert result["match"] == "indentation"
        assert (match_ws / "e.py").read_bytes() == (
            b"class A:\n    def f(self):\n        if self:\n            return 2\n"
            b"        return 1\n")

    def test_a_differently_nested_block_is_no_match(
        self, cp1252_sb: Sandbox, match_ws: Path
    ) -> None:
        # same lines, other structure: not one shift, so not the same block
        (match_ws / "f.py").write_bytes(b"if a:\n    b()\n")
        error = err(
            cp1252_sb, "edit_file", path="f.py", old_string="if a:\nb()\n", new_string="x\n"
        )
        assert error["code"] == "no_match"
        assert (match_ws / "f.py").read_bytes() == b"if a:\n    b()\n"

    def test_unicode_lookalikes(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        data = "msg = \u201chello\u201d  # it\u2019s a \u2013 b\n".encode()
        result = edit(cp1252_sb, match_ws, "g.py", data, "msg = \"hello\"  # it's a - b\n",
                      "msg = \"bye\"\n")
        assert result["match"] == "unicode"
        assert (match_ws / "g.py").read_bytes() == b'msg = "bye"\n'

    def test_several_edits_report_the_loosest(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        (match_ws / "h.py").write_bytes(b"a = 1\n    b = 2\n    c = 3\n")
        result = ok(cp1252_sb, "edit_file", path="h.py", edits=[
            {"old_string": "a = 1", "new_string": "a = 3"},
            {"old_string": "b = 2\nc = 3\n", "new_string": "b = 4\nc = 5\n"},
        ])["result"]
        assert result["match"] == "indentation"
        assert (match_ws / "h.py").read_bytes() == b"a = 3\n    b = 4\n    c = 5\n"

    def test_replace_all_at_a_tolerant_level(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        result = edit(
            cp1252_sb, match_ws, "i.py", b"x()  \ny\nx()\t\n", "x()\n", "z()\n", replace_all=True
        )
        assert (result["match"], result["replacements"]) == ("whitespace", 2)
        assert (match_ws / "i.py").read_bytes() == b"z()\ny\nz()\n"


class TestRefusals:
    def test_ambiguous_at_a_tolerant_level_is_never_guessed(
        self, cp1252_sb: Sandbox, match_ws: Path
    ) -> None:
        data = b"def a():\n    run()  \ndef b():\n        run()\t\n"
        (match_ws / "j.py").write_bytes(data)
        error = err(
            cp1252_sb, "edit_file", path="j.py", old_string="run()\n", new_string="stop()\n"
        )
        assert error["code"] == "ambiguous_match"
        assert "2 places" in error["message"] and "lines 2, 4" in error["message"]
        assert (match_ws / "j.py").read_bytes() == data

    def test_replace_all_has_a_bound_at_tolerant_levels(
        self, cp1252_sb: Sandbox, match_ws: Path
    ) -> None:
        data = b"x  \n" * (MAX_WINDOWS + 1)
        (match_ws / "j2.py").write_bytes(data)
        error = err(cp1252_sb, "edit_file", path="j2.py", old_string="x\n", new_string="y\n",
                    replace_all=True)
        assert error["code"] == "ambiguous_match"
        assert f"more than {MAX_WINDOWS} places" in error["message"]
        assert (match_ws / "j2.py").read_bytes() == data

    def test_match_exact_argument_turns_it_off(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        (match_ws / "k.py").write_bytes(b"a\r\nb\r\n")
        error = err(cp1252_sb, "edit_file", path="k.py", old_string="a\nb\n", new_string="c\n",
                    match="exact")
        assert error["code"] == "no_match"
        assert "at line 1 ignoring trailing whitespace" in error["message"]
        assert (match_ws / "k.py").read_bytes() == b"a\r\nb\r\n"

    def test_no_match_names_the_closest_region(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        body = "".join(f"line{n} = {n}\n" for n in range(1, 40))
        (match_ws / "l.py").write_text(body)
        error = err(cp1252_sb, "edit_file", path="l.py", old_string="line20 = 20\nline21 = 99\n"
                    "line22 = 22\n", new_string="x\n")
        assert error["code"] == "no_match"
        assert error["message"] == (
            "old_string was not found in l.py. The closest region is lines 20-22; line 21 "
            "differs: expected 'line21 = 99', found 'line21 = 21'.")

    def test_a_line_like_the_first_is_the_closest(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        (match_ws / "l2.py").write_text("import os\n\ndef compute_total(items):\n    return 0\n")
        error = err(cp1252_sb, "edit_file", path="l2.py", old_string="def compute_totals(item):\n",
                    new_string="x\n")
        assert error["message"] == (
            "old_string was not found in l2.py. The closest region is line 3; line 3 "
            "differs: expected 'def compute_totals(item):', found 'def compute_total(items):'.")

    def test_nothing_alike_names_no_region(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        (match_ws / "l3.py").write_text("import os\n")
        error = err(cp1252_sb, "edit_file", path="l3.py", old_string="zzzz qqqq\n", new_string="x")
        assert error["message"] == "old_string was not found in l3.py."

    def test_the_lesson_is_bounded(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        long = "x" * 100_000
        (match_ws / "m.py").write_text(f"a = 1\nb = '{long}'\n")
        error = err(cp1252_sb, "edit_file", path="m.py", old_string=f"a = 1\nb = '{long}y'\n",
                    new_string="z\n")
        assert error["code"] == "no_match"
        assert "line 2 differs" in error["message"]
        assert len(error["message"]) < 2 * LESSON_LINE_CHARS + 200


def test_workspace_config_may_turn_matching_off(tmp_path: Path) -> None:
    (tmp_path / "corral.toml").write_text('[edit]\nmatch = "exact"\n')
    (tmp_path / "a.py").write_bytes(b"x = 1  \n")
    with Sandbox(tmp_path) as sandbox:
        error = err(sandbox, "edit_file", path="a.py", old_string="x = 1\n", new_string="y\n")
        assert error["code"] == "no_match"
        result = ok(sandbox, "edit_file", path="a.py", old_string="x = 1  \n",
                    new_string="y\n")["result"]
        assert result["match"] == "exact"


def test_a_workspace_config_naming_an_unknown_encoding_is_refused(tmp_path: Path) -> None:
    # rot13 and base64 are codecs too, but not text encodings a file may be in
    (tmp_path / "corral.toml").write_text('[workspace]\nfallback_encodings = ["rot13"]\n')
    with pytest.raises(ConfigError, match="fallback_encodings"):
        Sandbox(tmp_path)


class TestBytesKept:
    def test_crlf_new_lines_in_an_exact_edit(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        edit(cp1252_sb, match_ws, "n.txt", b"a\r\nb\r\n", "b", "b\nc")
        assert (match_ws / "n.txt").read_bytes() == b"a\r\nb\r\nc\r\n"

    def test_utf8_bom_stays(self, cp1252_sb: Sandbox, match_ws: Path) -> None:
        edit(cp1252_sb, match_ws, "o.txt", b"\xef\xbb\xbfname = 1\n", "name = 1", "name = 2")
        assert (match_ws / "o.txt").read_bytes() == b"\xef\xbb\xbfname = 2\n"

    def test_utf8_bom_stays_when_line_one_matches_tolerantly(
        self, cp1252_sb: Sandbox, match_ws: Path
    ) -> None:
        edit(
            cp1252_sb,
            match_ws,
            "o2.txt",
            b"\xef\xbb\xbfa = 1  \nb = 2\n",
            "a = 1\nb = 2\n",
            "c = 3\n",
        )
        assert (match_ws / "o2.txt").read_bytes() == b"\xef\xbb\xbfc = 3\n"

    @pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
    def test_utf16_and_utf32_with_a_bom_are_text(
        self, cp1252_sb: Sandbox, match_ws: Path, encoding: str
    ) -> None:
        bom = "\ufeff".encode(encoding)
        (match_ws / "p.txt").write_bytes(bom + "caf\u00e9\r\n\u65e5\u672c\r\n".encode(encoding))
        read = ok(cp1252_sb, "read_file", path="p.txt")["result"]
        assert (read["encoding"], read["content"]) == (encoding, "caf\u00e9\r\n\u65e5\u672c\r\n")
        ok(
            cp1252_sb,
            "edit_file",
            path="p.txt",
            old_string="caf\u00e9\n",
            new_string="tea\n\u2615\n",
        )
        assert (
            match_ws / "p.txt"
        ).read_bytes() == bom + "tea\r\n\u2615\r\n\u65e5\u672c\r\n".encode(encoding)

    def test_fallback_encoding_reads_and_edits_in_it(
        self, cp1252_sb: Sandbox, match_ws: Path
    ) -> None:
        (match_ws / "q.txt").write_bytes(b"caf\xe9\nna\xefve\n")
        read = ok(cp1252_sb, "read_file", path="q.txt")["result"]
        assert (read["encoding"], read["content"], read["size"]) == (
            "cp1252", "caf\u00e9\nna\u00efve\n", 11)
        ok(cp1252_sb, "edit_file", path="q.txt", old_string="na\u00efve", new_string="\u20ac5")
        assert (match_ws / "q.txt").read_bytes() == b"caf\xe9\n\x805\n"

    def test_text_the_encoding_cannot_hold_writes_nothing(
        self, cp1252_sb: Sandbox, match_ws: Path
    ) -> None:
        (match_ws / "r.txt").write_bytes(b"caf\xe9\n")
        error = err(cp1252_sb, "edit_file", path="r.txt", old_string="caf\u00e9",
                    new_string="\u65e5\u672c")
        assert error["code"] == "invalid_arguments"
        assert "cp1252" in error["message"] and "new_string" in error["message"]
        assert (match_ws / "r.txt").read_bytes() == b"caf\xe9\n"

    def test_without_fallbacks_a_legacy_file_is_binary(self, tmp_path: Path) -> None:
        (tmp_path / "s.txt").write_bytes(b"caf\xe9\n")
        with Sandbox(tmp_path) as sandbox:
            assert err(sandbox, "read_file", path="s.txt")["code"] == "binary_file"
            assert err(sandbox, "edit_file", path="s.txt", old_string="caf",
                       new_string="x")["code"] == "binary_file"


ENCODINGS = {  # how a file's text becomes its bytes: (bom, codec)
    "utf-8": (b"", "utf-8"), "utf-8-bom": (b"\xef\xbb\xbf", "utf-8"),
    "utf-16-le": (b"\xff\xfe", "utf-16-le"), "cp1252": (b"", "cp1252"),
}
WORDS = st.sampled_from(["x", "run()", "a = 1", "'q'", "\u2019s", "caf\u00e9", "\u2013", "if b:"])
LINES = st.lists(st.tuples(st.sampled_from(["", "    ", "\t", "        "]),
                           st.lists(WORDS, min_size=0, max_size=3).map(" ".join),
                           st.sampled_from(["", " ", "\t"])).map("".join),
                 min_size=1, max_size=12)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=LINES, crlf=st.booleans(), encoding=st.sampled_from(sorted(ENCODINGS)),
       data=st.data())
def test_bytes_outside_the_edited_region_are_unchanged(
    cp1252_sb: Sandbox,
    match_ws: Path,
    lines: list[str],
    crlf: bool,
    encoding: str,
    data: st.DataObject,
) -> None:
    """Any file, any edit of a run of its lines (copied exactly or with drift): the
    file either keeps every byte, or keeps every byte before the run's first line
    and after its last. Each line carries its number, so the run is the only place
    old_string can match."""
    lines = [_numbered(line, number) for number, line in enumerate(lines)]
    ending = "\r\n" if crlf else "\n"
    start = data.draw(st.integers(0, len(lines) - 1))
    end = data.draw(st.integers(start + 1, len(lines)))
    drift = data.draw(st.sampled_from(["none", "strip", "lf", "indent", "quotes"]))
    region = lines[start:end]
    old = {"none": ending.join(region), "strip": "\n".join(line.strip() for line in region),
           "lf": "\n".join(region), "indent": "\n".join("  " + line for line in region),
           "quotes": "\n".join(line.replace("\u2019", "'").replace("\u2013", "-")
                               for line in region)}[drift]
    new = data.draw(st.lists(WORDS, max_size=4).map("\n".join))
    bom, codec = ENCODINGS[encoding]
    head = bom + (ending.join(lines[:start]) + (ending if start else "")).encode(codec)
    tail = ((ending if end < len(lines) else "") + ending.join(lines[end:])).encode(codec)
    original = head + ending.join(region).encode(codec) + tail
    (match_ws / "prop.txt").write_bytes(original)
    answer = cp1252_sb.call("edit_file", {"path": "prop.txt", "old_string": old, "new_string": new})
    written = (match_ws / "prop.txt").read_bytes()
    if not answer["ok"]:
        assert answer["error"]["code"] in ("no_match", "invalid_arguments"), answer
        assert written == original
    else:
        assert written.startswith(head) and written.endswith(tail), (original, written)


def _numbered(line: str, number: int) -> str:
    """The line with a mark no other line has, after its indentation."""
    body = line.lstrip(" \t")
    return f"{line[: len(line) - len(body)]}L{number:02d}| {body}"


def test_drift_corpus_short() -> None:
    """A short run of scripts/drift_corpus.py: no drifted edit applies wrongly."""
    cases = drift_corpus.corpus(240, seed=7)
    outcomes = [drift_corpus.outcome(case) for case in cases]
    assert "WRONG" not in outcomes
    drifted = [o for c, o in zip(cases, outcomes, strict=True) if c.intended is not None]
    assert drifted.count("applied") >= 0.95 * len(drifted)
    assert drift_corpus.through_sandbox(cases[:16])["WRONG"] == 0
