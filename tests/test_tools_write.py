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
from tests.conftest import SECRET, err, ok


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
def ws(base: Path) -> Path:
    return base / "ws"


@pytest.fixture(scope="module")
def sb(base: Path, resolver: SandboxOptions) -> Iterator[Sandbox]:
    ro = [RootSpec(str(base / "ro"), "ro")]
    with Sandbox(base / "ws", allowed_paths=ro, options=resolver) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Path]]:
    ws = tmp_path_factory.mktemp("tight")
    limits = Limits(max_write_bytes=50, max_file_bytes=200)
    with Sandbox(ws, limits=limits) as sandbox:
        yield sandbox, ws


class TestWriteFile:
    def test_creates_file_and_parents(self, sb: Sandbox, ws: Path) -> None:
        response = ok(sb, "write_file", path="new/deep/a.txt", content="hi\n")
        assert response["result"] == {
            "path": "new/deep/a.txt", "bytes_written": 3, "created": True,
            "version": content_version(b"hi\n"),
        }
        assert (ws / "new/deep/a.txt").read_text() == "hi\n"
        assert "new/deep/a.txt" in response["text"]

    def test_replaces_and_keeps_the_mode(self, sb: Sandbox, ws: Path) -> None:
        (ws / "mode.txt").write_text("old")
        os.chmod(ws / "mode.txt", 0o640)
        result = ok(sb, "write_file", path="mode.txt", content="new")["result"]
        assert result["created"] is False
        assert (ws / "mode.txt").read_text() == "new"
        assert (ws / "mode.txt").stat().st_mode & 0o777 == 0o640

    def test_expected_version(self, sb: Sandbox, ws: Path) -> None:
        (ws / "v.txt").write_text("one")
        version = content_version(b"one")
        result = ok(sb, "write_file", path="v.txt", content="two", expected_version=version)
        assert result["result"]["version"] == content_version(b"two")
        error = err(sb, "write_file", path="v.txt", content="three", expected_version=version)
        assert error["code"] == "conflict" and "v.txt" in error["message"]
        assert (ws / "v.txt").read_text() == "two"
        assert temps(ws) == []

    def test_expected_version_of_a_missing_file_is_a_conflict(self, sb: Sandbox, ws: Path) -> None:
        error = err(sb, "write_file", path="ghost.txt", content="x", expected_version="abc")
        assert error["code"] == "conflict"
        assert not (ws / "ghost.txt").exists()

    def test_same_content_keeps_the_version(self, sb: Sandbox, ws: Path) -> None:
        # A formatter rewriting a file identically must not break an agent's next edit.
        (ws / "fmt.txt").write_text("same")
        ok(sb, "write_file", path="fmt.txt", content="same",
           expected_version=content_version(b"same"))

    def test_base64(self, sb: Sandbox, ws: Path) -> None:
        data = bytes(range(256))
        ok(sb, "write_file", path="b.bin", content=base64.b64encode(data).decode(),
           encoding="base64")
        assert (ws / "b.bin").read_bytes() == data
        error = err(sb, "write_file", path="b2.bin", content="not base64!", encoding="base64")
        assert error["code"] == "invalid_arguments" and "'content'" in error["message"]
        assert not (ws / "b2.bin").exists()

    def test_lone_surrogate_is_invalid(self, sb: Sandbox, ws: Path) -> None:
        assert err(sb, "write_file", path="s.txt", content="a\ud800")["code"] == "invalid_arguments"
        assert not (ws / "s.txt").exists()

    def test_too_large_names_both_sizes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, ws = tight
        error = err(sandbox, "write_file", path="big.txt", content="x" * 51)
        assert error["code"] == "too_large"
        assert "51" in error["message"] and "50" in error["message"]
        assert not (ws / "big.txt").exists()

    def test_symlink_is_written_through(self, sb: Sandbox, ws: Path) -> None:
        (ws / "target.txt").write_text("old")
        (ws / "link.txt").symlink_to("target.txt")
        ok(sb, "write_file", path="link.txt", content="new")
        assert (ws / "link.txt").is_symlink()
        assert (ws / "target.txt").read_text() == "new"

    def test_hard_link_gets_a_new_inode(self, sb: Sandbox, ws: Path) -> None:
        (ws / "h1.txt").write_text("shared")
        os.link(ws / "h1.txt", ws / "h2.txt")
        ok(sb, "write_file", path="h2.txt", content="mine")
        assert (ws / "h1.txt").read_text() == "shared"
        assert (ws / "h2.txt").read_text() == "mine"

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
    def test_refusals(self, sb: Sandbox, base: Path, ws: Path, path: str, code: str) -> None:
        if not (ws / "out-link").is_symlink():
            (ws / "out-link").symlink_to("../dangling-out.txt")
        assert err(sb, "write_file", path=path, content="pwned")["code"] == code
        assert (base / "outside.txt").read_text() == SECRET
        assert not (base / "dangling-out.txt").exists()
        assert not (ws / ".git").exists()

    def test_read_only_root(self, sb: Sandbox, base: Path) -> None:
        target = str(base / "ro" / "kept.txt")
        assert ok(sb, "read_file", path=target)["result"]["content"] == "kept\n"
        error = err(sb, "write_file", path=target, content="changed")
        assert error["code"] == "read_only" and target in error["message"]
        assert (base / "ro" / "kept.txt").read_text() == "kept\n"

    def test_messages_name_absolute_paths_as_given(self, sb: Sandbox, base: Path) -> None:
        missing = str(base / "ro" / "missing.txt")
        error = err(sb, "read_file", path=missing)
        assert error["code"] == "not_found" and missing in error["message"]
        files = ok(sb, "read_multiple_files", paths=[missing])["result"]["files"]
        assert missing in files[0]["error"]["message"]


class TestAppendFile:
    def test_creates_then_appends(self, sb: Sandbox, ws: Path) -> None:
        first = ok(sb, "append_file", path="log/a.log", content="one\n")["result"]
        assert first == {"path": "log/a.log", "bytes_appended": 4, "size": 4}
        second = ok(sb, "append_file", path="log/a.log", content="two\n")["result"]
        assert second["size"] == 8
        assert (ws / "log/a.log").read_text() == "one\ntwo\n"

    def test_hard_linked_file_is_refused(self, sb: Sandbox, base: Path, ws: Path) -> None:
        os.link(base / "outside.txt", ws / "hardlink.txt")
        error = err(sb, "append_file", path="hardlink.txt", content="pwned")
        assert error["code"] == "path_denied"
        assert (base / "outside.txt").read_text() == SECRET

    def test_growth_past_max_file_bytes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, ws = tight
        (ws / "grow.txt").write_text("x" * 190)
        error = err(sandbox, "append_file", path="grow.txt", content="y" * 20)
        assert error["code"] == "too_large"
        assert "210" in error["message"] and "200" in error["message"]
        assert (ws / "grow.txt").read_text() == "x" * 190

    def test_content_past_max_write_bytes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, _ = tight
        assert err(sandbox, "append_file", path="w.txt", content="y" * 51)["code"] == "too_large"

    def test_concurrent_appends_never_interleave(self, sb: Sandbox, ws: Path) -> None:
        def writer(n: int) -> None:
            for _ in range(10):
                ok(sb, "append_file", path="race.log", content=f"{n:02d}" * 200 + "\n")

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lines = (ws / "race.log").read_text().splitlines()
        assert len(lines) == 60
        assert all(line == line[:2] * 200 for line in lines)


class TestEditFile:
    @pytest.fixture
    def doc(self, ws: Path, request: pytest.FixtureRequest) -> str:
        name = f"edit-{request.node.name}.txt"
        (ws / name).write_text("alpha\nbeta\ngamma\nbeta\n")
        return name

    def test_single_replacement(self, sb: Sandbox, ws: Path, doc: str) -> None:
        response = ok(sb, "edit_file", path=doc, old_string="alpha", new_string="ALPHA")
        result = response["result"]
        after = (ws / doc).read_bytes()
        assert after == b"ALPHA\nbeta\ngamma\nbeta\n"
        assert result["replacements"] == 1
        assert result["version"] == content_version(after)
        assert "-alpha\n+ALPHA\n" in result["diff"]
        assert result["diff"].startswith(f"--- a/{doc}\n+++ b/{doc}\n")
        assert "+ALPHA" in response["text"]

    def test_no_match(self, sb: Sandbox, ws: Path, doc: str) -> None:
        error = err(sb, "edit_file", path=doc, old_string="delta", new_string="x")
        assert error["code"] == "no_match" and doc in error["message"]

    def test_ambiguous_match_names_the_count(self, sb: Sandbox, ws: Path, doc: str) -> None:
        error = err(sb, "edit_file", path=doc, old_string="beta", new_string="x")
        assert error["code"] == "ambiguous_match" and "2 times" in error["message"]
        assert (ws / doc).read_text() == "alpha\nbeta\ngamma\nbeta\n"

    def test_replace_all(self, sb: Sandbox, ws: Path, doc: str) -> None:
        result = ok(sb, "edit_file", path=doc, old_string="beta", new_string="B",
                    replace_all=True)["result"]
        assert result["replacements"] == 2
        assert (ws / doc).read_text() == "alpha\nB\ngamma\nB\n"

    def test_edits_apply_in_order(self, sb: Sandbox, ws: Path, doc: str) -> None:
        edits = [{"old_string": "alpha", "new_string": "one"},
                 {"old_string": "one\nbeta", "new_string": "two"},
                 {"old_string": "beta", "new_string": "three", "replace_all": True}]
        assert ok(sb, "edit_file", path=doc, edits=edits)["result"]["replacements"] == 3
        assert (ws / doc).read_text() == "two\ngamma\nthree\n"

    def test_edits_are_all_or_none(self, sb: Sandbox, ws: Path, doc: str) -> None:
        edits = [{"old_string": "alpha", "new_string": "one"},
                 {"old_string": "missing", "new_string": "two"}]
        error = err(sb, "edit_file", path=doc, edits=edits)
        assert error["code"] == "no_match" and "edit 2 of 2" in error["message"]
        assert (ws / doc).read_text() == "alpha\nbeta\ngamma\nbeta\n"

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
        self, sb: Sandbox, ws: Path, doc: str, arguments: dict[str, Any]
    ) -> None:
        assert err(sb, "edit_file", path=doc, **arguments)["code"] == "invalid_arguments"
        assert (ws / doc).read_text() == "alpha\nbeta\ngamma\nbeta\n"

    def test_dry_run_changes_nothing(self, sb: Sandbox, ws: Path, doc: str) -> None:
        before = (ws / doc).read_bytes()
        result = ok(sb, "edit_file", path=doc, old_string="gamma", new_string="G",
                    dry_run=True)["result"]
        assert result["dry_run"] is True and "+G\n" in result["diff"]
        assert result["version"] == content_version(before)
        assert (ws / doc).read_bytes() == before

    def test_expected_version(self, sb: Sandbox, ws: Path, doc: str) -> None:
        version = content_version((ws / doc).read_bytes())
        ok(sb, "edit_file", path=doc, old_string="alpha", new_string="a", expected_version=version)
        error = err(sb, "edit_file", path=doc, old_string="gamma", new_string="g",
                    expected_version=version)
        assert error["code"] == "conflict"
        assert "gamma" in (ws / doc).read_text()
        assert temps(ws) == []

    def test_line_endings_survive(self, sb: Sandbox, ws: Path) -> None:
        (ws / "crlf.txt").write_bytes(b"a\r\nb\r\n")
        ok(sb, "edit_file", path="crlf.txt", old_string="b", new_string="c")
        assert (ws / "crlf.txt").read_bytes() == b"a\r\nc\r\n"

    def test_binary_missing_and_directory(self, sb: Sandbox, ws: Path) -> None:
        (ws / "e.bin").write_bytes(b"\0abc")
        assert err(sb, "edit_file", path="e.bin", old_string="abc", new_string="x")["code"] == (
            "binary_file"
        )
        assert err(sb, "edit_file", path="nope.txt", old_string="a", new_string="b")["code"] == (
            "not_found"
        )
        (ws / "edir").mkdir()
        assert err(sb, "edit_file", path="edir", old_string="a", new_string="b")["code"] == (
            "is_a_directory"
        )

    def test_result_over_max_write_bytes(self, tight: tuple[Sandbox, Path]) -> None:
        sandbox, ws = tight
        (ws / "e.txt").write_text("abc")
        error = err(sandbox, "edit_file", path="e.txt", old_string="b", new_string="b" * 60)
        assert error["code"] == "too_large" and "50" in error["message"]
        assert (ws / "e.txt").read_text() == "abc"
