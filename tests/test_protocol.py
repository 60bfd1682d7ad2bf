"""Frames: pure encode/decode and read/write over a real pipe."""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from corral.sandbox.protocol import (
    HEADER,
    ProtocolError,
    decode,
    encode,
    payload_length,
    read_frame,
    write_frame,
)

LIMIT = 1024


def test_round_trip_keeps_the_object() -> None:
    message = {"id": 7, "tool": "read_file", "arguments": {"path": "a\u00e9\udcff.txt"}}
    frame = encode(message, LIMIT)
    assert payload_length(frame[: HEADER.size], LIMIT) == len(frame) - HEADER.size
    assert decode(frame[HEADER.size :]) == message


def test_encode_refuses_an_oversize_payload_naming_both_sizes() -> None:
    with pytest.raises(ProtocolError, match=r"frame of \d+ bytes exceeds the limit of 16 bytes"):
        encode({"content": "x" * 100}, 16)


def test_encode_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(ProtocolError, match="cannot be encoded"):
        encode({"value": float("nan")}, LIMIT)
    with pytest.raises(ProtocolError, match="cannot be encoded"):
        encode({"value": object()}, LIMIT)


def test_header_announcing_too_much_is_refused_before_reading_it() -> None:
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        payload_length(HEADER.pack(LIMIT + 1), LIMIT)
    with pytest.raises(ProtocolError, match="header is 2 bytes"):
        payload_length(b"\x00\x01", LIMIT)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "JSON list, expected an object"),
        (b'"text"', "JSON str, expected an object"),
    ],
)
def test_decode_refuses_non_objects(payload: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode(payload)


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_frames_cross_a_pipe_in_order(pipe) -> None:
    read_fd, write_fd = pipe
    write_frame(write_fd, {"id": 1}, LIMIT)
    write_frame(write_fd, {"id": 2, "text": "two"}, LIMIT)
    os.close(write_fd)
    assert read_frame(read_fd, LIMIT) == {"id": 1}
    assert read_frame(read_fd, LIMIT) == {"id": 2, "text": "two"}
    assert read_frame(read_fd, LIMIT) is None


def test_large_frame_crosses_a_pipe_whole(pipe) -> None:
    read_fd, write_fd = pipe
    big = {"content": "y" * (3 * 1024 * 1024)}
    pid = os.fork()
    if pid == 0:
        try:
            write_frame(write_fd, big, 4 * 1024 * 1024)
        finally:
            os._exit(0)
    os.close(write_fd)
    assert read_frame(read_fd, 4 * 1024 * 1024) == big
    os.waitpid(pid, 0)


def test_end_of_stream_inside_a_frame_is_truncation(pipe) -> None:
    read_fd, write_fd = pipe
    frame = encode({"id": 1, "text": "cut short"}, LIMIT)
    os.write(write_fd, frame[:-3])
    os.close(write_fd)
    with pytest.raises(ProtocolError, match="truncated"):
        read_frame(read_fd, LIMIT)


def test_end_of_stream_inside_a_header_is_truncation(pipe) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, b"\x00\x00")
    os.close(write_fd)
    with pytest.raises(ProtocolError, match="truncated"):
        read_frame(read_fd, LIMIT)


def test_oversize_frame_on_the_wire_is_refused(pipe) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, HEADER.pack(LIMIT * 10) + b"{}")
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        read_frame(read_fd, LIMIT)


def test_non_object_frame_on_the_wire_is_refused(pipe) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, HEADER.pack(2) + b"[]")
    with pytest.raises(ProtocolError, match="expected an object"):
        read_frame(read_fd, LIMIT)


def test_deadline_without_bytes_times_out(pipe) -> None:
    read_fd, _write_fd = pipe
    with pytest.raises(TimeoutError):
        read_frame(read_fd, LIMIT, deadline=time.monotonic() + 0.01)


def test_deadline_already_passed_times_out_even_with_bytes_waiting(pipe) -> None:
    read_fd, write_fd = pipe
    write_frame(write_fd, {"id": 1}, LIMIT)
    with pytest.raises(TimeoutError):
        read_frame(read_fd, LIMIT, deadline=time.monotonic() - 1)
    assert read_frame(read_fd, LIMIT, deadline=time.monotonic() + 5) == {"id": 1}
