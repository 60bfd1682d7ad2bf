"""The server's log lines on stderr: `corral serve --log-format text|json`.

text (the default): each line as it always was, the message alone ("corral:
worker 4121 running read_file was killed by SIGSYS: ..."). json: one JSON object
a line, {"ts", "level", "logger", "msg"} and the record's structured fields
(`extra=`: pid, tool, url, ...), and "exc" with a traceback; for a log shipper.
Both cover corral's own loggers ("corral", "corral.workers", "corral.serve":
warnings and errors, and the server's few lines saying where it listens); with
--http, json covers uvicorn's too (text leaves uvicorn's own format as it is).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

# The server's own lines (where it listens, what it could not do): shown at INFO,
# while the rest of corral's loggers show warnings and errors only.
log = logging.getLogger("corral.serve")
PREFIX = "corral: "  # text lines say whose they are; a JSON line says it in "logger"
# What every LogRecord has: anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in it escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage().removeprefix(PREFIX),
        }
        line.update((key, value) for key, value in vars(record).items()
                    if key not in _STANDARD and key not in line)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class _Stderr(logging.StreamHandler[Any]):
    """Writes to sys.stderr as it is when the record comes, as logging.lastResort
    does: a handler bound to the stream of its day would write to a closed one
    once that is replaced (a test's capture, a host that redirects stderr)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


@contextlib.contextmanager
def configured(log_format: str) -> Iterator[None]:
    """Log records go to stderr in `log_format` ("text" or "json") until the block
    ends (a server's life; a test's in-process command leaves nothing behind)."""
    root = logging.getLogger()
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if log_format == "json"
                         else logging.Formatter("%(message)s"))
    root.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.setLevel(level)
        root.removeHandler(handler)
