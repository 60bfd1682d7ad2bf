"""read_sole_frame: one read for a small frame; the same answers as read_frame otherwise."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from corral.sandbox import protocol
from corral.sandbox.protocol import FrameTruncated, ProtocolError, encode, read_sole_frame

LIMIT = 64 * 1024 * 1024


def pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    return ours, theirs


def test_small_frame_in_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    readv = os.readv
    monkeypatch.setattr(protocol.os, "readv", lambda fd, bufs: reads.append(1) or readv(fd, bufs))
    ours, theirs = pair()
    with ours, theirs:
        theirs.sendall(encode({"id": 1, "text": "x" * 4096}, LIMIT))
        assert read_sole_frame(ours.fileno(), LIMIT, time.monotonic() + 5) == {
            "id": 1, "text": "x" * 4096,
        }
    assert len(reads) == 1


def test_large_frame_arriving_in_pieces() -> None:
    message = {"id": 2, "data": "y" * (3 * protocol.SOLE_FIRST_READ)}
    frame = encode(message, LIMIT)
    ours, theirs = pair()

    def dribble() -> None:
        for start in range(0, len(frame), 50_000):
            theirs.sendall(frame[start : start + 50_000])
            time.sleep(0.001)

    with ours, theirs:
        sender = threading.Thread(target=dribble)
        sender.start()
        assert read_sole_frame(ours.fileno(), LIMIT, time.monotonic() + 10) == message
        sender.join()


def test_header_split_across_reads() -> None:
    frame = encode({"id": 3}, LIMIT)
    ours, theirs = pair()
    with ours, theirs:
        theirs.sendall(frame[:2])
        threading.Timer(0.01, lambda: theirs.sendall(frame[2:])).start()
        assert read_sole_frame(ours.fileno(), LIMIT, time.monotonic() + 5) == {"id": 3}


def test_bytes_after_the_frame_are_refused() -> None:
    ours, theirs = pair()
    with ours, theirs:
        theirs.sendall(encode({"id": 4}, LIMIT) + encode({"id": 5}, LIMIT))
        with pytest.raises(ProtocolError, match="came after a frame"):
            read_sole_frame(ours.fileno(), LIMIT, time.monotonic() + 5)


def test_end_of_stream_before_and_inside_a_frame() -> None:
    ours, theirs = pair()
    with ours:
        theirs.close()
        assert read_sole_frame(ours.fileno(), LIMIT, time.monotonic() + 5) is None
    ours, theirs = pair()
    with ours:
        theirs.sendall(encode({"id": 6, "pad": "z" * 100}, LIMIT)[:50])
        theirs.close()
        with pytest.raises(FrameTruncated):
            read_sole_frame(ours.fileno(), LIMIT, time.monotonic() + 5)


def test_oversize_frame_and_deadlines() -> None:
    ours, theirs = pair()
    with ours, theirs:
        with pytest.raises(TimeoutError):  # nothing came
            read_sole_frame(ours.fileno(), LIMIT, time.monotonic() + 0.01)
        theirs.sendall(encode({"id": 7}, LIMIT))
        # an answer already there when the deadline has passed is still an answer
        assert read_sole_frame(ours.fileno(), LIMIT, time.monotonic() - 1) == {"id": 7}
        theirs.sendall(encode({"id": 8, "pad": "w" * 100}, LIMIT))
        with pytest.raises(ProtocolError, match="exceeds the limit"):
            read_sole_frame(ours.fileno(), 50, time.monotonic() + 5)
