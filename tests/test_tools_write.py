"""write_file, append_file and edit_file through Sandbox.call."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import Limits, SandboxOptions
from corral.fs import content_version
from corral.policy import RootSpec
from tests.helpers.calls import SECRET, err, ok


def temps(directory: Path) -> list[str]:
    """Temp files a failed atomic write would leave behind."""
    return sorted(p.name for p in directory.rglob(".corral-tmp-*"))



@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, resolver: SandboxOptions) -> Path:
    base = tmp_path_factory.mktemp(f"write-{resolver.resolver}")
    (base / "ws").mkdir()
    (base / "ro").mkdir()
    (base / "ro" / "kept.txt").write_text("kept\n")
    (base / "outside.txt").write_text(SECRET)
    return base


@pytest.fixture(scope="module")
def tree_ws(base: Path) -> Path:
    return base / "ws"


@pytest.fixture(scope="module")
def tree_sb(base: Path, resolver: SandboxOptions) -> Iterator[Sandbox]:
    ro = [RootSpec(str(base / "ro"), "ro")]
    with Sandbox(base / "ws", allowed_paths=ro, options=resolver) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Path]]:
    tree_ws = tmp_path_factory.mktemp("tight")
    limits = Limits(max_write_bytes=50, max_file_bytes=200)
    with Sandbox(tree_ws, limits=limits) as sandbox:
        yield sandbox, tree_ws


class TestWriteFile:
    def test_creates_file_and_parents(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        response = ok(tree_sb, "write_file", path="new/deep/a.txt", content="hi\n")
        assert response["result"] == {
            "path": "new/deep/a.txt", "bytes_written": 3, "created": True,
            "version": content_version(b"hi\n"),
        }
        assert (tree_ws / "new/deep/a.txt").read_text() == "hi\n"
        assert "new/deep/a.txt" in response["text"]

    def test_replaces_and_keeps_the_mode(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        (tree_ws / "mode.txt").write_text("old")
        os.chmod(tree_ws / "mode.txt", 0o640)
        result = ok(tree_sb, "write_file", path="mode.txt", content="new")["result"]
        assert result["created"] is False
        assert (tree_ws / "mode.txt").read_text() == "new"
        assert (tree_ws / "mode.txt").stat().st_mode & 0o777 == 0o640

    def test_expected_version(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        (tree_ws / "v.txt").write_text("one")
        version = content_version(b"one")
        result = ok(tree_sb, "write_file", path="v.txt", content="two", expected_version=version)
        assert result["result"]["version"] == content_version(b"two")
        error = err(tree_sb, "write_file", path="v.txt", content="three", expected_version=version)
        assert error["code"] == "conflict" and "v.txt" in error["message"]
        assert (tree_ws / "v.txt").read_text() == "two"
        assert temps(tree_ws) == []

    def test_expected_version_of_a_missing_file_is_a_conflict(
        self, tree_sb: Sandbox, tree_ws: Path
    ) -> None:
        error = err(tree_sb, "write_file", path="ghost.txt", content="x", expected_version="abc")
        assert error["code"] == "conflict"
        assert not (tree_ws / "ghost.txt").exists()

    def test_same_content_keeps_the_version(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        # A formatter rewriting a file identically must not break an agent's next edit.
        (tree_ws / "fmt.txt").write_text("same")
        ok(tree_sb, "write_file", path="fmt.txt", content="same",
           expected_version=content_version(b"same"))

    def test_base64(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        data = bytes(range(256))
        ok(tree_sb, "write_file", path="b.bin", content=base64.b64encode(data).decode(),
           encoding="base64")
        assert (tree_ws / "b.bin").read_bytes() == data
        error = err(tree_sb, "write_file", path="b2.bin", content="not base64!", encoding="base64")
        assert error["code"] == "invalid_arguments" and "'content'" in error["message"]
        assert not (tree_ws / "b2.bin").exists()

    def test_lone_surrogate_is_invalid(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        assert (
            err(tree_sb, "write_file", path="s.txt", content="a\ud800")["code"]
            == "invalid_arguments"
        )
        assert not (tree_ws / "s.txt").exists()

    def test_too_large_names_both_sizes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, tree_ws = tight
        error = err(sandbox, "write_file", path="big.txt", content="x" * 51)
        assert error["code"] == "too_large"
        assert "51" in error["message"] and "50" in error["message"]
        assert not (tree_ws / "big.txt").exists()

    def test_symlink_is_written_through(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        (tree_ws / "target.txt").write_text("old")
        (tree_ws / "link.txt").symlink_to("target.txt")
        ok(tree_sb, "write_file", path="link.txt", content="new")
        assert (tree_ws / "link.txt").is_symlink()
        assert (tree_ws / "target.txt").read_text() == "new"

    def test_hard_link_gets_a_new_inode(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        (tree_ws / "h1.txt").write_text("shared")
        os.link(tree_ws / "h1.txt", tree_ws / "h2.txt")
        ok(tree_sb, "write_file", path="h2.txt", content="mine")
        assert (tree_ws / "h1.txt").read_text() == "shared"
        assert (tree_ws / "h2.txt").read_text() == "mine"

    @pytest.mark.parametrize(
        ("path", "code"),
        [
            ("new", "is_a_directory"),
            ("../outside.txt", "outside_workspace"),
            ("out-link", "outside_workspace"),
            (".git/hooks/pre-commit", "path_denied"),
            ("corral.toml", "path_denied"),
        ],
    )
    def test_refusals(
        self, tree_sb: Sandbox, base: Path, tree_ws: Path, path: str, code: str
    ) -> None:
        if not (tree_ws / "out-link").is_symlink():
            (tree_ws / "out-link").symlink_to("../dangling-out.txt")
        assert err(tree_sb, "write_file", path=path, content="pwned")["code"] == code
        assert (base / "outside.txt").read_text() == SECRET
        assert not (base / "dangling-out.txt").exists()
        assert not (tree_ws / ".git").exists()

    def test_read_only_root(self, tree_sb: Sandbox, base: Path) -> None:
        target = str(base / "ro" / "kept.txt")
        assert ok(tree_sb, "read_file", path=target)["result"]["content"] == "kept\n"
        error = err(tree_sb, "write_file", path=target, content="changed")
        assert error["code"] == "read_only" and target in error["message"]
        assert (base / "ro" / "kept.txt").read_text() == "kept\n"

    def test_messages_name_absolute_paths_as_given(self, tree_sb: Sandbox, base: Path) -> None:
        missing = str(base / "ro" / "missing.txt")
        error = err(tree_sb, "read_file", path=missing)
        assert error["code"] == "not_found" and missing in error["message"]
        files = ok(tree_sb, "read_multiple_files", paths=[missing])["result"]["files"]
        assert missing in files[0]["error"]["message"]


class TestAppendFile:
    def test_creates_then_appends(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        first = ok(tree_sb, "append_file", path="log/a.log", content="one\n")["result"]
        assert first == {"path": "log/a.log", "bytes_appended": 4, "size": 4}
        second = ok(tree_sb, "append_file", path="log/a.log", content="two\n")["result"]
        assert second["size"] == 8
        assert (tree_ws / "log/a.log").read_text() == "one\ntwo\n"

    def test_hard_linked_file_is_refused(self, tree_sb: Sandbox, base: Path, tree_ws: Path) -> None:
        os.link(base / "outside.txt", tree_ws / "hardlink.txt")
        error = err(tree_sb, "append_file", path="hardlink.txt", content="pwned")
        assert error["code"] == "path_denied"
        assert (base / "outside.txt").read_text() == SECRET

    def test_growth_past_max_file_bytes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, tree_ws = tight
        (tree_ws / "grow.txt").write_text("x" * 190)
        error = err(sandbox, "append_file", path="grow.txt", content="y" * 20)
        assert error["code"] == "too_large"
        assert "210" in error["message"] and "200" in error["message"]
        assert (tree_ws / "grow.txt").read_text() == "x" * 190

    def test_content_past_max_write_bytes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, _ = tight
        assert err(sandbox, "append_file", path="w.txt", content="y" * 51)["code"] == "too_large"

    def test_concurrent_appends_never_interleave(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        def writer(n: int) -> None:
            for _ in range(10):
                ok(tree_sb, "append_file", path="race.log", content=f"{n:02d}" * 200 + "\n")

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lines = (tree_ws / "race.log").read_text().splitlines()
        assert len(lines) == 60
        assert all(line == line[:2] * 200 for line in lines)


class TestEditFile:
    @pytest.fixture
    def doc(self, tree_ws: Path, request: pytest.FixtureRequest) -> str:
        name = f"edit-{request.node.name}.txt"
        (tree_ws / name).write_text("alpha\nbeta\ngamma\nbeta\n")
        return name

    def test_single_replacement(self, tree_sb: Sandbox, tree_ws: Path, doc: str) -> None:
        response = ok(tree_sb, "edit_file", path=doc, old_string="alpha", new_string="ALPHA")
        result = response["result"]
        after = (tree_ws / doc).read_bytes()
        assert after == b"ALPHA\nbeta\ngamma\nbeta\n"
        assert result["replacements"] == 1
        assert result["version"] == content_version(after)
        assert "-alpha\n+ALPHA\n" in result["diff"]
        assert result["diff"].startswith(f"--- a/{doc}\n+++ b/{doc}\n")
        assert "+ALPHA" in response["text"]

    def test_no_match(self, tree_sb: Sandbox, tree_ws: Path, doc: str) -> None:
        error = err(tree_sb, "edit_file", path=doc, old_string="delta", new_string="x")
        assert error["code"] == "no_match" and doc in error["message"]

    def test_ambiguous_match_names_the_count(
        self, tree_sb: Sandbox, tree_ws: Path, doc: str
    ) -> None:
        error = err(tree_sb, "edit_file", path=doc, old_string="beta", new_string="x")
        assert error["code"] == "ambiguous_match" and "2 times" in error["message"]
        assert (tree_ws / doc).read_text() == "alpha\nbeta\ngamma\nbeta\n"

    def test_replace_all(self, tree_sb: Sandbox, tree_ws: Path, doc: str) -> None:
        result = ok(tree_sb, "edit_file", path=doc, old_string="beta", new_string="B",
                    replace_all=True)["result"]
        assert result["replacements"] == 2
        assert (tree_ws / doc).read_text() == "alpha\nB\ngamma\nB\n"

    def test_edits_apply_in_order(self, tree_sb: Sandbox, tree_ws: Path, doc: str) -> None:
        edits = [{"old_string": "alpha", "new_string": "one"},
                 {"old_string": "one\nbeta", "new_string": "two"},
                 {"old_string": "beta", "new_string": "three", "replace_all": True}]
        assert ok(tree_sb, "edit_file", path=doc, edits=edits)["result"]["replacements"] == 3
        assert (tree_ws / doc).read_text() == "two\ngamma\nthree\n"

    def test_edits_are_all_or_none(self, tree_sb: Sandbox, tree_ws: Path, doc: str) -> None:
        edits = [{"old_string": "alpha", "new_string": "one"},
                 {"old_string": "missing", "new_string": "two"}]
        error = err(tree_sb, "edit_file", path=doc, edits=edits)
        assert error["code"] == "no_match" and "edit 2 of 2" in error["message"]
        assert (tree_ws / doc).read_text() == "alpha\nbeta\ngamma\nbeta\n"

    @pytest.mark.parametrize(
        "arguments",
        [
            {"old_string": "alpha"},
            {"new_string": "alpha"},
            {"old_string": "alpha", "new_string": "alpha"},
            {"old_string": "alpha", "new_string": "x",
             "edits": [{"old_string": "beta", "new_string": "y"}]},
            {"replace_all": True, "edits": [{"old_string": "beta", "new_string": "y"}]},
            {"edits": []},
        ],
    )
    def test_invalid_edit_requests(
        self, tree_sb: Sandbox, tree_ws: Path, doc: str, arguments: dict[str, Any]
    ) -> None:
        assert err(tree_sb, "edit_file", path=doc, **arguments)["code"] == "invalid_arguments"
        assert (tree_ws / doc).read_text() == "alpha\nbeta\ngamma\nbeta\n"

    def test_dry_run_changes_nothing(self, tree_sb: Sandbox, tree_ws: Path, doc: str) -> None:
        before = (tree_ws / doc).read_bytes()
        result = ok(tree_sb, "edit_file", path=doc, old_string="gamma", new_string="G",
                    dry_run=True)["result"]
        assert result["dry_run"] is True and "+G\n" in result["diff"]
        assert result["version"] == content_version(before)
        assert (tree_ws / doc).read_bytes() == before

    def test_expected_version(self, tree_sb: Sandbox, tree_ws: Path, doc: str) -> None:
        version = content_version((tree_ws / doc).read_bytes())
        ok(
            tree_sb,
            "edit_file",
            path=doc,
            old_string="alpha",
            new_string="a",
            expected_version=version,
        )
        error = err(tree_sb, "edit_file", path=doc, old_string="gamma", new_string="g",
                    expected_version=version)
        assert error["code"] == "conflict"
        assert "gamma" in (tree_ws / doc).read_text()
        assert temps(tree_ws) == []

    def test_line_endings_survive(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        (tree_ws / "crlf.txt").write_bytes(b"a\r\nb\r\n")
        ok(tree_sb, "edit_file", path="crlf.txt", old_string="b", new_string="c")
        assert (tree_ws / "crlf.txt").read_bytes() == b"a\r\nc\r\n"

    def test_binary_missing_and_directory(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        (tree_ws / "e.bin").write_bytes(b"\0abc")
        assert err(tree_sb, "edit_file", path="e.bin", old_string="abc", new_string="x")[
            "code"
        ] == ("binary_file")
        assert err(tree_sb, "edit_file", path="nope.txt", old_string="a", new_string="b")[
            "code"
        ] == ("not_found")
        (tree_ws / "edir").mkdir()
        assert err(tree_sb, "edit_file", path="edir", old_string="a", new_string="b")["code"] == (
            "is_a_directory"
        )

    def test_result_over_max_write_bytes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, tree_ws = tight
        (tree_ws / "e.txt").write_text("abc")
        error = err(sandbox, "edit_file", path="e.txt", old_string="b", new_string="b" * 60)
        assert error["code"] == "too_large" and "50" in error["message"]
        assert (tree_ws / "e.txt").read_text() == "abc"
