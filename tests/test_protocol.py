"""Frames: pure encode/decode and read/write over a real pipe."""

from __future__ import annotations

import contextlib
import os
import socket
import time

import pytest

from corral.sandbox.protocol import (
    HEADER,
    ProtocolError,
    decode,
    encode,
    payload_length,
    read_frame,
    recv_frame_with_fds,
    send_frame_with_fds,
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
    os.set_blocking(read_fd, False)
    with pytest.raises(TimeoutError):
        read_frame(read_fd, LIMIT, deadline=time.monotonic() + 0.01)


def test_deadline_passed_mid_frame_times_out(pipe) -> None:
    read_fd, write_fd = pipe
    os.set_blocking(read_fd, False)
    os.write(write_fd, encode({"id": 1}, LIMIT)[:-2])  # the rest never comes
    with pytest.raises(TimeoutError):
        read_frame(read_fd, LIMIT, deadline=time.monotonic() - 1)


def test_writer_times_out_when_the_reader_never_reads(pipe) -> None:
    _read_fd, write_fd = pipe
    os.set_blocking(write_fd, False)
    with pytest.raises(TimeoutError):
        write_frame(write_fd, {"content": "z" * (1024 * 1024)}, 2 * 1024 * 1024,
                    deadline=time.monotonic() + 0.01)


def test_non_blocking_fd_without_deadline_is_a_usage_error(pipe) -> None:
    read_fd, _write_fd = pipe
    os.set_blocking(read_fd, False)
    with pytest.raises(ProtocolError, match="needs a deadline"):
        read_frame(read_fd, LIMIT)


def test_fds_travel_with_a_frame() -> None:
    left, right = socket.socketpair()
    read_fd, write_fd = os.pipe()
    with left, right:
        send_frame_with_fds(left, {"pid": 42}, [read_fd], LIMIT)
        os.close(read_fd)
        message, fds = recv_frame_with_fds(right, LIMIT, 2)
        assert message == {"pid": 42}
        assert len(fds) == 1
        os.write(write_fd, b"ok")
        assert os.read(fds[0], 2) == b"ok"
        os.close(fds[0])
        os.close(write_fd)
        left.close()
        assert recv_frame_with_fds(right, LIMIT, 2) == (None, [])


def test_too_many_fds_with_a_frame_are_refused_and_closed() -> None:
    left, right = socket.socketpair()
    pipes = [os.pipe() for _ in range(3)]
    with left, right:
        send_frame_with_fds(left, {"pid": 1}, [r for r, _ in pipes], LIMIT)
        with pytest.raises(ProtocolError, match="more than 1 file descriptors"):
            recv_frame_with_fds(right, LIMIT, 1)
    for r, w in pipes:
        os.close(r)
        os.close(w)


def test_deeply_nested_json_is_a_protocol_error_not_a_recursion_error() -> None:
    with pytest.raises(ProtocolError, match="not valid JSON"):
        decode(b'{"a":' * 100_000 + b"1" + b"}" * 100_000)


def test_received_fds_are_close_on_exec() -> None:
    left, right = socket.socketpair()
    read_fd, write_fd = os.pipe()
    os.set_inheritable(read_fd, True)
    with left, right:
        send_frame_with_fds(left, {}, [read_fd], LIMIT)
        _, fds = recv_frame_with_fds(right, LIMIT, 1)
    assert [os.get_inheritable(fd) for fd in fds] == [False]
    for fd in (*fds, read_fd, write_fd):
        os.close(fd)
