"""The Codex patch format: parse_patch (strict, every refusal naming its patch
line) and apply_hunks (hunks found in order on matching's ladder, the file's
own bytes kept). Pure: no sandbox."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.errors import CorralError
from corral.tools.edit import apply as edit_apply
from corral.tools.patch_format import (
    MAX_PATCH_FILES,
    FilePatch,
    Hunk,
    apply_hunks,
    files_of,
    parse_patch,
)
from tests.helpers.scripts_loader import load_script

drift_corpus = load_script("drift_corpus")
bench_patch_match = load_script("bench_patch_match")
fuzz_patch = load_script("fuzz_patch")


def wrap(body: str) -> str:
    return f"*** Begin Patch\n{body}\n*** End Patch"


def one(body: str) -> FilePatch:
    (patch,) = parse_patch(wrap(body))
    return patch


def patched(original: str, body: str, **options: bool) -> tuple[str, str]:
    return apply_hunks(original, one(body), **options)


def refused(text: str) -> str:
    with pytest.raises(CorralError) as caught:
        parse_patch(text)
    assert caught.value.code == "invalid_arguments"
    return caught.value.message


def missed(original: str, body: str, code: str = "no_match", **options: bool) -> str:
    with pytest.raises(CorralError) as caught:
        patched(original, body, **options)
    assert caught.value.code == code, caught.value.message
    return caught.value.message


class TestCodexParser:
    """Ported from openai/codex codex-rs/apply-patch/src/parser.rs (test_parse_patch,
    test_parse_patch_lenient, test_parse_one_hunk, test_update_file_chunk) and its
    tests/fixtures/scenarios (005, 008, 013, 017, 018, 020). Where Codex parses
    and then fails to apply (an empty patch), this parser refuses."""

    def test_first_and_last_line(self) -> None:
        assert "patch line 1: expected '*** Begin Patch', found 'bad'" in refused("bad")
        assert "patch line 2: expected '*** End Patch' as the last line, found 'bad'" in (
            refused("*** Begin Patch\nbad"))

    def test_markers_padded_with_spaces(self) -> None:
        assert parse_patch("*** Begin Patch \n*** Add File: foo\n+hi\n *** End Patch") == (
            FilePatch("add", "foo", None, (), "hi\n", 2),)
        assert one("  *** Update File: foo.txt\n@@\n-old\n+new").path == "foo.txt"

    def test_update_without_hunks(self) -> None:
        message = refused(wrap("*** Update File: test.py"))
        assert message.startswith("patch line 2: '*** Update File: test.py' has no hunk")

    def test_empty_patch(self) -> None:
        assert refused("*** Begin Patch\n*** End Patch").startswith(
            "patch line 2: the patch changes no file")
        assert refused(wrap("")).startswith("patch line 2: expected '*** Add File: <path>'")

    def test_add_delete_update_move(self) -> None:
        files = parse_patch(wrap(
            "*** Add File: path/add.py\n+abc\n+def\n*** Delete File: path/delete.py\n"
            "*** Update File: path/update.py\n*** Move to: path/update2.py\n"
            "@@ def f():\n-    pass\n+    return 123"))
        assert files == (
            FilePatch("add", "path/add.py", None, (), "abc\ndef\n", 2),
            FilePatch("delete", "path/delete.py", None, (), None, 5),
            FilePatch("update", "path/update.py", "path/update2.py", (
                Hunk(("def f():",), (("-", "    pass"), ("+", "    return 123")), False, 8),
            ), None, 6),
        )

    def test_update_followed_by_add(self) -> None:
        files = parse_patch(wrap(
            "*** Update File: file.py\n@@\n+line\n*** Add File: other.py\n+content"))
        assert files[0].hunks == (Hunk((), (("+", "line"),), False, 3),)
        assert files[1] == FilePatch("add", "other.py", None, (), "content\n", 5)

    def test_first_hunk_without_at_at(self) -> None:
        assert one("*** Update File: file2.py\n import foo\n+bar").hunks == (
            Hunk((), ((" ", "import foo"), ("+", "bar")), False, 3),)

    @pytest.mark.parametrize("opener", ["<<EOF", "<<'EOF'", '<<"EOF"'])
    def test_heredoc_wrapper(self, opener: str) -> None:
        text = f"{opener}\n*** Begin Patch\n*** Update File: file2.py\n import foo\n+bar\n" \
               "*** End Patch\nEOF\n"
        (patch,) = parse_patch(text)
        assert patch.hunks[0].line == 4  # lines count in the text as sent

    def test_heredoc_wrapper_refused_when_malformed(self) -> None:
        body = "*** Begin Patch\n*** Update File: file2.py\n import foo\n+bar\n*** End Patch"
        assert "patch line 1: expected '*** Begin Patch'" in refused(f"<<\"EOF'\n{body}\nEOF\n")
        message = refused("<<EOF\n*** Begin Patch\n*** Update File: file2.py\nEOF\n")
        assert "patch line 3: expected '*** End Patch' as the last line" in message

    def test_bad_file_header(self) -> None:
        message = refused(wrap("bad"))
        assert message.startswith("patch line 2: expected '*** Add File: <path>', "
                                  "'*** Update File: <path>', '*** Delete File: <path>'")
        assert "patch line 2:" in refused(wrap("*** Frobnicate File: foo"))

    def test_hunk_lines(self) -> None:
        (patch,) = parse_patch(wrap(
            "*** Update File: f\n@@ change_context\n\n context\n-remove\n+add\n context2"))
        assert patch.hunks == (Hunk(("change_context",), (
            (" ", ""), (" ", "context"), ("-", "remove"), ("+", "add"), (" ", "context2")),
            False, 3),)

    def test_hunk_refusals(self) -> None:
        assert refused(wrap("*** Update File: f\n@@")).startswith(
            "patch line 3: the hunk has no lines")
        assert refused(wrap("*** Update File: f\n@@\nbad")).startswith(
            "patch line 4: expected a hunk line starting with ' ', '-' or '+', found 'bad'")
        assert refused(wrap("*** Update File: f\n@@\n*** End of File")).startswith(
            "patch line 4: '*** End of File' must follow the lines of a hunk")

    def test_end_of_file(self) -> None:
        assert one("*** Update File: f\n@@\n+line\n*** End of File").hunks == (
            Hunk((), (("+", "line"),), True, 3),)


class TestParser:
    def test_several_at_at_lines_narrow_in_turn(self) -> None:
        hunk = one("*** Update File: f\n@@ class A\n@@\n@@     def run(self):\n-x\n+y").hunks[0]
        assert hunk.anchors == ("class A", "    def run(self):")
        assert hunk.line == 3

    def test_a_move_alone_renames(self) -> None:
        # Codex refuses an Update File without hunks even with a Move to
        files = parse_patch(wrap("*** Update File: a\n*** Move to: b\n*** Delete File: c"))
        assert files[0] == FilePatch("update", "a", "b", (), None, 2)
        assert apply_hunks("x\r\n", files[0]) == ("x\r\n", "exact")

    def test_crlf_patch_reads_as_lf(self) -> None:
        text = wrap("*** Update File: f\n@@\n-a\n+b").replace("\n", "\r\n")
        assert parse_patch(text)[0].hunks[0].lines == (("-", "a"), ("+", "b"))

    def test_blank_lines_around_the_patch_and_before_hunks(self) -> None:
        (patch,) = parse_patch("\n\n*** Begin Patch\n*** Update File: f\n\n@@\n-a\n+b\n"
                               "*** End Patch\n\n")
        assert patch.line == 4 and patch.hunks[0].line == 6

    def test_hunks_after_the_first(self) -> None:
        patch = one("*** Update File: f\n@@ a\n-1\n+2\n@@ b\n-3\n+4\n*** End of File")
        assert [(h.anchors, h.line, h.end_of_file) for h in patch.hunks] == [
            (("a",), 3, False), (("b",), 6, True)]

    def test_add_file_content(self) -> None:
        assert one("*** Add File: a.txt\n+\n+x\n+  y ").content == "\nx\n  y \n"


MALFORMED = [  # (patch, the line named, what the message says)
    ("", 1, "the patch is empty"),
    ("\n  \n", 1, "the patch is empty"),
    ("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b", 1, "not a unified diff"),
    ("```\n*** Begin Patch\n*** Delete File: a\n*** End Patch\n```", 1, "without a Markdown "
     "code fence"),
    ("*** Begin Patch\n*** Delete File: a\n*** End Patch\n```", 4, "without a Markdown code "
     "fence"),
    ("*** Begin Patch", 1, "expected '*** End Patch' as the last line"),
    ("*** Begin Patch\n*** Add File: a\n+x", 3, "expected '*** End Patch' as the last line"),
    ("*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\ntrailing", 5,
     "expected '*** End Patch' as the last line"),
    (wrap("*** Add File: "), 2, "expected '*** Add File: <path>'"),
    (wrap("*** Add File:a\n+x"), 2, "expected '*** Add File: <path>'"),
    (wrap("*** Add File: a\n+x\ny"), 4, "expected a line of the new file a starting with '+'"),
    (wrap("*** Add File: a\n+x\n\n*** Delete File: b"), 4, "starting with '+'"),
    (wrap("*** Delete File: a\n-x"), 3, "expected '*** Add File: <path>'"),
    (wrap("*** Delete File:"), 2, "expected '*** Delete File: <path>'"),
    (wrap("*** Update File: a"), 2, "has no hunk"),
    (wrap("*** Update File: a\n*** Move to:\n@@\n-x"), 3, "expected '*** Move to: <path>'"),
    (wrap("*** Move to: b\n*** Update File: a\n@@\n-x"), 2,
     "'*** Move to: <path>' must directly follow"),
    (wrap("*** Update File: a\nx = 1"), 3, "expected a hunk line starting with ' ', '-' or '+'"),
    (wrap("*** Update File: a\n@@\n-x\n+y\nz = 1"), 6, "an '@@' line or a '*** ' line, found"),
    (wrap("*** Update File: a\n@@\n-x\n\tz"), 5, "found '\\tz'"),
    (wrap("*** Update File: a\n@@ -1,3 +1,4 @@\n-x"), 3, "this format has no line numbers"),
    (wrap("*** Update File: a\n@@@ x\n-x"), 3, "expected '@@' or '@@ <a line of the file>'"),
    (wrap("*** Update File: a\n@@ x"), 3, "the hunk has no lines"),
    (wrap("*** Update File: a\n@@\n*** Add File: b\n+x"), 4, "expected a hunk line"),
    (wrap("*** Update File: a\n@@\n-x\n*** End of File\n*** End of File"), 6,
     "'*** End of File' must follow the lines of a hunk"),
    (wrap("*** Delete File: a\n*** End Patch\n*** Delete File: b"), 3,
     "'*** End Patch' comes before the end of the patch"),
    (wrap("*** Update File: a\n@@\n-x\n*** Delete File: a"), 5, "a is named twice (also at "
     "patch line 2)"),
    (wrap("*** Add File: b\n+x\n*** Update File: a\n*** Move to: ./b\n@@\n-x"), 4,
     "./b is named twice (also at patch line 2)"),
    (wrap("*** Update File: a\n*** Move to: a\n@@\n-x"), 2, "named twice (as the file it moves)"),
]


@pytest.mark.parametrize(("text", "line", "says"), MALFORMED)
def test_malformed_patch_names_its_line(text: str, line: int, says: str) -> None:
    message = refused(text)
    assert message.startswith(f"patch line {line}: "), message
    assert says in message, message


class TestCodexApply:
    """Ported from openai/codex codex-rs/apply-patch/src/lib.rs tests and
    tests/fixtures/scenarios (003, 014, 016, 019, 021, 022): the same file, the
    same result, except that a file without a final newline keeps none."""

    def test_update_modifies_content(self) -> None:
        assert patched("foo\nbar\n", "*** Update File: f\n@@\n foo\n-bar\n+baz") == (
            "foo\nbaz\n", "exact")

    def test_multiple_chunks(self) -> None:
        body = "*** Update File: f\n@@\n foo\n-bar\n+BAR\n@@\n baz\n-qux\n+QUX"
        assert patched("foo\nbar\nbaz\nqux\n", body)[0] == "foo\nBAR\nbaz\nQUX\n"

    def test_interleaved_changes_and_end_of_file(self) -> None:
        body = ("*** Update File: f\n@@\n a\n-b\n+B\n@@\n c\n d\n-e\n+E\n@@\n f\n+g\n"
                "*** End of File")
        assert patched("a\nb\nc\nd\ne\nf\n", body)[0] == "a\nB\nc\nd\nE\nf\ng\n"

    def test_pure_addition_then_removal(self) -> None:
        body = ("*** Update File: f\n@@\n+after-context\n+second-line\n@@\n line1\n-line2\n"
                "-line3\n+line2-replacement")
        assert patched("line1\nline2\nline3\n", body)[0] == (
            "line1\nline2-replacement\nafter-context\nsecond-line\n")

    def test_pure_addition_appends(self) -> None:
        body = "*** Update File: f\n@@\n+added line 1\n+added line 2"
        assert patched("line1\nline2\n", body)[0] == "line1\nline2\nadded line 1\nadded line 2\n"

    def test_unicode_dash(self) -> None:
        original = "import asyncio  # local import \u2013 avoids top\u2011level dep\n"
        body = ("*** Update File: f\n@@\n-import asyncio  # local import - avoids top-level dep\n"
                "+import asyncio  # HELLO")
        assert patched(original, body) == ("import asyncio  # HELLO\n", "unicode")

    def test_non_ascii_exact(self) -> None:
        body = "*** Update File: f\n@@\n line1\n-naïve café\n+naïve café ✅"
        assert patched("line1\nnaïve café\nline3\n", body) == (
            "line1\nnaïve café ✅\nline3\n", "exact")

    def test_deletion_only(self) -> None:
        body = "*** Update File: f\n@@\n line1\n-line2\n line3"
        assert patched("line1\nline2\nline3\n", body)[0] == "line1\nline3\n"

    def test_end_of_file_marker(self) -> None:
        body = "*** Update File: f\n@@\n first\n-second\n+second updated\n*** End of File"
        assert patched("first\nsecond\n", body)[0] == "first\nsecond updated\n"

    def test_no_final_newline_is_kept(self) -> None:
        # Codex adds one (scenario 014); here the bytes the hunk does not touch stay
        assert patched("no newline at end", "*** Update File: f\n@@\n-no newline at end\n"
                       "+first line\n+second line")[0] == "first line\nsecond line"


class TestLocating:
    TWO = "def first():\n    x = 1\n    return x\n\ndef second():\n    x = 1\n    return x\n"

    def test_at_at_picks_the_block_after_it(self) -> None:
        body = "*** Update File: f\n@@ def second():\n     x = 1\n-    return x\n+    return 2"
        assert patched(self.TWO, body)[0] == self.TWO[:-13] + "    return 2\n"

    def test_without_at_at_a_repeated_block_is_ambiguous(self) -> None:
        message = missed(self.TWO, "*** Update File: f.py\n     x = 1\n-    return x\n+    y",
                         "ambiguous_match")
        assert message.startswith("f.py: patch line 3: the hunk's ' ' and '-' lines match 2 "
                                  "places (from lines 2, 6)")
        assert "@@" in message

    def test_several_at_at_lines(self) -> None:
        original = ("class A:\n    def run(self):\n        go()\n\nclass B:\n    def run(self):\n"
                    "        go()\n\n    def stop(self):\n        go()\n")
        body = ("*** Update File: f\n@@ class B:\n@@ def run(self):\n-        go()\n"
                "+        went()")
        new, level = patched(original, body)
        assert new == original.replace("go()\n\n    def stop", "went()\n\n    def stop")
        assert level == "exact"  # an @@ line found ignoring its indentation does not count

    def test_at_at_line_copied_as_the_first_context_line(self) -> None:
        body = "*** Update File: f\n@@ def second():\n def second():\n-    x = 1\n+    x = 2"
        assert patched(self.TWO, body)[0] == self.TWO[::-1].replace(
            "1 = x", "2 = x", 1)[::-1]

    def test_a_drifted_hunk_counts_only_places_after_the_previous(self) -> None:
        original = "a()  \nb()\na()  \nc()\n"
        body = "*** Update File: f\n@@\n-b()\n+B()\n@@\n-a()\n+A()"
        assert patched(original, body) == ("a()  \nB()\nA()\nc()\n", "whitespace")

    def test_at_at_line_missing(self) -> None:
        message = missed(self.TWO, "*** Update File: f.py\n@@ def third():\n-    return x\n+y")
        assert message.startswith("f.py: patch line 3: the @@ line 'def third():' is not in "
                                  "the file.")
        assert "closest region is line 1" in message

    def test_hunks_in_order(self) -> None:
        # the second hunk's lines lie before the first's: not found after it
        body = ("*** Update File: f.py\n@@\n-def second():\n+def two():\n@@\n-def first():\n"
                "+def one():")
        message = missed(self.TWO, body)
        assert message.startswith("f.py: patch line 6: the hunk's ' ' and '-' lines were not "
                                  "found after line 5.")

    def test_miss_names_the_closest_region(self) -> None:
        body = "*** Update File: src/f.py\n@@\n def first():\n-    x = 2\n+    x = 3"
        message = missed(self.TWO, body)
        assert message.startswith("src/f.py: patch line 3: the hunk's ' ' and '-' lines were "
                                  "not found.")
        assert "The closest region is lines 1-2; line 2 differs: expected '    x = 2', found " \
               "'    x = 1'." in message

    def test_end_of_file_anchors_at_the_end(self) -> None:
        original = "x\ny\nx\n"
        assert patched(original, "*** Update File: f\n@@\n-x\n+z\n*** End of File")[0] == (
            "x\ny\nz\n")
        assert "at the end of the file" in missed(
            original, "*** Update File: f\n@@\n-y\n+z\n*** End of File")

    def test_insertion_after_at_at_line(self) -> None:
        body = "*** Update File: f\n@@ def second():\n+    '''Doc.'''"
        assert patched(self.TWO, body)[0] == self.TWO.replace(
            "def second():\n", "def second():\n    '''Doc.'''\n")

    def test_trailing_blank_context_lines_are_let_go(self) -> None:
        body = "*** Update File: f\n@@\n a\n-b\n+B\n \n"
        assert patched("a\nb", body)[0] == "a\nB"

    def test_empty_file(self) -> None:
        assert patched("", "*** Update File: f\n@@\n+first")[0] == "first\n"
        assert "it is empty" in missed("", "*** Update File: f\n@@\n-x\n+y")

    def test_a_blank_line_is_not_found_past_the_last_line(self) -> None:
        assert "not found" in missed("a\n", "*** Update File: f\n@@\n \n+x")
        assert patched("a\n\nb\n", "*** Update File: f\n@@\n \n+x")[0] == "a\n\nx\nb\n"

    def test_bom_stays(self) -> None:
        assert patched("\ufeffa\nb\n", "*** Update File: f\n@@\n-a\n+A")[0] == "\ufeffA\nb\n"

    def test_exact_turns_the_ladder_off(self) -> None:
        message = missed("if a:  \n    go()\n", "*** Update File: f\n@@\n-if a:\n+if b:",
                         exact=True)
        assert "They match at line 1 ignoring trailing whitespace and line endings, which " \
               "match='exact' does not allow." in message


class TestBytesKept:
    def test_crlf_file_stays_crlf(self) -> None:
        original = "one\r\ntwo\r\nthree\r\n"
        assert patched(original, "*** Update File: f\n@@\n one\n-two\n+2\n+2.5") == (
            "one\r\n2\r\n2.5\r\nthree\r\n", "exact")

    def test_crlf_end_of_file_and_no_final_newline(self) -> None:
        original = "x\r\ny\r\nx"
        assert patched(original, "*** Update File: f\n@@\n-x\n+z\n*** End of File")[0] == (
            "x\r\ny\r\nz")
        assert patched(original, "*** Update File: f\n@@\n+w\n*** End of File")[0] == (
            "x\r\ny\r\nx\r\nw")

    def test_mixed_endings_keep_their_own(self) -> None:
        original = "a\r\nb\nc\r\n"
        assert patched(original, "*** Update File: f\n@@\n a\n b\n-c\n+C")[0] == "a\r\nb\nC\r\n"

    def test_trailing_whitespace_of_context_lines_is_kept(self) -> None:
        original = "if a:  \n    go()\t\nend\n"
        assert patched(original, "*** Update File: f\n@@\n if a:\n-    go()\n+    stop()") == (
            "if a:  \n    stop()\nend\n", "whitespace")

    def test_tabs_for_spaces(self) -> None:
        original = "func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n"
        body = "*** Update File: f.go\n@@\n     if x {\n-        return 1\n+        log()\n" \
               "+        return 2"
        assert patched(original, body) == (
            "func f() {\n\tif x {\n\t\tlog()\n\t\treturn 2\n\t}\n}\n", "indentation")

    def test_wrong_indent_level_is_shifted_back(self) -> None:
        original = "class A:\n    def f(self):\n        return 1\n"
        body = "*** Update File: f\n@@\n def f(self):\n-    return 1\n+    return 2"
        assert patched(original, body) == (
            "class A:\n    def f(self):\n        return 2\n", "indentation")

    def test_smart_quotes_in_context_lines_stay(self) -> None:
        original = "say(\u201chi\u201d)  # it\u2019s\nx = 1\n"
        body = "*** Update File: f\n@@\n say(\"hi\")  # it's\n-x = 1\n+x = 2"
        assert patched(original, body) == ("say(\u201chi\u201d)  # it\u2019s\nx = 2\n", "unicode")

    def test_the_loosest_level_is_reported(self) -> None:
        original = "a = 1\n    b = 2\n"
        body = "*** Update File: f\n@@\n-a = 1\n+a = 3\n@@\n-b = 2\n+b = 4"
        assert patched(original, body) == ("a = 3\n    b = 4\n", "indentation")


class TestModelPatches:
    """Patches shaped as models write them, against the files they were meant for."""

    SOURCE = (
        "import os\n"
        "\n"
        "\n"
        "class Store:\n"
        "    def __init__(self, root):\n"
        "        self.root = root\n"
        "\n"
        "    def get(self, key):\n"
        "        path = os.path.join(self.root, key)\n"
        "        with open(path) as handle:\n"
        "            return handle.read()\n"
        "\n"
        "    def put(self, key, value):\n"
        "        path = os.path.join(self.root, key)\n"
        "        with open(path, \"w\") as handle:\n"
        "            handle.write(value)\n"
    )

    def test_multi_file_patch(self) -> None:
        files = parse_patch(
            "*** Begin Patch\n"
            "*** Add File: docs/store.md\n"
            "+# Store\n"
            "+\n"
            "+Keys are file names.\n"
            "*** Update File: store.py\n"
            "*** Move to: storage/store.py\n"
            "@@ class Store:\n"
            "     def get(self, key):\n"
            "-        path = os.path.join(self.root, key)\n"
            "+        path = self._path(key)\n"
            "         with open(path) as handle:\n"
            "@@     def put(self, key, value):\n"
            "-        path = os.path.join(self.root, key)\n"
            "+        path = self._path(key)\n"
            "         with open(path, \"w\") as handle:\n"
            "             handle.write(value)\n"
            "+\n"
            "+    def _path(self, key):\n"
            "+        return os.path.join(self.root, key)\n"
            "*** End of File\n"
            "*** Delete File: old_store.py\n"
            "*** End Patch\n")
        assert [(f.action, f.path, f.move_to) for f in files] == [
            ("add", "docs/store.md", None), ("update", "store.py", "storage/store.py"),
            ("delete", "old_store.py", None)]
        new, level = apply_hunks(self.SOURCE, files[1])
        assert level == "exact"
        assert new == self.SOURCE.replace(
            "os.path.join(self.root, key)\n        with", "self._path(key)\n        with"
        ) + "\n    def _path(self, key):\n        return os.path.join(self.root, key)\n"

    def test_unindented_copy_with_curly_quotes_in_the_file(self) -> None:
        source = self.SOURCE.replace('"w"', "\u201cw\u201d")
        body = ("*** Update File: store.py\n@@ def put(self, key, value):\n"
                " path = os.path.join(self.root, key)\n"
                '-with open(path, "w") as handle:\n'
                '+with open(path, "a") as handle:\n')
        new, level = patched(source, body)
        assert level == "unicode"
        assert new == source.replace('        with open(path, \u201cw\u201d)',
                                     '        with open(path, "a")')


def test_large_file_exact_hunk_keeps_the_rest() -> None:
    lines = [f"line {index}" for index in range(20_000)]
    original = "\n".join(lines) + "\n"
    new, level = patched(original, "*** Update File: f\n@@\n line 9999\n-line 10000\n+changed")
    assert level == "exact"
    assert new == original.replace("line 10000\n", "changed\n")


_LINE = st.text(alphabet="ab \t'\u2019-", max_size=6)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    contents=st.lists(_LINE, min_size=1, max_size=12),
    endings=st.lists(st.sampled_from(["\n", "\r\n"]), min_size=12, max_size=12),
    final=st.booleans(),
    data=st.data(),
)
def test_bytes_outside_the_hunk_are_unchanged(
    contents: list[str], endings: list[str], final: bool, data: st.DataObject,
) -> None:
    """For any file and a one-hunk patch of lines copied from it (the model's copy
    stripped of trailing spaces, maybe), what lies outside the window the hunk
    matched is the file's own bytes."""
    lines = [f"{index}:{text}" for index, text in enumerate(contents)]  # each line unique
    original = "".join(line + ending for line, ending in zip(lines, endings, strict=False))
    if not final:
        original = original[: -len(endings[len(lines) - 1])]
    first = data.draw(st.integers(0, len(lines) - 1))
    last = data.draw(st.integers(first, len(lines) - 1))
    drift = data.draw(st.booleans())
    hunk: list[tuple[str, str]] = []
    for line in lines[first : last + 1]:
        kind = data.draw(st.sampled_from(" -"))
        hunk.append((kind, line.rstrip() if drift else line))
        if data.draw(st.booleans()):
            hunk.append(("+", data.draw(st.text(alphabet="xyz ", max_size=4))))
    patch = FilePatch("update", "f", None, (Hunk((), tuple(hunk), False, 3),), None, 2)
    new, _ = apply_hunks(original, patch)
    starts = [sum(len(a) + len(b) for a, b in zip(lines[:i], endings, strict=False))
              for i in range(len(lines) + 1)]
    before, after = original[: starts[first]], original[min(starts[last + 1], len(original)):]
    assert new.startswith(before)
    assert new.endswith(after)
    middle = new[len(before) : len(new) - len(after)]
    kept = [text for kind, text in hunk if kind != "-"]
    assert middle.replace("\r\n", "\n").split("\n")[: len(kept)] == [
        line if kind == "+" else lines[first + index]
        for index, (kind, line) in _positions(hunk) if kind != "-"]


def _positions(hunk: list[tuple[str, str]]) -> list[tuple[int, tuple[str, str]]]:
    """Each hunk line with the index of the file line it stands for in the window."""
    out, at = [], 0
    for kind, text in hunk:
        out.append((at, (kind, text)))
        if kind != "+":
            at += 1
    return out


def test_bench_cases_agree_with_edit_file() -> None:
    """scripts/bench_patch_match.py compares like with like: each of its cases
    gives the text edit_file gives for the same old and new text."""
    for name, (text, old) in bench_patch_match.cases().items():
        patch, edits = bench_patch_match.both(text, old)
        assert apply_hunks(text, patch)[0] == edit_apply("big.py", text, edits).text, name


def test_drift_corpus_through_patches() -> None:
    """A short run of scripts/drift_corpus.py's patch half: none applies wrongly."""
    cases = drift_corpus.corpus(240, seed=11)
    outcomes = [drift_corpus.patch_outcome(case) for case in cases]
    assert outcomes.count("WRONG") == 0
    assert outcomes.count("applied") >= 120


_PIECES = st.sampled_from([
    "*** Begin Patch", "*** End Patch", "*** Add File: a", "*** Add File: ", "*** Update File: a",
    "*** Update File: b", "*** Delete File: c", "*** Move to: d", "*** End of File", "@@",
    "@@ x", "@@ -1 +1 @@", "@@@", "+x", "-x", " x", "", "  ", "x", "\t+x", "<<'EOF'", "EOF", "*",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12), st.sampled_from(["\n", "\r\n"]))
def test_any_text_parses_or_is_refused_by_line(pieces: list[str], ending: str) -> None:
    """Whatever is sent, parse_patch returns files or refuses with a line number
    inside the text: never another exception."""
    text = ending.join(pieces)
    try:
        files = parse_patch(text)
    except CorralError as error:
        assert error.code == "invalid_arguments"
        line = int(error.message.split(":")[0].removeprefix("patch line "))
        assert 1 <= line <= max(1, text.count("\n") + 1)
        return
    assert files and all(f.line >= 2 for f in files)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a", " a", "b", "\tb", "", "c\u2019", "c'"]), max_size=8),
    st.lists(st.lists(st.tuples(st.sampled_from(" -+"), st.sampled_from(["a", "b", "", "c'"])),
                      min_size=1, max_size=4), min_size=1, max_size=3),
    st.lists(st.sampled_from(["a", "b", "x"]), max_size=1),
    st.sampled_from(["\n", "\r\n"]), st.booleans(),
)
def test_any_hunks_apply_or_miss_cleanly(
    lines: list[str], hunks: list[list[tuple[str, str]]], anchors: list[str], ending: str,
    eof: bool,
) -> None:
    """Random hunks against a random file: a new text, or no_match /
    ambiguous_match; never another exception."""
    patch = FilePatch("update", "f", None, tuple(
        Hunk(tuple(anchors), tuple(hunk), eof, 3) for hunk in hunks), None, 2)
    try:
        new, level = apply_hunks(ending.join(lines), patch)
    except CorralError as error:
        assert error.code in ("no_match", "ambiguous_match"), error.message
        return
    assert level in ("exact", "whitespace", "indentation", "unicode")
    assert isinstance(new, str)


def test_fuzz_against_the_reference_short() -> None:
    """A short run of scripts/fuzz_patch.py: apply_hunks and the plain reference
    agree on every random file and hunks found exactly."""
    tally, different = fuzz_patch.run(1500, seed=5)
    assert not different, different
    assert tally["same: applied"] > 500


# files_of: the host's reading of a patch's headers (quotas, grants) --------------

_HUNK_LINES = st.sampled_from([
    " x", "-x", "+x", "", "  ", "@@", "@@ x", "  *** Add File: p", " *** Delete File: q",
    "  *** Move to: m", "  *** End of File", "*** End of File", "+*** Add File: p", " x",
    "-x", "+x", " *** Update File: q", "\t*** x",
])
_HEADER = st.tuples(
    st.sampled_from(["*** Add File: ", "*** Delete File: ", "*** Update File: "] * 3
                    + ["*** Add File:", "*** Rename File: "]),
    st.sampled_from(["", "", "  ", "  ", "\t", "\u00a0"]),
    st.sampled_from(["a", "b/c", "a", "b/c", "d/", ""]),
    st.sampled_from([None, None, "*** Move to: e/f", "  *** Move to: g", "*** Move to:h"]),
    st.lists(st.one_of(_HUNK_LINES, st.just("+y")), max_size=5),
)


def _headers(files: tuple[FilePatch, ...]) -> list[tuple[str, str, str | None]]:
    return [(f.action, f.path, f.move_to) for f in files]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_HEADER, min_size=1, max_size=4), st.sampled_from(["\n", "\r\n"]),
       st.booleans(), st.sampled_from(["", "  "]))
def test_files_of_reads_the_headers_parse_patch_reads(
    sections: list[tuple[str, str, str, str | None, list[str]]], ending: str,
    heredoc: bool, pad: str,
) -> None:
    """Every patch parse_patch accepts, however leniently spelled (padded markers,
    a heredoc, markers inside hunks and added lines): files_of names the same
    files, moves and actions, so the host counts what the worker applies."""
    lines = [pad + "*** Begin Patch"]
    for number, (marker, padding, path, move, body) in enumerate(sections):
        lines.append(padding + marker + path + (str(number) if path else ""))
        if move is not None:
            lines.append(move + str(number))
        if "Add" in marker:  # an added file's lines are mostly its own, "+" ones
            body = [line if line.startswith("+") or number % 2 else "+" + line
                    for line in body]
        lines += body
    lines.append(pad + "*** End Patch")
    if heredoc:
        lines = ["<<'EOF'", *lines, "EOF"]
    text = ending.join(lines) + ending
    try:
        parsed = parse_patch(text)
    except CorralError:
        return
    assert _headers(files_of(text)) == _headers(parsed)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12), st.sampled_from(["\n", "\r\n"]))
def test_files_of_agrees_with_parse_patch_on_any_accepted_text(
    pieces: list[str], ending: str,
) -> None:
    text = ending.join(pieces)
    try:
        parsed = parse_patch(text)
    except CorralError:
        return
    assert _headers(files_of(text)) == _headers(parsed)


def test_files_of_does_not_build_a_large_patchs_lines() -> None:
    """The host reads every apply_patch call's patch (a request's size, outside any
    worker's memory limit) up to four times: it must not build an object per line,
    as parse_patch does (about 100 bytes of memory per byte of short lines)."""
    patch = "*** Begin Patch\n*** Update File: a.txt\n" + "+\n" * 500_000 + "*** End Patch\n"
    tracemalloc.start()
    try:
        files = files_of(patch)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert _headers(files) == [("update", "a.txt", None)]
    assert peak < len(patch) // 10


def test_files_of_stops_past_the_files_a_patch_may_change() -> None:
    """apply_patch refuses a patch of more than MAX_PATCH_FILES files before it
    changes anything: the host reads no further than that."""
    patch = ("*** Begin Patch\n" + "".join(f"*** Delete File: d{i}\n" for i in range(5000))
             + "*** End Patch\n")
    assert len(files_of(patch)) == MAX_PATCH_FILES + 1
    assert len(parse_patch(patch)) == 5000
