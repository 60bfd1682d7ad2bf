"""JSON-lines audit records, one per call, written by the host, chained.

A record holds only named metadata fields (never file contents: it is never
handed any). A line is printable ASCII without the characters a shell expands
(see SHELL_ESCAPES), so a path chosen by an agent cannot drive a terminal or a
shell that reads the log. The file is opened append-only, without following a
symlink and only if it is a regular file; the descriptor is kept, so an agent
that renames or replaces the path cannot redirect the host's writes (only a
rotation, which leaves the file at the next rotated name, makes the host open
the path again).

Tamper evidence: each record ends with `prev`, the digest of the line before it
("sha256:<hex>", or "hmac-sha256:<hex>" under a key only the host reads); the
first record of a chain has the digest of the empty line. A writer holds an
flock on the file while it reads the last line and appends, so writers in any
number of threads and processes keep one chain. A line left half-written by a
crash is closed by the next writer, whose record names it (`torn`) and chains
from the last whole line; a tail that starts with a whole JSON value was not cut
short by a crash (no prefix of a record holds one), and no writer vouches for it. Rotation
(`max_bytes`) renames the file to the next free `PATH.N` (1, 2, ...: oldest
first); the new file's first record chains from the last line of the newest
`PATH.N`. audit_verify.py checks all of this.

A failing sink is never silently dropped: opening fails with AuditError when
the Sandbox is built, and a record that cannot be written raises AuditError
from `record` (the api lets it propagate out of `call`: the caller learns that
the call it made went unrecorded).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

# What a record says of each path a call touched (calls.messages.Touched has these fields).
TOUCHED_FIELDS = ("path", "root", "resolved", "decision", "rule")
# Order of the keys in a record; `record` refuses any other field. The writer adds
# `torn` (when it found a half-written line) and `prev` last.
FIELDS = (
    "tool", "path", "resolved", "root", "decision", "rule", "ok", "error", "bytes",
    "duration_ms", "approval", "grant", "touched",
)

# A record is JSON, but logs get pasted into shells, `source`d by mistake, shown by
# `tail` on a terminal. json.dumps with ensure_ascii already writes control and
# non-ASCII characters as \uXXXX; these are the printable ASCII characters a shell
# acts on inside double or single quotes ($ and ` expand, ! recalls history, '
# ends a single-quoted word), plus DEL. They can only occur inside JSON strings,
# where \uXXXX decodes to the same character: a JSON reader sees no difference.
SHELL_ESCAPES = {ord(char): f"\\u{ord(char):04x}" for char in "$`!'\x7f"}

MIN_KEY_BYTES = 16
MAX_KEY_BYTES = 4096
# How long a writer waits for another process's flock before it reports the log
# unusable: a process that holds it forever (a hung writer, or a worker that can
# open the log because it lies inside a root) must not hang every call.
LOCK_WAIT_S = 10.0
TAIL_CHUNK = 64 * 1024
# The longest last line a writer reads back. corral's records are far shorter; a
# longer tail was put there by something else (a process that can write the file),
# and reading it whole at each record would let that make every call slow.
MAX_LINE_BYTES = 16 * 1024 * 1024


class AuditError(RuntimeError):
    """The audit log cannot be opened or written; names the file and the reason."""


class LineTooLong(Exception):
    """The end of a log has a line longer than MAX_LINE_BYTES."""


class Chain:
    """The digest `prev` holds: SHA-256 of a line, or HMAC-SHA256 under a key."""

    def __init__(self, key: bytes | None = None) -> None:
        # here, not at the top: hashlib loads OpenSSL (~3 ms of CPU, a third of a bare
        # interpreter's start), which a sandbox that keeps no audit log never needs
        import hashlib
        import hmac

        self._sha256 = hashlib.sha256
        self._hmac = hmac.new
        self._key = key
        self.scheme = "hmac-sha256" if key is not None else "sha256"
        self.genesis = self.digest(b"")  # prev of a chain's first record

    def sha256(self, data: bytes) -> str:
        return self._sha256(data).hexdigest()

    def digest(self, line: bytes) -> str:
        """`line` without its newline."""
        if self._key is None:
            return "sha256:" + self._sha256(line).hexdigest()
        return "hmac-sha256:" + self._hmac(self._key, line, self._sha256).hexdigest()


def read_key(path: str | os.PathLike[str]) -> bytes:
    """The key file's bytes. It must be a regular file (not a symlink) owned by this
    user and readable by no one else: a key others read proves nothing."""
    where = os.fspath(path)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise AuditError(f"cannot open audit key file {where}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AuditError(f"audit key file {where}: not a regular file")
        if info.st_mode & 0o077:
            raise AuditError(f"audit key file {where}: readable by group or others "
                             f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it")
        if info.st_uid != os.geteuid():
            raise AuditError(f"audit key file {where}: owned by uid {info.st_uid}, "
                             f"not this user ({os.geteuid()})")
        key = os.read(fd, MAX_KEY_BYTES + 1)
    finally:
        os.close(fd)
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise AuditError(f"audit key file {where}: {len(key)} bytes; a key has "
                         f"{MIN_KEY_BYTES} to {MAX_KEY_BYTES} (e.g. head -c 32 /dev/urandom)")
    return key


def rotated(path: str) -> list[str]:
    """The rotated files of the log at `path`, oldest first: PATH.1, PATH.2, ..."""
    folder, name = os.path.split(path)
    pattern = re.compile(re.escape(name) + r"\.([1-9][0-9]*)")
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    numbered = [(int(m.group(1)), n) for n in names if (m := pattern.fullmatch(n))]
    return [os.path.join(folder, n) for _, n in sorted(numbered)]


def last_line(fd: int, size: int) -> tuple[bytes | None, bytes]:
    """(the last whole line without its newline, or None when there is none; the
    bytes after the last newline: a line a crash left half-written, or b"")."""
    end, chunk = size, b""
    while end > 0:
        if len(chunk) > MAX_LINE_BYTES:
            raise LineTooLong(len(chunk))
        start = max(0, end - TAIL_CHUNK)
        chunk = os.pread(fd, end - start, start) + chunk
        end = start
        cut = chunk.rfind(b"\n")
        if cut < 0:
            continue
        torn = chunk[cut + 1:]
        before = chunk.rfind(b"\n", 0, cut)
        while before < 0 and end > 0:  # the last whole line starts in an earlier chunk
            if len(chunk) > MAX_LINE_BYTES:
                raise LineTooLong(len(chunk))
            start = max(0, end - TAIL_CHUNK)
            grown = os.pread(fd, end - start, start)
            chunk, cut, end = grown + chunk, cut + len(grown), start
            before = chunk.rfind(b"\n", 0, cut)
        return chunk[before + 1:cut], torn
    return None, chunk


def holds_json(data: bytes) -> bool:
    """Whether `data` is, or starts with, a whole JSON value (after any white space):
    never the start of a record cut short, whose object closes only at its end."""
    try:
        json.loads(data)
        return True
    except (ValueError, RecursionError):  # RecursionError: nested too deep to read
        pass
    text = data.decode("utf-8", "surrogateescape").lstrip(" \t\r\n")
    try:
        json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return False
    return True


def _scalar(value: Any, name: str) -> Any:
    if value is not None and not isinstance(value, str | int | float | bool):
        raise TypeError(f"audit field {name} must be a scalar, not {type(value).__name__}")
    return value


def _touched(entries: Iterable[Any]) -> list[dict[str, Any]]:
    """Only the known keys of each touched path (dicts or objects with attributes)."""
    out = []
    for entry in entries:
        get = entry.get if isinstance(entry, Mapping) else lambda k, e=entry: getattr(e, k, None)
        out.append({k: _scalar(get(k), f"touched.{k}") for k in TOUCHED_FIELDS})
    return out


# One lock per log file in this process: every Audit of one file (one per sandbox)
# takes it before the flock, which orders processes but not two fds of one process.
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _process_lock(path: str) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(os.path.realpath(path), threading.Lock())


def _open_log(path: str) -> int:
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the host.
        fd = os.open(path, flags | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        raise AuditError(f"cannot open audit log {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise AuditError(f"cannot open audit log {path}: not a regular file")
    os.set_blocking(fd, True)
    return fd


class Audit:
    """An append-only, chained JSON-lines file; thread- and process-safe; one
    `record` call = one line."""

    def __init__(
        self, path: str | os.PathLike[str], *, key_file: str | os.PathLike[str] | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.path = os.fspath(path)
        if max_bytes is not None and (isinstance(max_bytes, bool) or max_bytes < 1):
            raise ValueError(f"Audit max_bytes must be a positive integer, not {max_bytes!r}")
        self.max_bytes = max_bytes
        self.key_file = os.path.realpath(key_file) if key_file is not None else None
        self.chain = Chain(read_key(key_file) if key_file is not None else None)
        self._lock = _process_lock(self.path)
        self._fd: int | None = _open_log(self.path)
        # (file size, digest of its last line) after this writer's last record: while
        # the size is unchanged no one else wrote, and the tail need not be read again.
        self._known: tuple[int, str] | None = None

    def record(self, **fields: Any) -> dict[str, Any]:
        """Write one line and return the record. Fields: tool, ok (required), path,
        resolved, root, decision, rule, error (code), bytes, duration_ms, approval (an
        approval decision: "once", "path", "rule" or "denied"), grant (remembered
        approvals, comma-separated ids: the ones a call went through by, or the ones
        an approval made), touched (a list of {path, root, resolved, decision,
        rule}). When path is not given the first touched entry fills
        path/resolved/root/decision/rule; touched is written when it names more than
        that path."""
        unknown = set(fields) - set(FIELDS)
        if unknown:
            raise TypeError(f"unknown audit fields: {', '.join(sorted(unknown))}")
        if "tool" not in fields or "ok" not in fields:
            raise TypeError("an audit record needs at least tool and ok")
        touched = _touched(fields.pop("touched", None) or ())
        if touched and fields.get("path") is None:
            fields = {**touched[0], **{k: v for k, v in fields.items() if v is not None}}
        record: dict[str, Any] = {"time": _now()}
        for name in FIELDS[:-1]:
            record[name] = _scalar(fields.get(name), name)
        # one entry that is not the record's own path (an undo that left another
        # path alone) is news too: only a lone entry the record's fields repeat is not
        if len(touched) > 1 or (touched and touched[0]["path"] != record["path"]):
            record["touched"] = touched
        body = json.dumps(record, separators=(",", ":")).translate(SHELL_ESCAPES)
        record.update(self._append(body[:-1]))  # the chain's fields close the object
        return record

    def _append(self, body: str) -> dict[str, Any]:
        """Under the locks: find the line to chain from, rotate if due, write."""
        with self._lock:
            if self._fd is None:
                raise AuditError(f"audit log {self.path} is closed")
            fd = self._locked()
            try:
                size = os.fstat(fd).st_size
                prev, torn = self._read_tail(fd, size)
                # A torn line is closed in its own file first: a rotated file ends whole.
                # the line: body, ',"prev":"', a digest, '"}' and a newline
                length = len(body) + len(self.chain.genesis) + 12
                if self.max_bytes is not None and not torn and size > 0 and (
                        size + length > self.max_bytes):
                    fd = self._rotate(fd)
                    size = os.fstat(fd).st_size
                    prev, torn = self._read_tail(fd, size)
                added: dict[str, Any] = {}
                if torn:  # closed by a newline of its own, named by this record
                    added["torn"] = {"bytes": len(torn),
                                     "sha256": self.chain.sha256(torn)}
                added["prev"] = prev
                line = (body + "," + json.dumps(added, separators=(",", ":"))[1:]).encode(
                    "ascii")
                data = (b"\n" if torn else b"") + line + b"\n"
                self._write(fd, data)
                self._known = (size + len(data), self.chain.digest(line))
                return added
            finally:
                with contextlib.suppress(OSError):  # a failed rotation closed it already
                    fcntl.flock(fd, fcntl.LOCK_UN)

    def _locked(self) -> int:
        """The log's fd, flocked; the path opened again if another writer rotated it."""
        while True:
            assert self._fd is not None
            fd = self._fd
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise AuditError(f"cannot write audit log {self.path}: another process "
                                         f"has held its lock for {LOCK_WAIT_S:g} s") from None
                    time.sleep(0.001)
            if not self._rotated_away(fd):
                return fd
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._reopen()

    def _rotated_away(self, fd: int) -> bool:
        """Whether another writer rotated this file: it now lies at a PATH.N (any N:
        the file may have rotated again while this writer waited for its lock)."""
        mine = os.fstat(fd)
        try:
            there = os.stat(self.path, follow_symlinks=False)
            if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                return False
        except FileNotFoundError:
            pass
        for name in reversed(rotated(self.path)):
            with contextlib.suppress(FileNotFoundError):
                other = os.stat(name, follow_symlinks=False)
                if (other.st_dev, other.st_ino) == (mine.st_dev, mine.st_ino):
                    return True
        return False

    def _reopen(self) -> None:
        assert self._fd is not None
        fd = _open_log(self.path)
        os.close(self._fd)
        self._fd, self._known = fd, None

    def _rotate(self, fd: int) -> int:
        """Rename the log to the next PATH.N and go on in a new file, flocked."""
        names = rotated(self.path)
        number = int(names[-1].rsplit(".", 1)[1]) + 1 if names else 1
        try:
            os.rename(self.path, f"{self.path}.{number}")
        except OSError as exc:
            raise AuditError(f"cannot rotate audit log {self.path}: {exc.strerror}") from None
        fcntl.flock(fd, fcntl.LOCK_UN)
        self._reopen()
        return self._locked()

    def _read_tail(self, fd: int, size: int) -> tuple[str, bytes]:
        try:  # read and write: the chain needs the last line
            prev, torn = self._tail(fd, size)
        except OSError as exc:
            raise AuditError(f"cannot read audit log {self.path}: {exc.strerror}") from None
        except LineTooLong as exc:
            raise AuditError(f"cannot write audit log {self.path}: its last line is over "
                             f"{exc.args[0]} bytes, not a record corral wrote; move the file "
                             "aside and check it with corral audit verify") from None
        if torn and holds_json(torn):
            # A record is written in one write with its newline, and no part of one short
            # of its end is JSON: this was appended whole by something else. Naming it
            # as torn would vouch for it under the key.
            raise AuditError(f"cannot write audit log {self.path}: it ends in {len(torn)} "
                             "bytes that hold JSON without a newline, not a line a crash cut "
                             "short (something else appended them); move the file aside and "
                             "check it with corral audit verify")
        return prev, torn

    def _tail(self, fd: int, size: int) -> tuple[str, bytes]:
        """(prev for the next record, a half-written line at the end or b"")."""
        if self._known is not None and self._known[0] == size:
            return self._known[1], b""
        line, torn = last_line(fd, size)
        if line is not None:
            return self.chain.digest(line), torn
        return self._continued(), torn  # no whole line in this file

    def _continued(self) -> str:
        """prev of a file's first record: the newest rotated file's last line, else the
        start of a chain."""
        names = rotated(self.path)
        if not names:
            return self.chain.genesis
        try:
            fd = os.open(names[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            raise AuditError(f"cannot read rotated audit log {names[-1]}: {exc.strerror}"
                             ) from None
        try:
            line, _ = last_line(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        return self.chain.digest(line) if line is not None else self.chain.genesis

    def _write(self, fd: int, data: bytes) -> None:
        try:
            written = os.write(fd, data)
        except OSError as exc:
            raise AuditError(f"cannot write audit log {self.path}: {exc.strerror}") from None
        if written != len(data):  # O_APPEND: a short write means the disk is full
            raise AuditError(
                f"cannot write audit log {self.path}: {written} of {len(data)} bytes written"
            )

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> Audit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _now() -> str:
    """UTC, ISO 8601 with milliseconds: sortable and unambiguous across hosts."""
    return datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")
