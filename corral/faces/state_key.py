"""`corral serve --http ... --state-key-file PATH`: the key that seals `requestState`.

A 2026-07-28 call that asks its client something (an approval, the client's
roots) ends its round with a sealed `requestState`, and the retry brings it back
(mcp_state.RequestState). Without this option the key is made when the process
starts, so a retry that reaches another replica behind the same gateway, or the
same server after a restart, is refused. With it, every process given the file
seals and opens the same states.

The file is a secret: whoever holds it can forge a state, and so claim that a
person approved a call. It must be a regular file readable by the server's
account only (no group or other permission bits), holding at least 32 bytes
(surrounding whitespace is ignored), e.g. `head -c 32 /dev/urandom | base64`.
"""

from __future__ import annotations

import os
import stat

from corral.config import ConfigError

MIN_BYTES = 32
MAX_BYTES = 4096  # a key, not a file to read whole whatever it is


def load_state_key(path: str) -> bytes:
    """The key in `path`; ConfigError naming the file if it is not fit to be one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot read the state key file: {exc.strerror or exc}",
                          file=path) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("the state key file is not a regular file", file=path)
        if info.st_mode & 0o077:
            raise ConfigError(
                f"the state key file may be read by others (mode {stat.S_IMODE(info.st_mode):o}); "
                "it must be readable by the server's account only: chmod 600 it", file=path)
        key = os.read(fd, MAX_BYTES + 1).strip()
    finally:
        os.close(fd)
    if not MIN_BYTES <= len(key) <= MAX_BYTES:
        raise ConfigError(
            f"the state key file holds {len(key)} bytes; it needs {MIN_BYTES} to {MAX_BYTES}, "
            "e.g. head -c 32 /dev/urandom | base64", file=path)
    return key
