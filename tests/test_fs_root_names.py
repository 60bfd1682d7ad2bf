"""Names in the root itself are looked up in the root fd (no openat2, no path
check): the same answers as through a resolved parent, a removed root included."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import CorralError
from corral.fs import Root, syscalls

BIG = 1 << 20


def test_a_root_name_needs_no_openat2(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (workspace / "sub").mkdir()
    with Root(str(workspace), resolver="openat2") as r:

        def refused(*_: object) -> int:
            raise OSError(13, "openat2 called")

        monkeypatch.setattr(syscalls, "openat2", refused)
        seen: list[str] = []
        assert r.read_bytes("hello.txt", max_file_bytes=BIG, guard=seen.append) == (
            b"hello\nworld\n"
        )
        assert r.read_bytes("./hello.txt", max_file_bytes=BIG, guard=seen.append)
        assert seen == ["hello.txt", "hello.txt"]
        with pytest.raises(CorralError):  # below the root, openat2 is still the way
            r.read_bytes("sub/x", max_file_bytes=BIG)


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_removed_root_finds_nothing(tmp_path: Path, resolver: str) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    with Root(str(gone), resolver=resolver) as r:
        gone.rmdir()
        assert r.info("a.txt") is None
        for action in (
            lambda: r.read_bytes("a.txt", max_file_bytes=BIG),
            lambda: r.write_atomic("a.txt", b"x"),
        ):
            with pytest.raises(CorralError) as exc:
                action()
            assert exc.value.code == "not_found"
