"""Places in an open file of any size, found in bounded memory: where a line starts
(counted from the start or from the end) and the file's lines in blocks, each read
with os.pread a MiB at a time, so that a file over max_file_bytes can be read in
windows and searched without being held whole."""

from __future__ import annotations

import bisect
import os
from collections import OrderedDict
from collections.abc import Iterator

# A MiB per pread: counting its newlines (bytes.count) takes ~0.4 ms on a 2-core VM,
# reading it ~0.15 ms; a bigger chunk is no faster and a smaller one pays more calls.
SCAN_CHUNK = 1 << 20
TAIL_CHUNK = 64 * 1024  # the first read back from the end: the last 100 lines fit it
LONGEST_BLOCK = 4 * 1024 * 1024  # a line longer than this comes in pieces of it


class Marks:
    """How many lines come before some byte positions of one file, noted by the
    scans that passed them, so that a later read at a line past them (the next page
    of a huge file, by next_offset) scans on from the nearest one instead of from
    the start. One mark per `step` bytes, at most MAX_MARKS: past that, every other
    one goes and the step doubles."""

    def __init__(self) -> None:
        self.marks: list[tuple[int, int]] = [(0, 0)]  # (byte, lines before it)
        self.step = SCAN_CHUNK

    def nearest(self, wanted: int) -> tuple[int, int]:
        """The last mark with fewer than `wanted` lines before it (the wanted-th
        newline lies at or past it), or the file's start."""
        index = bisect.bisect_left(self.marks, wanted, key=lambda mark: mark[1]) - 1
        return self.marks[max(0, index)]

    def note(self, pos: int, counted: int) -> None:
        if pos >= self.marks[-1][0] + self.step:
            self.marks.append((pos, counted))
            if len(self.marks) > MAX_MARKS:
                del self.marks[1::2]
                self.step *= 2


MAX_MARKS = 4096  # 2 GiB at one a MiB; ~300 KiB of tuples
MARKED_FILES = 16
_marked: OrderedDict[tuple[int, ...], Marks] = OrderedDict()


def marks_of(st: os.stat_result) -> Marks:
    """The marks of the file whose fstat is `st`, known by its identity (device,
    inode, size, mtime and ctime, to the nanosecond): a file changed since has
    other marks. The last MARKED_FILES files read are remembered."""
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    marks = _marked.pop(identity, None) or Marks()
    _marked[identity] = marks
    while len(_marked) > MARKED_FILES:
        _marked.popitem(last=False)
    return marks


def line_start(fd: int, size: int, number: int, marks: Marks) -> tuple[int | None, int]:
    """(byte where line `number` (1-based) starts, or None when the file has fewer
    lines; the lines counted meanwhile: the file's line count when None). Lines end
    after each \n; a last line without one counts (as read_file splits them). The
    scan starts at the nearest of `marks` and notes new ones."""
    wanted = number - 1
    pos, counted = marks.nearest(wanted)
    while pos < size:
        marks.note(pos, counted)
        chunk = os.pread(fd, min(SCAN_CHUNK, size - pos), pos)
        if not chunk:  # the file shrank meanwhile
            break
        found = chunk.count(b"\n")
        if counted + found >= wanted:
            at = -1
            for _ in range(wanted - counted):
                at = chunk.find(b"\n", at + 1)
            start = pos + at + 1
            return (start, number - 1) if start < size else (None, number - 1)
        counted += found
        pos += len(chunk)
    total = counted + (1 if pos and _last_byte(fd, pos) != b"\n" else 0)
    return None, total


def tail_start(fd: int, size: int, count: int) -> tuple[int, int | None]:
    """(byte where the `count`-th line from the end starts, and the file's line count
    when the scan went back to its start: the file has at most `count` lines and the
    window starts at line 1; else None)."""
    end = size - 1 if size and _last_byte(fd, size) == b"\n" else size  # the last line's own end
    need, pos, chunk_size = count, end, TAIL_CHUNK
    while pos > 0:
        low = max(0, pos - chunk_size)
        chunk = os.pread(fd, pos - low, low)
        found = chunk.count(b"\n")
        if found >= need:
            at = len(chunk)
            for _ in range(need):
                at = chunk.rfind(b"\n", 0, at)
            return low + at + 1, None
        need -= found
        pos, chunk_size = low, min(chunk_size * 2, SCAN_CHUNK)
    return 0, (count - need + 1 if size else 0)


def newline_within(fd: int, start: int, end: int) -> bool:
    """Whether a line break lies in bytes [start, end) of the file."""
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(SCAN_CHUNK, end - pos), pos)
        if not chunk:
            return False
        if b"\n" in chunk:
            return True
        pos += len(chunk)
    return False


def blocks(fd: int, size: int) -> Iterator[tuple[bytes, int]]:
    """The file's bytes in blocks of whole lines, about a MiB each, as (bytes read,
    where the block ends in them: the rest is read again with the next block, which
    costs less than a copy of the block without it). A block ends after a \n or at
    the end of the file, or, in a line longer than LONGEST_BLOCK, on a character
    start within it (the line then comes in pieces)."""
    pos, want = 0, SCAN_CHUNK
    while pos < size:
        data = os.pread(fd, min(want, size - pos), pos)
        if not data:  # the file shrank meanwhile
            return
        cut = data.rfind(b"\n") + 1
        if not cut and pos + len(data) < size:
            if want < LONGEST_BLOCK:  # a long line: read further until it ends
                want *= 2
                continue
            cut = char_start(data, len(data) - 1) or len(data)
        elif not cut:
            cut = len(data)
        yield data, cut
        pos, want = pos + cut, SCAN_CHUNK


def char_start(data: bytes, at: int) -> int:
    """`at`, moved back to the start of the UTF-8 character it falls in (at most
    three bytes: a longer run of continuation bytes is not UTF-8, and stays)."""
    if at >= len(data):
        return at
    back = at
    while back > 0 and at - back < 3 and data[back] & 0xC0 == 0x80:  # a continuation byte
        back -= 1
    return back if data[back] & 0xC0 != 0x80 else at


def _last_byte(fd: int, end: int) -> bytes:
    return os.pread(fd, 1, end - 1)
