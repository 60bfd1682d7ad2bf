"""JSON-lines audit records, one per call, written by the host.

A record holds only named metadata fields (never file contents: it is never
handed any). A line is printable ASCII without the characters a shell expands
(see SHELL_ESCAPES), so a path chosen by an agent cannot drive a terminal or a
shell that reads the log. The file is opened once, append-only, without following a symlink
and only if it is a regular file; the descriptor is kept, so an agent that
later renames or replaces the path cannot redirect the host's writes.

A failing sink is never silently dropped: opening fails with AuditError when
the Sandbox is built, and a record that cannot be written raises AuditError
from `record` (the api lets it propagate out of `call`: the caller learns that
the call it made went unrecorded).
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

# What a record says of each path a call touched (tools.base.Touched has these fields).
TOUCHED_FIELDS = ("path", "root", "resolved", "decision", "rule")
# Order of the keys in a record; `record` refuses any other field.
FIELDS = (
    "tool", "path", "resolved", "root", "decision", "rule", "ok", "error", "bytes",
    "duration_ms", "touched",
)

# A record is JSON, but logs get pasted into shells, `source`d by mistake, shown by
# `tail` on a terminal. json.dumps with ensure_ascii already writes control and
# non-ASCII characters as \uXXXX; these are the printable ASCII characters a shell
# acts on inside double or single quotes ($ and ` expand, ! recalls history, '
# ends a single-quoted word), plus DEL. They can only occur inside JSON strings,
# where \uXXXX decodes to the same character: a JSON reader sees no difference.
SHELL_ESCAPES = {ord(char): f"\\u{ord(char):04x}" for char in "$`!'\x7f"}


class AuditError(RuntimeError):
    """The audit log cannot be opened or written; names the file and the reason."""


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


class Audit:
    """An append-only JSON-lines file; thread-safe; one `record` call = one line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            # O_NONBLOCK: a FIFO planted at the path must not hang the host.
            fd = os.open(self.path, flags | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            raise AuditError(f"cannot open audit log {self.path}: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise AuditError(f"cannot open audit log {self.path}: not a regular file")
        os.set_blocking(fd, True)
        self._fd: int | None = fd

    def record(self, **fields: Any) -> dict[str, Any]:
        """Write one line and return the record. Fields: tool, ok (required), path,
        resolved, root, decision, rule, error (code), bytes, duration_ms, touched (a
        list of {path, root, resolved, decision, rule}). When path is not given the
        first touched entry fills path/resolved/root/decision/rule."""
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
        if len(touched) > 1:
            record["touched"] = touched
        line = json.dumps(record, separators=(",", ":")).translate(SHELL_ESCAPES)
        self._write((line + "\n").encode("ascii"))
        return record

    def _write(self, line: bytes) -> None:
        with self._lock:
            if self._fd is None:
                raise AuditError(f"audit log {self.path} is closed")
            try:
                written = os.write(self._fd, line)
            except OSError as exc:
                raise AuditError(f"cannot write audit log {self.path}: {exc.strerror}") from None
            if written != len(line):  # O_APPEND: a short write means the disk is full
                raise AuditError(
                    f"cannot write audit log {self.path}: {written} of {len(line)} bytes written"
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
