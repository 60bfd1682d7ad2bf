"""Test helper, not production: a shared pool's zygote whose workers, once
confined, try to open the paths they are sent instead of serving tools, and
answer {path: "ok" | errno name}. It runs the real zygote and worker code up to
serve(): roots from the fds sent over SCM_RIGHTS, then confine()."""

from __future__ import annotations

import errno
import os
from typing import Any

from corral.sandbox import worker, zygote
from corral.sandbox.protocol import read_sole_frame, write_frame

prepare = zygote.prepare  # the template runs it once, as for the real zygote


def _probe(fd: int, setup: Any) -> int:
    request = read_sole_frame(fd, 1 << 20)
    outcome = {}
    for path in (request or {}).get("paths", []):
        try:
            os.close(os.open(path, os.O_RDONLY))
            outcome[path] = "ok"
        except OSError as exc:
            outcome[path] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    write_frame(fd, {"id": 1, "opened": outcome}, 1 << 20)
    return 0


def main(fd: int) -> None:
    worker.serve = _probe  # in this zygote only: the template forked it
    zygote.main(fd)
