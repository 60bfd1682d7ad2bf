"""Test helper, not production: a zygote entry whose preparation fails, as the
seccomp profile's compilation would on a machine it does not fit."""

from __future__ import annotations


def prepare() -> None:
    raise RuntimeError("the seccomp profile does not compile: no table for this machine")


def main(fd: int) -> None:
    raise AssertionError("a template whose preparation failed forks no zygote")
