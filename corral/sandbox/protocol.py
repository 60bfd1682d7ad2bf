"""Length-prefixed JSON frames between the broker, the zygote and the workers.

A frame is a 4-byte big-endian payload length followed by that many bytes of
JSON text encoding one object. Requests carry an integer "id" that the answer
repeats. Pure encoding and decoding, plus blocking read/write over a raw fd;
every malformed frame raises ProtocolError, never a bare ValueError or OSError
about the data.
"""

from __future__ import annotations

import array
import json
import math
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

from corral import jsonfast

HEADER = struct.Struct(">I")
# Config and control frames between broker and zygote are small; a policy with many rules fits.
CONTROL_FRAME_BYTES = 4 * 1024 * 1024

# The most roots (workspace + allowed paths) one sandbox of a shared pool may have:
# their fds travel with each new worker's setup, and the worker reads at most this many.
MAX_ROOTS = 64

# How a worker's exit code tells the pool why it ended (gunicorn's WORKER_BOOT_ERROR idea).
EXIT_CONFINE_FAILED = 3  # confinement refused: the pool halts instead of respawning
EXIT_ORPHANED = 4  # the zygote died before the worker could ask for its death signal
EXIT_BAD_FRAME = 5  # the broker sent something that is not a frame: stop, never guess
# One read call's size for large payloads: big enough to move MiBs in few syscalls.
READ_CHUNK = 1024 * 1024
# Send buffer of a worker's socket, each end: a 1 MiB read's answer (~2.2 MB of JSON)
# or a 1 MiB write's request goes in one write instead of ~11 turns of ~200 KB, each
# waiting for the other process to be scheduled (milliseconds on a loaded machine).
# The kernel caps it at net.core.wmem_max (4 MiB on some systems, 208 KiB on others).
SOCKET_SEND_BYTES = 4 * 1024 * 1024
# read_sole_frame's first read: a small frame (a stat, a 4 KiB read's answer) comes
# whole, header included, in that one syscall (~5 us each on a VM).
SOLE_FIRST_READ = 64 * 1024
# A poke: the header of an empty frame (no message is empty JSON), which the host
# sends a sleeping worker when a request is on its way, so the worker's wake-up
# overlaps the host's parsing (handles.Worker.wake). One 4-byte write to an idle
# socket: it arrives whole, before the request it announces.
POKE = HEADER.pack(0)
# What read_sole_frame(pokes=True) returns for a read that held only pokes: no
# request yet (compared with `is`).
POKED: dict[str, Any] = {}


class ProtocolError(Exception):
    """A frame that is oversize, truncated, not JSON, or not a JSON object."""


class FrameTooLarge(ProtocolError):
    """A message whose frame would pass the size limit (the message names both sizes)."""


class FrameTruncated(ProtocolError):
    """The stream ended inside a frame: the other end died or closed mid-message."""


def encode(message: dict[str, Any], max_bytes: int, *, finite: bool = False) -> bytes:
    """Header + payload for `message`; ProtocolError if the payload passes max_bytes.
    finite: as jsonfast.dumps (a worker's answers)."""
    try:
        payload = jsonfast.dumps(message, finite=finite)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"message cannot be encoded as JSON: {exc}") from None
    if len(payload) > max_bytes:
        raise FrameTooLarge(f"frame of {len(payload)} bytes exceeds the limit of {max_bytes} bytes")
    return HEADER.pack(len(payload)) + payload


def payload_length(header: bytes | bytearray, max_bytes: int) -> int:
    """The payload length a header announces; ProtocolError if it passes max_bytes."""
    if len(header) != HEADER.size:
        raise ProtocolError(f"frame header is {len(header)} bytes, expected {HEADER.size}")
    (length,) = HEADER.unpack(header)
    if length > max_bytes:
        raise FrameTooLarge(f"frame of {length} bytes exceeds the limit of {max_bytes} bytes")
    return length


def decode(payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The JSON object in a payload; ProtocolError for anything else."""
    message = decode_value(payload)
    if not isinstance(message, dict):
        raise ProtocolError(f"frame holds a JSON {type(message).__name__}, expected an object")
    return message


def decode_value(payload: bytes | bytearray | memoryview) -> Any:
    """The JSON value in a payload (or in part of one); ProtocolError if it is not JSON."""
    try:
        return jsonfast.loads(payload, _std_decode)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"frame is not valid JSON: {exc}") from None


def _std_decode(data: bytes) -> Any:
    """As json.loads decodes bytes, with one decoder for all."""
    return _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))


def _no_constant(name: str) -> float:
    # encode() refuses NaN and the infinities (allow_nan=False); so does decoding, or an
    # answer could carry them on to a face that must emit strict JSON
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{text} overflows a float")
    return number


def widen_socket(sock: socket.socket) -> None:
    """Ask for SOCKET_SEND_BYTES of send buffer (granted up to the system's maximum)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_SEND_BYTES)


def write_frame(
    fd: int, message: dict[str, Any], max_bytes: int, deadline: float | None = None
) -> None:
    """Write one whole frame. Without a deadline the fd may block; with one it
    must be non-blocking, and TimeoutError comes once time.monotonic() passes it."""
    send_bytes(fd, encode(message, max_bytes), deadline)


# json.loads(..., parse_float=...) builds a decoder per call (~2 us of a small frame)
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def send_bytes(fd: int, data: bytes, deadline: float | None = None) -> None:
    """Write all of an encoded frame; blocking and deadline as for write_frame."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            _wait(fd, select.POLLOUT, deadline)


def read_frame(fd: int, max_bytes: int, deadline: float | None = None) -> dict[str, Any] | None:
    """Read one frame. None on EOF before a frame starts; ProtocolError on EOF
    inside a frame. Without a deadline the fd may block; with one it must be
    non-blocking, and TimeoutError comes once time.monotonic() passes it."""
    header = _read_exactly(fd, HEADER.size, deadline, eof_ok=True)
    if header is None:
        return None
    length = payload_length(header, max_bytes)
    payload = _read_exactly(fd, length, deadline, eof_ok=False)
    assert payload is not None
    return decode(payload)


def read_sole_frame(
    fd: int, max_bytes: int, deadline: float | None = None,
    parse: Callable[[bytearray], dict[str, Any]] = decode, *, pokes: bool = False,
) -> dict[str, Any] | None:
    """read_frame for a channel whose peer sends one frame and then waits for an
    answer (a worker and the broker): the first read takes the header and up to
    SOLE_FIRST_READ bytes of payload at once. Bytes past the frame are a
    ProtocolError: the peer sent more than one frame. A deadline is waited on
    before the first read, not after a read that would block. parse(payload): the
    message in the payload (default: decode), ProtocolError if there is none.
    pokes: POKEs before the frame are skipped, and a read of nothing else
    returns POKED (a worker's requests)."""
    if deadline is not None:
        _wait(fd, select.POLLIN, deadline, at_deadline_ok=True)
    buffer = bytearray(HEADER.size + min(max_bytes, SOLE_FIRST_READ))
    while True:
        try:
            count = os.readv(fd, [buffer])
            break
        except BlockingIOError:
            _wait(fd, select.POLLIN, deadline)
    if count == 0:
        return None
    if pokes and buffer[:HEADER.size] == POKE:  # most reads hold a request alone
        count = _skip_pokes(buffer, count)
        if count == 0:
            return POKED
    if count < HEADER.size:
        rest = _read_exactly(fd, HEADER.size - count, deadline, eof_ok=False)
        assert rest is not None
        buffer[count:HEADER.size] = rest
        count = HEADER.size
    length = payload_length(bytes(buffer[: HEADER.size]), max_bytes)
    got = count - HEADER.size
    if got > length:
        raise ProtocolError(f"{got - length} bytes came after a frame of {length} bytes")
    payload = buffer[HEADER.size : count]
    if got < length:
        rest = _read_exactly(fd, length - got, deadline, eof_ok=False)
        assert rest is not None
        payload += rest
    return parse(payload)


def _skip_pokes(buffer: bytearray, count: int) -> int:
    """Drop the POKEs that lead the `count` bytes read into `buffer`; how many are left."""
    start = 0
    while count - start >= HEADER.size and buffer[start:start + HEADER.size] == POKE:
        start += HEADER.size
    del buffer[:start]
    return count - start


def _read_exactly(fd: int, size: int, deadline: float | None, *, eof_ok: bool) -> bytearray | None:
    # The buffer grows (doubling) as bytes arrive rather than to the announced size at
    # once: a peer that announces a frame at the limit and sends nothing costs a MiB.
    buffer = bytearray(min(size, READ_CHUNK))
    got = 0
    while got < size:
        if got == len(buffer):
            buffer.extend(bytes(min(len(buffer), size - got)))
        try:
            with memoryview(buffer) as view:
                count = os.readv(fd, [view[got : got + READ_CHUNK]])
        except BlockingIOError:
            _wait(fd, select.POLLIN, deadline)
            continue
        if count == 0:
            if got == 0 and eof_ok:
                return None
            raise FrameTruncated(f"frame truncated: got {got} of {size} bytes before end of stream")
        got += count
    return buffer


def _wait(fd: int, event: int, deadline: float | None, *, at_deadline_ok: bool = False) -> None:
    """Until `event` on fd, or TimeoutError past the deadline (at_deadline_ok: an fd
    already ready when the deadline has passed is not a timeout)."""
    if deadline is None:
        raise ProtocolError("a non-blocking fd needs a deadline")
    remaining = deadline - time.monotonic()
    poller = select.poll()  # poll, not select: fds above 1023 are fine
    poller.register(fd, event)
    if (remaining <= 0 and not at_deadline_ok) or not poller.poll(max(remaining, 0) * 1000):
        raise TimeoutError("the other end did not answer before the deadline")


def send_frame_with_fds(
    sock: socket.socket, message: dict[str, Any], fds: list[int], max_bytes: int
) -> None:
    """Write one frame over a Unix socket with `fds` attached (SCM_RIGHTS) to its first byte."""
    frame = encode(message, max_bytes)
    sent = socket.send_fds(sock, [frame], fds)
    if sent < len(frame):
        sock.sendall(frame[sent:])


def recv_frame_with_fds(
    sock: socket.socket, max_bytes: int, max_fds: int, deadline: float | None = None
) -> tuple[dict[str, Any] | None, list[int]]:
    """Read one frame and the fds attached to it; (None, []) on EOF before a frame.
    Blocking and deadline as for read_frame."""
    while True:
        try:
            header, fds, flags = _recv_fds(sock, HEADER.size, max_fds)
            break
        except BlockingIOError:
            _wait(sock.fileno(), select.POLLIN, deadline)
    try:
        if flags & socket.MSG_CTRUNC:
            raise ProtocolError(f"more than {max_fds} file descriptors came with a frame")
        if not header:
            return None, fds
        rest = _read_exactly(sock.fileno(), HEADER.size - len(header), deadline, eof_ok=False)
        assert rest is not None
        length = payload_length(bytes(header) + rest, max_bytes)
        payload = _read_exactly(sock.fileno(), length, deadline, eof_ok=False)
        assert payload is not None
        return decode(payload), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _recv_fds(sock: socket.socket, size: int, max_fds: int) -> tuple[bytes, list[int], int]:
    """socket.recv_fds, but close-on-exec (3.11's drops its flags argument): the
    fds must not leak into anything the host runs later."""
    fds = array.array("i")
    data, ancillary, flags, _ = sock.recvmsg(
        size, socket.CMSG_LEN(max_fds * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds), flags


def ask_with_fds(
    sock: socket.socket, message: dict[str, Any], send_fds: Sequence[int], max_fds: int,
    max_bytes: int, deadline: float,
) -> tuple[dict[str, Any] | None, list[int]]:
    """One request over a non-blocking Unix socket (`send_fds` attached to its first
    byte) and its reply frame with up to `max_fds` fds; (None, []) on end of stream."""
    send_bytes_with_fds(sock, encode(message, max_bytes), send_fds, deadline)
    return recv_frame_with_fds(sock, max_bytes, max_fds, deadline)


def send_bytes_with_fds(
    sock: socket.socket, frame: bytes, fds: Sequence[int], deadline: float
) -> None:
    """send_bytes over a non-blocking Unix socket, with `fds` attached to its first byte."""
    if fds:  # the fds ride on the first byte; the rest as any frame
        frame = frame[socket.send_fds(sock, [frame[:1]], list(fds)):]
    send_bytes(sock.fileno(), frame, deadline)
