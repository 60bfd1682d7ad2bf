"""Length-prefixed JSON frames between the broker, the zygote and the workers.

A frame is a 4-byte big-endian payload length followed by that many bytes of
JSON text encoding one object. Requests carry an integer "id" that the answer
repeats. Pure encoding and decoding, plus blocking read/write over a raw fd;
every malformed frame raises ProtocolError, never a bare ValueError or OSError
about the data.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

HEADER = struct.Struct(">I")
# One read call's size for large payloads: big enough to move MiBs in few syscalls.
READ_CHUNK = 1024 * 1024


class ProtocolError(Exception):
    """A frame that is oversize, truncated, not JSON, or not a JSON object."""


def encode(message: dict[str, Any], max_bytes: int) -> bytes:
    """Header + payload for `message`; ProtocolError if the payload passes max_bytes."""
    try:
        payload = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"message cannot be encoded as JSON: {exc}") from None
    if len(payload) > max_bytes:
        raise ProtocolError(f"frame of {len(payload)} bytes exceeds the limit of {max_bytes} bytes")
    return HEADER.pack(len(payload)) + payload


def payload_length(header: bytes, max_bytes: int) -> int:
    """The payload length a header announces; ProtocolError if it passes max_bytes."""
    if len(header) != HEADER.size:
        raise ProtocolError(f"frame header is {len(header)} bytes, expected {HEADER.size}")
    (length,) = HEADER.unpack(header)
    if length > max_bytes:
        raise ProtocolError(f"frame of {length} bytes exceeds the limit of {max_bytes} bytes")
    return length


def decode(payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The JSON object in a payload; ProtocolError for anything else."""
    try:
        message = json.loads(bytes(payload))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"frame is not valid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"frame holds a JSON {type(message).__name__}, expected an object")
    return message


def write_frame(fd: int, message: dict[str, Any], max_bytes: int) -> None:
    """Write one whole frame to a blocking fd."""
    view = memoryview(encode(message, max_bytes))
    while view:
        view = view[os.write(fd, view) :]


def read_frame(fd: int, max_bytes: int, deadline: float | None = None) -> dict[str, Any] | None:
    """Read one frame from a blocking fd. None on EOF before a frame starts;
    ProtocolError on EOF inside a frame; TimeoutError when time.monotonic()
    passes `deadline` while waiting for bytes."""
    header = _read_exactly(fd, HEADER.size, deadline, eof_ok=True)
    if header is None:
        return None
    length = payload_length(header, max_bytes)
    payload = _read_exactly(fd, length, deadline, eof_ok=False)
    assert payload is not None
    return decode(payload)


def _read_exactly(fd: int, size: int, deadline: float | None, *, eof_ok: bool) -> bytearray | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        if deadline is not None:
            _wait_readable(fd, deadline)
        count = os.readv(fd, [view[got : got + READ_CHUNK]])
        if count == 0:
            if got == 0 and eof_ok:
                return None
            raise ProtocolError(f"frame truncated: got {got} of {size} bytes before end of stream")
        got += count
    return buffer


def _wait_readable(fd: int, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    poller = select.poll()  # poll, not select: fds above 1023 are fine
    poller.register(fd, select.POLLIN)
    if remaining <= 0 or not poller.poll(remaining * 1000):
        raise TimeoutError("no frame before the deadline")
