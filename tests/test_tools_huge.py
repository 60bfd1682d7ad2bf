"""Files over max_file_bytes: read_file serves windows of them (by line, from the
end, by byte) and grep streams them, in bounded memory, through Sandbox.call and
the MCP SDK client; whole-file operations still refuse them. Files of a few MiB
under a lowered max_file_bytes stand in for the 2 GiB of scripts/bench_huge.py."""

from __future__ import annotations

import base64
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import Sandbox, jsonfast
from corral.config import Limits
from corral.sandbox.answers import decode_answer
from corral.tools.line_search import FOLD_OUTSIDE_ASCII, LineMatcher
from corral.tools.paging import split_lines
from corral.tools.search import Found
from corral.tools.windows import Marks, blocks, line_start, marks_of
from tests.helpers.calls import err, ok
from tests.helpers.mcp_helpers import run_session, structured, write_config

LIMIT = 256 * 1024  # max_file_bytes here: every file below is over it
LINES = 200_000
GiB = 1024**3


def _line(number: int) -> bytes:
    return f"line {number} é\n".encode()


@pytest.fixture(scope="module")
def huge_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("huge")
    (ws / "big.log").write_bytes(b"".join(_line(n) for n in range(1, LINES + 1)))
    (ws / "nul.bin").write_bytes(b"\0" * 10 + b"x\n" * LIMIT)
    (ws / "wide.txt").write_bytes("\ufeffline\n".encode("utf-16") * (LIMIT // 8))
    # UTF-8 but for one latin-1 line in its middle
    (ws / "mixed.log").write_bytes(
        b"ok\n" * LIMIT + "caf\xe9 NEEDLE\n".encode("latin-1") + b"ok NEEDLE\n" + b"ok\n" * 10
    )
    (ws / "one-line.txt").write_bytes("é".encode() * LIMIT + b"\nend\n")
    return ws


@pytest.fixture(scope="module")
def sb(huge_ws: Path) -> Iterator[Sandbox]:
    with Sandbox(huge_ws, limits=Limits(max_file_bytes=LIMIT)) as sandbox:
        yield sandbox


def _read(sb: Sandbox, **arguments: object) -> dict[str, object]:
    return ok(sb, "read_file", path="big.log", **arguments)["result"]


class TestWindows:
    def test_the_tail(self, sb: Sandbox, huge_ws: Path) -> None:
        data = (huge_ws / "big.log").read_bytes()
        response = ok(sb, "read_file", path="big.log", offset=-100)
        result = response["result"]
        tail = b"".join(_line(n) for n in range(LINES - 99, LINES + 1))
        assert result == {
            "path": "big.log", "content": tail.decode(), "encoding": "utf-8",
            "total_lines": None, "start_line": -100, "lines_read": 100, "truncated": False,
            "next_offset": None, "size": len(data), "start_byte": len(data) - len(tail),
        }
        lines = response["text"].splitlines()
        assert lines[0] == f"  -100\tline {LINES - 99} é"
        assert lines[99] == f"    -1\tline {LINES} é"
        assert "numbered from its end" in lines[100]

    def test_a_tail_pages_toward_the_end(self, sb: Sandbox) -> None:
        result = _read(sb, offset=-200, limit=100)
        assert result["content"] == b"".join(
            _line(n) for n in range(LINES - 199, LINES - 99)).decode()
        assert (result["next_offset"], result["truncated"]) == (-100, True)

    def test_a_line_window_found_by_counting(self, sb: Sandbox) -> None:
        result = _read(sb, offset=150_000, limit=101)
        assert result["content"] == b"".join(_line(n) for n in range(150_000, 150_101)).decode()
        assert (result["start_line"], result["lines_read"], result["next_offset"]) == (
            150_000, 101, 150_101)
        assert result["total_lines"] is None and "version" not in result

    def test_the_last_window_knows_the_line_count(self, sb: Sandbox) -> None:
        result = _read(sb, offset=LINES - 1)
        assert (result["total_lines"], result["next_offset"]) == (LINES, None)
        past = ok(sb, "read_file", path="big.log", offset=LINES + 5)
        assert (past["result"]["lines_read"], past["result"]["total_lines"]) == (0, LINES)
        assert past["text"] == f"big.log has {LINES} lines; none at line {LINES + 5}."

    def test_a_default_read_is_the_first_window_with_a_paging_hint(self, sb: Sandbox) -> None:
        response = ok(sb, "read_file", path="big.log")
        result = response["result"]
        assert (result["start_line"], result["lines_read"], result["next_offset"]) == (
            1, 2000, 2001)
        assert response["text"].endswith("continue with offset=2001]")

    def test_paging_by_next_offset_returns_every_byte(self, sb: Sandbox, huge_ws: Path) -> None:
        pieces, offset = [], 1
        while offset is not None:
            result = _read(sb, offset=offset, limit=40_000)
            pieces.append(str(result["content"]).encode())
            offset = result["next_offset"]  # type: ignore[assignment]
        assert b"".join(pieces) == (huge_ws / "big.log").read_bytes()

    def test_paging_by_byte_returns_every_byte(self, sb: Sandbox, huge_ws: Path) -> None:
        pieces, skip = [], 0
        while True:
            result = _read(sb, byte_offset=skip, max_bytes=300_000) if skip else _read(
                sb, max_bytes=300_000, limit=10**6)
            pieces.append(str(result["content"]).encode())
            if "next_byte_offset" in result:
                skip = result["next_byte_offset"]  # type: ignore[assignment]
            elif result["next_offset"] is not None:  # the first window counts lines
                skip = result["start_byte"] + len(pieces[-1])  # type: ignore[operator]
            else:
                break
        assert b"".join(pieces) == (huge_ws / "big.log").read_bytes()

    def test_a_byte_window_inside_a_character_starts_at_it(self, sb: Sandbox,
                                                           huge_ws: Path) -> None:
        data = (huge_ws / "big.log").read_bytes()
        inside = data.index("é".encode(), 2_000_000) + 1  # the character's second byte
        response = ok(sb, "read_file", path="big.log", byte_offset=inside, limit=3)
        result = response["result"]
        assert result["start_byte"] == inside - 1 and result["start_line"] is None
        assert result["content"].startswith("é\n")
        assert result["content"].encode() == data[inside - 1 : result["next_byte_offset"]]
        assert "byte window" in response["text"]

    def test_byte_offset_in_a_line(self, sb: Sandbox) -> None:
        assert _read(sb, offset=5, byte_offset=2, limit=1)["content"] == "ne 5 é\n"
        assert _read(sb, offset=-1, byte_offset=5)["content"] == f"{LINES} é\n"
        past = err(sb, "read_file", path="big.log", offset=5, byte_offset=30)
        assert past["code"] == "invalid_arguments" and "line 5" in past["message"]
        inside = err(sb, "read_file", path="big.log", offset=5, byte_offset=8)  # in "é"
        assert inside["code"] == "invalid_arguments" and "character" in inside["message"]

    def test_a_line_longer_than_the_budget_is_cut_and_read_on(self, sb: Sandbox) -> None:
        first = ok(sb, "read_file", path="one-line.txt", max_bytes=1001)["result"]
        assert first["content"] == "é" * 500 and first["next_byte_offset"] == 1000
        rest = ok(sb, "read_file", path="one-line.txt", offset=1, byte_offset=1000)["result"]
        assert rest["content"].startswith("é") and rest["start_byte"] == 1000

    def test_base64_windows_any_bytes(self, sb: Sandbox, huge_ws: Path) -> None:
        result = ok(sb, "read_file", path="nul.bin", offset=-3, encoding="base64")["result"]
        assert base64.b64decode(result["content"]) == b"x\n" * 3
        assert result["encoding"] == "base64"

    @pytest.mark.parametrize(("path", "said"), [("nul.bin", "binary"), ("wide.txt", "utf-16")])
    def test_text_that_is_not_utf8_is_refused(self, sb: Sandbox, path: str, said: str) -> None:
        error = err(sb, "read_file", path=path, offset=-1)
        assert error["code"] == "binary_file" and said in error["message"]
        assert "base64" in error["message"]

    def test_a_window_that_is_not_utf8_is_refused_never_replaced(self, sb: Sandbox,
                                                                 huge_ws: Path) -> None:
        data = (huge_ws / "mixed.log").read_bytes()
        error = err(sb, "read_file", path="mixed.log", offset=-13)
        assert error["code"] == "binary_file"
        assert str(data.index(b"\xe9")) in error["message"]
        assert ok(sb, "read_file", path="mixed.log", offset=-11)["result"]["lines_read"] == 11

    def test_whole_file_operations_still_refuse(self, sb: Sandbox) -> None:
        edit = err(sb, "edit_file", path="big.log", old_string="line 1 ", new_string="x")
        assert edit["code"] == "too_large" and str(LIMIT) in edit["message"]
        copy = err(sb, "copy_file", source="big.log", destination="copy.log")
        assert copy["code"] == "too_large"

    def test_read_multiple_files_reads_a_first_window(self, sb: Sandbox) -> None:
        files = ok(sb, "read_multiple_files", paths=["big.log", "one-line.txt"],
                   limit=2)["result"]["files"]
        assert files[0]["ok"] and files[0]["content"] == "line 1 é\nline 2 é\n"


def test_line_starts_from_remembered_marks_are_exact(huge_ws: Path) -> None:
    """Every line found from the marks earlier scans left, in an order that starts
    scans at each mark, as the file's own line starts."""
    data = (huge_ws / "big.log").read_bytes()
    starts = [0, *(at + 1 for at in range(len(data)) if data[at] == 10)][:-1]
    with (huge_ws / "big.log").open("rb") as file:
        st = os.fstat(file.fileno())
        marks = Marks()
        assert line_start(file.fileno(), st.st_size, LINES, marks) == (starts[-1], LINES - 1)
        assert len(marks.marks) > 2
        numbers = [n for _, before in marks.marks for n in (before - 1, before, before + 1,
                                                              before + 2) if n > 0]
        for number in [*numbers, 1, 2, LINES // 2, LINES, 7]:
            found, _ = line_start(file.fileno(), st.st_size, number, marks)
            assert found == starts[number - 1], number
        assert line_start(file.fileno(), st.st_size, LINES + 1, marks) == (None, LINES)
        assert marks_of(st) is marks_of(st)


class TestGrep:
    def test_a_named_huge_file_is_streamed(self, sb: Sandbox) -> None:
        result = ok(sb, "grep", pattern="^line 1999[0-9]{2} ", path="big.log")["result"]
        numbers = [m["line"] for m in result["matches"]]
        assert numbers == list(range(199_900, 200_000))
        assert all(m["text"] == f"line {m['line']} é" for m in result["matches"])

    def test_the_match_cap_stops_it(self, sb: Sandbox) -> None:
        result = ok(sb, "grep", pattern="é", path="big.log", max_results=5)["result"]
        assert [m["line"] for m in result["matches"]] == [1, 2, 3, 4, 5]
        assert result["truncated"]

    def test_lines_that_are_not_utf8_are_passed_by(self, sb: Sandbox) -> None:
        result = ok(sb, "grep", pattern="NEEDLE", path="mixed.log")["result"]
        assert [m["text"] for m in result["matches"]] == ["ok NEEDLE"]
        assert result["matches"][0]["line"] == LIMIT + 2

    def test_a_walk_searches_huge_files_and_skips_binary_ones(self, sb: Sandbox) -> None:
        result = ok(sb, "grep", pattern="^line 200000 |NEEDLE|x$")["result"]
        assert {(m["path"], m["text"]) for m in result["matches"]} == {
            ("big.log", f"line {LINES} é"), ("mixed.log", "ok NEEDLE")}
        named = err(sb, "grep", pattern="x", path="nul.bin")
        assert named["code"] == "binary_file"

    def test_the_deadline_stops_it_with_what_it_found(self, huge_ws: Path) -> None:
        found = Found(re.compile("line"), 10**6, 10**9, deadline=time.monotonic() - 1)
        with (huge_ws / "big.log").open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            assert found.search("big.log", blocks(file.fileno(), size))
        assert found.timed_out and found.truncated
        assert 0 < len(found.matches) < LINES  # the first block's, then it stopped


class TestBoundedMemory:
    def test_a_file_bigger_than_the_workers_address_space(self, tmp_path: Path) -> None:
        """The worker's RLIMIT_AS is 1 GiB + 16 x max_file_bytes: a sparse 2 GiB file
        could not be held by it, yet its windows and a grep of it are served."""
        path = tmp_path / "sparse.log"
        with path.open("wb") as file:
            file.write(b"head line\n" * 1000)
            file.seek(2 * GiB)
            file.write(b"".join(_line(n) for n in range(1, 1001)))
        with Sandbox(tmp_path, limits=Limits(max_file_bytes=LIMIT, timeout_s=60)) as sandbox:
            tail = ok(sandbox, "read_file", path="sparse.log", offset=-2)["result"]
            assert tail["content"] == "line 999 é\nline 1000 é\n"
            middle = ok(sandbox, "read_file", path="sparse.log", byte_offset=GiB,
                        max_bytes=64)["result"]
            assert middle["content"] == "\0" * (64 // 6)  # \u0000: six bytes of JSON
            found = ok(sandbox, "grep", pattern="line 1000 ", path="sparse.log")["result"]
            assert [m["text"] for m in found["matches"]] == ["line 1000 é"]
            assert not found.get("timed_out")


# Patterns the block search must agree on with a search of each line, on text
# built to catch a shortcut: CRLF ends, letters that fold outside ASCII, non-ASCII
# spaces and digits, empty lines, a last line without its end.
_TEXT = (
    "alpha beta\r\nKelvin \u212a and \u017f long s\n\u0130stanbul \u0131i\n\n  indented\tTAB\n"
    "caf\u00e9 na\u00efve \u0663\u0664 digits\nnbsp\u00a0here\nfoo$bar ^caret\nend foo\r\n"
    "x\u2028y\nlast line"
)
_PATTERNS = [
    "beta", "^alpha", "a$", "beta\\s*$", "foo$", "^$", "\\bfoo\\b", "k", "K", "s",
    "[a-z]+", "caf.", "caf.*", "na.ve", "\\d", "\\d+", "\\s", "\\w+", "\\W", "(?i)kelvin",
    "(?s).", "(?:foo|bar)", "(?P<w>f)o", "(?=foo)", "(?<!x)foo", "x*", "\\t", "[\\t-~]+",
    "n\\x62sp", "\\$bar", "\\^c", "a+?", "(?>fo+)o", "fo++", "\\Z", "\\Aend", "[^a]",
    "TAB", ".", "\u017f", "\u0130", "\\u00a0",
]


@pytest.mark.parametrize("ignore_case", [False, True])
@pytest.mark.parametrize("pattern", _PATTERNS)
def test_the_block_search_finds_what_a_line_search_finds(pattern: str, ignore_case: bool) -> None:
    regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    block = _TEXT.encode()
    expected = [
        (index, line.decode().rstrip("\r\n")) for index, line in enumerate(split_lines(block))
        if regex.search(line.decode().rstrip("\r\n"))
    ]
    read = block + b"\nfoo beta alpha, past the block's end"  # what the next block reads
    assert list(LineMatcher(regex).lines(read, len(block))) == expected


def test_the_letters_that_fold_outside_ascii_are_all_named() -> None:
    folds = re.compile("[A-Za-z]", re.IGNORECASE)
    outside = [chr(c) for c in range(0x80, 0x110000) if folds.fullmatch(chr(c))]
    letters = {letter for letter in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
               for char in outside if re.fullmatch(letter, char, re.IGNORECASE)}
    assert letters == set(FOLD_OUTSIDE_ASCII)


def test_windows_and_grep_through_the_mcp_client(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.log").write_bytes(b"".join(_line(n) for n in range(1, LINES + 1)))
    extra = write_config(tmp_path, f"[limits]\nmax_file_bytes = {LIMIT}\n")
    seen: dict[str, dict[str, object]] = {}

    async def body(session: object) -> None:
        call = session.call_tool  # type: ignore[attr-defined]
        seen["tail"] = structured(await call("read_file", {"path": "big.log", "offset": -2}))
        seen["window"] = structured(await call(
            "read_file", {"path": "big.log", "offset": 100_000, "limit": 2}))
        seen["bytes"] = structured(await call(
            "read_file", {"path": "big.log", "byte_offset": 1_000_001, "limit": 2}))
        seen["grep"] = structured(await call(
            "grep", {"pattern": "^line 12345 ", "path": "big.log"}))

    run_session(ws, body, extra=extra)
    assert seen["tail"]["content"] == f"line {LINES - 1} é\nline {LINES} é\n"
    assert seen["tail"]["start_line"] == -2 and "version" not in seen["tail"]
    assert seen["window"]["content"] == "line 100000 é\nline 100001 é\n"
    assert seen["bytes"]["start_line"] is None and seen["bytes"]["start_byte"] == 1_000_001
    assert json.dumps(seen["grep"]["matches"]) == json.dumps(
        [{"path": "big.log", "line": 12345, "text": "line 12345 é"}])


def test_the_host_passes_a_large_window_on_undecoded() -> None:
    """A window's result (start_byte, no version, null line numbers) has the exact
    shape the host passes on as JSON text, as it does a large read of any file."""
    content = "line é\n" * 50_000
    result = {"path": "big.log", "content": content, "encoding": "utf-8",
              "total_lines": None, "start_line": None, "lines_read": 50_000,
              "truncated": True, "next_offset": None, "size": 10**10, "start_byte": 4096,
              "next_byte_offset": 4096 + len(content.encode())}
    payload = json.dumps({"id": 1, "ok": True, "tool": "read_file", "result": result,
                          "text": content, "meta": {"touched": []}}).encode()
    wire = decode_answer(payload, 10_000, raw=True)
    assert jsonfast.is_raw(wire["result"]["content"])
    assert (wire["result"]["start_byte"], wire["result"]["start_line"]) == (4096, None)
