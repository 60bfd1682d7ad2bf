"""read_file and read_multiple_files through Sandbox.call."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import Sandbox
from corral.config import Limits, SandboxOptions
from corral.fs import content_version
from tests.helpers.calls import SECRET, err, ok

PNG = b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + bytes(range(40))
MiB = 1024 * 1024





@pytest.fixture(scope="module")
def tree_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("read")
    tree_ws = root / "ws"
    tree_ws.mkdir()
    (root / "outside.txt").write_text(SECRET)
    (tree_ws / "ten.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    (tree_ws / "empty.txt").write_bytes(b"")
    (tree_ws / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    (tree_ws / "no-eol.txt").write_bytes(b"a\nlast")
    (tree_ws / "long.txt").write_text("x" * 2500 + "\nshort\n")
    (tree_ws / "pic.png").write_bytes(PNG)
    (tree_ws / "blob.bin").write_bytes(b"\x00\x01\x02binary\xff")
    (tree_ws / "latin1.txt").write_bytes("café".encode("latin-1"))
    (tree_ws / "dir").mkdir()
    (tree_ws / ".env").write_text(SECRET)
    (tree_ws / "loop").symlink_to("loop")
    (tree_ws / "escape").symlink_to("../outside.txt")
    os.mkfifo(tree_ws / "fifo")
    return tree_ws


@pytest.fixture(scope="module")
def tree_sb(tree_ws: Path, resolver: SandboxOptions) -> Iterator[Sandbox]:
    with Sandbox(tree_ws, limits=Limits(max_file_bytes=100_000), options=resolver) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Path]]:
    """Limits above the hard ceiling: the 4 MiB per-call ceiling must still hold."""
    tree_ws = tmp_path_factory.mktemp("big")
    with Sandbox(
        tree_ws, limits=Limits(max_read_bytes=16 * MiB, max_file_bytes=32 * MiB)
    ) as sandbox:
        yield sandbox, tree_ws


class TestReadFile:
    def test_whole_file(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        response = ok(tree_sb, "read_file", path="ten.txt")
        result = response["result"]
        data = (tree_ws / "ten.txt").read_bytes()
        assert result == {
            "path": "ten.txt", "content": data.decode(), "encoding": "utf-8",
            "total_lines": 10, "start_line": 1, "lines_read": 10, "truncated": False,
            "next_offset": None, "size": len(data), "version": content_version(data),
        }
        assert response["text"].splitlines()[0] == "     1\tline 1"
        assert response["text"].splitlines()[-1] == "    10\tline 10"

    def test_offset_and_limit_page(self, tree_sb: Sandbox) -> None:
        response = ok(tree_sb, "read_file", path="ten.txt", offset=3, limit=2)
        result = response["result"]
        assert result["content"] == "line 3\nline 4\n"
        assert (result["start_line"], result["lines_read"]) == (3, 2)
        assert (result["truncated"], result["next_offset"]) == (True, 5)
        assert response["text"] == (
            "     3\tline 3\n     4\tline 4\n[showing lines 3-4 of 10; continue with offset=5]"
        )

    def test_negative_offset_is_tail(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "read_file", path="ten.txt", offset=-3)["result"]
        assert result["content"] == "line 8\nline 9\nline 10\n"
        assert (result["start_line"], result["truncated"]) == (8, False)

    def test_tail_longer_than_the_file(self, tree_sb: Sandbox) -> None:
        assert ok(tree_sb, "read_file", path="ten.txt", offset=-99)["result"]["start_line"] == 1

    def test_offset_zero_is_invalid(self, tree_sb: Sandbox) -> None:
        error = err(tree_sb, "read_file", path="ten.txt", offset=0)
        assert error["code"] == "invalid_arguments"
        assert "'offset'" in error["message"]

    def test_offset_past_the_end(self, tree_sb: Sandbox) -> None:
        response = ok(tree_sb, "read_file", path="ten.txt", offset=50)
        assert response["result"]["lines_read"] == 0
        assert response["result"]["content"] == ""
        assert "10 lines" in response["text"]

    def test_max_bytes_returns_whole_lines_and_pages(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        result = ok(tree_sb, "read_file", path="ten.txt", max_bytes=20)["result"]
        assert result["content"] == "line 1\nline 2\n"
        assert (result["truncated"], result["next_offset"]) == (True, 3)
        pieces, offset = [], 1
        while offset is not None:
            result = ok(tree_sb, "read_file", path="ten.txt", offset=offset, max_bytes=20)["result"]
            pieces.append(result["content"])
            offset = result["next_offset"]
        assert "".join(pieces) == (tree_ws / "ten.txt").read_text()

    def test_line_longer_than_max_bytes_is_cut(self, tree_sb: Sandbox) -> None:
        response = ok(tree_sb, "read_file", path="long.txt", max_bytes=100)
        result = response["result"]
        assert result["content"] == "x" * 100
        assert (result["lines_read"], result["next_offset"]) == (1, 2)
        assert (result["truncated"], result["next_byte_offset"]) == (True, 100)
        hint = "cut at 100 of 2501 bytes; read the rest with offset=1, byte_offset=100"
        assert hint in response["text"]

    @pytest.mark.parametrize("encoding", ["utf-8", "base64"])
    def test_a_cut_line_is_never_silent_and_pages_in_full(
        self, tree_sb: Sandbox, tree_ws: Path, encoding: str
    ) -> None:
        # One line, no newline: the cut used to come back truncated=false, next_offset=null.
        (tree_ws / "one-line.txt").write_text("0123456789" * 10)
        result = ok(tree_sb, "read_file", path="one-line.txt", max_bytes=8, encoding=encoding)[
            "result"
        ]
        assert result["truncated"] is True
        assert result["next_offset"] is None
        assert result["next_byte_offset"] == (8 if encoding == "utf-8" else 6)
        for name in ("one-line.txt", "long.txt", "ten.txt"):
            assert _page_all(tree_sb, name, encoding, max_bytes=8) == (tree_ws / name).read_bytes()

    def test_a_cut_ends_on_a_whole_character(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        (tree_ws / "wide.txt").write_text("é" * 10 + "\nok\n")
        result = ok(tree_sb, "read_file", path="wide.txt", max_bytes=5)["result"]
        assert (result["content"], result["next_byte_offset"]) == ("éé", 4)
        # A budget below one character still moves on by one character.
        assert ok(tree_sb, "read_file", path="wide.txt", max_bytes=1)["result"]["content"] == "é"
        assert (
            _page_all(tree_sb, "wide.txt", "utf-8", max_bytes=3)
            == (tree_ws / "wide.txt").read_bytes()
        )

    def test_byte_offset_must_fall_inside_the_line(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        (tree_ws / "wide.txt").write_text("é" * 10 + "\nok\n")
        error = err(tree_sb, "read_file", path="ten.txt", offset=2, byte_offset=7)
        assert error["code"] == "invalid_arguments"
        assert "'byte_offset'" in error["message"]
        error = err(tree_sb, "read_file", path="wide.txt", byte_offset=3)
        assert (error["code"], "inside a character" in error["message"]) == (
            "invalid_arguments", True)

    def test_max_read_bytes_cut_is_truncated(self, tree_ws: Path) -> None:
        (tree_ws / "one-line.txt").write_text("0123456789" * 10)
        with Sandbox(tree_ws, limits=Limits(max_read_bytes=10)) as small:
            result = ok(small, "read_file", path="one-line.txt")["result"]
            assert (result["content"], result["truncated"]) == ("0123456789", True)
            assert (
                _page_all(small, "one-line.txt", "utf-8") == (tree_ws / "one-line.txt").read_bytes()
            )

    def test_empty_file(self, tree_sb: Sandbox) -> None:
        response = ok(tree_sb, "read_file", path="empty.txt")
        assert response["result"]["total_lines"] == 0
        assert response["result"]["content"] == ""
        assert response["text"] == "empty.txt is empty."

    def test_line_endings_are_kept(self, tree_sb: Sandbox) -> None:
        assert ok(tree_sb, "read_file", path="crlf.txt")["result"]["content"] == "a\r\nb\r\n"
        response = ok(tree_sb, "read_file", path="no-eol.txt")
        assert response["result"]["content"] == "a\nlast"
        assert response["result"]["total_lines"] == 2
        assert "\r" not in ok(tree_sb, "read_file", path="crlf.txt")["text"]

    def test_long_lines_are_cut_in_text_only(self, tree_sb: Sandbox) -> None:
        response = ok(tree_sb, "read_file", path="long.txt")
        assert response["result"]["content"].startswith("x" * 2500 + "\n")
        first = response["text"].splitlines()[0]
        assert first.startswith("     1\t" + "x" * 2000)
        assert "x" * 2001 not in first and "2500 chars" in first

    def test_image_comes_back_as_an_image_block(self, tree_sb: Sandbox) -> None:
        response = ok(tree_sb, "read_file", path="pic.png")
        result = response["result"]
        assert result["image"]["media_type"] == "image/png"
        assert base64.b64decode(result["image"]["data"]) == PNG
        assert (result["size"], result["version"]) == (len(PNG), content_version(PNG))
        assert "content" not in result
        assert "image/png" in response["text"]

    def test_binary_file_fails_unless_base64(self, tree_sb: Sandbox) -> None:
        error = err(tree_sb, "read_file", path="blob.bin")
        assert error["code"] == "binary_file"
        assert "blob.bin" in error["message"] and "base64" in error["message"]
        result = ok(tree_sb, "read_file", path="blob.bin", encoding="base64")["result"]
        assert base64.b64decode(result["content"]) == b"\x00\x01\x02binary\xff"
        assert result["encoding"] == "base64"

    def test_base64_of_an_image_is_raw_content(self, tree_sb: Sandbox) -> None:
        result = ok(tree_sb, "read_file", path="pic.png", encoding="base64")["result"]
        assert base64.b64decode(result["content"]) == PNG

    def test_invalid_utf8_is_binary(self, tree_sb: Sandbox) -> None:
        assert err(tree_sb, "read_file", path="latin1.txt")["code"] == "binary_file"

    def test_over_max_file_bytes_comes_back_as_a_window(
        self, tree_sb: Sandbox, tree_ws: Path
    ) -> None:
        """No too_large for a read: a default read of a file over max_file_bytes is
        its first window (tests/test_tools_huge.py reads such files every way)."""
        (tree_ws / "huge.txt").write_bytes(b"a" * 100_001)
        response = ok(tree_sb, "read_file", path="huge.txt", max_bytes=1000)
        result = response["result"]
        assert result["content"] == "a" * 1000 and result["start_byte"] == 0
        assert (result["next_byte_offset"], result["size"]) == (1000, 100_001)
        assert "version" not in result

    @pytest.mark.parametrize(
        ("path", "code"),
        [
            ("missing.txt", "not_found"),
            ("missing/deeper.txt", "not_found"),
            ("dir", "is_a_directory"),
            ("ten.txt/x", "not_a_directory"),
            ("fifo", "not_a_regular_file"),
            ("loop", "symlink_loop"),
            ("../outside.txt", "outside_workspace"),
            ("escape", "outside_workspace"),
            ("/etc/passwd", "outside_workspace"),
            ("a\0b", "invalid_arguments"),
            ("x" * 5000, "invalid_arguments"),
        ],
    )
    def test_error_codes(self, tree_sb: Sandbox, path: str, code: str) -> None:
        error = err(tree_sb, "read_file", path=path)
        assert error["code"] == code
        assert SECRET not in str(error)

    def test_policy_denied_path_names_the_rule(self, tree_sb: Sandbox) -> None:
        error = err(tree_sb, "read_file", path=".env")
        assert (error["code"], error["rule"]) == ("path_denied", "block-dotenv")
        assert SECRET not in str(error)

    def test_hard_ceiling_per_read(self, big: tuple[Sandbox, Path]) -> None:
        sandbox, tree_ws = big
        (tree_ws / "five.txt").write_bytes(b"y" * 1023 + b"\n" + (b"z" * 1023 + b"\n") * (5 * 1024))
        response = ok(sandbox, "read_file", path="five.txt", max_bytes=16 * MiB, limit=10**6)
        result = response["result"]
        # 4 MiB as JSON carries it: each 1024-byte line is 1025 bytes ("\n" escaped)
        assert len(result["content"]) == 4092 * 1024
        assert (result["truncated"], result["next_offset"]) == (True, 4093)


class TestReadMultipleFiles:
    def test_each_file_on_its_own(self, tree_sb: Sandbox, tree_ws: Path) -> None:
        paths = ["ten.txt", "missing.txt", ".env", "pic.png"]
        response = ok(tree_sb, "read_multiple_files", paths=paths)
        files = response["result"]["files"]
        assert [f["path"] for f in files] == ["ten.txt", "missing.txt", ".env", "pic.png"]
        assert [f["ok"] for f in files] == [True, False, False, True]
        assert files[0]["content"] == (tree_ws / "ten.txt").read_text()
        assert files[1]["error"]["code"] == "not_found"
        assert files[2]["error"]["code"] == "path_denied"
        assert files[3]["image"]["media_type"] == "image/png"
        assert "==> missing.txt <==\nerror (not_found)" in response["text"]
        assert SECRET not in str(response)

    def test_paging_applies_to_each(self, tree_sb: Sandbox) -> None:
        files = ok(tree_sb, "read_multiple_files", paths=["ten.txt", "crlf.txt"], offset=-1)
        contents = [f["content"] for f in files["result"]["files"]]
        assert contents == ["line 10\n", "b\r\n"]

    def test_at_most_fifty_paths(self, tree_sb: Sandbox) -> None:
        assert ok(tree_sb, "read_multiple_files", paths=["ten.txt"] * 50)["result"]["files"]
        error = err(tree_sb, "read_multiple_files", paths=["ten.txt"] * 51)
        assert error["code"] == "invalid_arguments" and "'paths'" in error["message"]

    def test_one_call_returns_at_most_the_hard_ceiling(self, big: tuple[Sandbox, Path]) -> None:
        sandbox, tree_ws = big
        (tree_ws / "three.txt").write_bytes((b"q" * 1023 + b"\n") * (3 * 1024))
        paths = ["three.txt"] * 3
        response = ok(sandbox, "read_multiple_files", paths=paths, max_bytes=4 * MiB, limit=10**6)
        files = response["result"]["files"]
        assert len(files[0]["content"]) == 3 * MiB and not files[0]["truncated"]
        # the rest of 4 MiB as JSON carries it: 1025 bytes a line ("\n" escaped)
        assert len(files[1]["content"]) == (4 * MiB - 3072 * 1025) // 1025 * 1024
        assert files[1]["truncated"]
        assert files[2]["error"]["code"] == "too_large"


def _page_all(tree_sb: Sandbox, path: str, encoding: str, **extra: int) -> bytes:
    """Every byte of `path`, paged the way the results say: byte_offset within a cut
    line, offset to the next line."""
    pieces, offset, skip = [], 1, 0
    for _ in range(1000):
        result = ok(tree_sb, "read_file", path=path, offset=offset, byte_offset=skip,
                    encoding=encoding, **extra)["result"]
        content = result["content"]
        pieces.append(base64.b64decode(content) if encoding == "base64" else content.encode())
        if "next_byte_offset" in result:
            offset, skip = result["start_line"], result["next_byte_offset"]
        elif result["next_offset"] is not None:
            offset, skip = result["next_offset"], 0
        else:
            assert result["truncated"] is False
            return b"".join(pieces)
    raise AssertionError(f"{path} did not finish paging")
