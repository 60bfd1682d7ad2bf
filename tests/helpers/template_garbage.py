"""Test helper, not production: a zygote entry whose preparation writes garbage on
every socket it holds (its channel with the host) before the host's request."""

from __future__ import annotations

import os


def prepare() -> None:
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                os.write(int(name), b"\xff" * 64 + b"not a frame\n")
        except OSError:
            continue


def main(fd: int) -> None:
    """A zygote forked for the request the host sent before it read the garbage: it
    exits (the host has closed its end)."""
