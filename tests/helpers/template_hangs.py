"""Test helper, not production: a zygote entry whose preparation never ends, as a
template stuck in its imports (a hung file system, a machine swapping) would."""

from __future__ import annotations

import time


def prepare() -> None:
    while True:
        time.sleep(60)


def main(fd: int) -> None:
    raise AssertionError("a template that never prepared forks no zygote")
