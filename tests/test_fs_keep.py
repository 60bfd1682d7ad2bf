"""Root's history hook: every changing method takes a Keep that defaults to NO_KEEP
(records nothing), so each has one path, whether history is on or off."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from corral.errors import CorralError
from corral.fs import NO_KEEP, Root
from corral.fs import root as root_module
from corral.fs.root import NoKeep

NOT_EMPTY = "already_exists"  # what rmdir of a directory with entries has always said


class Recording(NoKeep):
    """NO_KEEP's behaviour, and the name of every hook a change called."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def writing(self, *args: Any) -> AbstractContextManager[Any]:
        self.calls.append("writing")
        return super().writing(*args)

    def appending(self, *args: Any) -> AbstractContextManager[None]:
        self.calls.append("appending")
        return super().appending(*args)

    def making_dir(self, *args: Any) -> AbstractContextManager[None]:
        self.calls.append("making_dir")
        return super().making_dir(*args)

    def remove(self, *args: Any) -> None:
        self.calls.append("remove")
        super().remove(*args)

    def move(self, *args: Any) -> None:
        self.calls.append("move")
        super().move(*args)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Root]:
    with Root(str(tmp_path)) as opened:
        yield opened


def test_every_change_goes_through_the_keep_it_is_given(root: Root, tmp_path: Path) -> None:
    keep = Recording()
    root.write_atomic("a.txt", b"one\n", keep=keep)
    root.append("a.txt", b"two\n", max_file_bytes=100, keep=keep)  # an existing file
    root.append("b.txt", b"new\n", max_file_bytes=100, keep=keep)  # one it creates
    root.mkdir("d", keep=keep)
    root.rename("a.txt", root, "d/a.txt", keep=keep)
    root.unlink("b.txt", keep=keep)
    root.unlink("d/a.txt", keep=keep)
    root.rmdir("d", keep=keep)
    assert keep.calls == ["writing", "appending", "appending", "making_dir", "move", "remove",
                          "remove", "remove"]
    assert list(tmp_path.iterdir()) == []


def test_without_a_keep_the_same_changes_land(root: Root, tmp_path: Path) -> None:
    root.write_atomic("a.txt", b"one\n")
    root.append("a.txt", b"two\n", max_file_bytes=100)
    root.mkdir("d")
    root.rename("a.txt", root, "d/a.txt")
    assert (tmp_path / "d" / "a.txt").read_bytes() == b"one\ntwo\n"
    with pytest.raises(CorralError, match="non-empty directory") as refused:
        root.rmdir("d")
    assert refused.value.code == NOT_EMPTY
    root.unlink("d/a.txt")
    root.rmdir("d")
    assert list(tmp_path.iterdir()) == []


def test_each_changing_method_has_one_path() -> None:
    """No `keep is None` branch is left in Root, and every hook defaults to NO_KEEP."""
    tree = ast.parse(inspect.getsource(root_module))
    branches = [
        node.lineno for node in ast.walk(tree)
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name)
        and node.left.id == "keep"
    ]
    assert branches == []
    for name, method in inspect.getmembers(Root, inspect.isfunction):
        keep = inspect.signature(method).parameters.get("keep")
        if keep is not None and not name.startswith("_"):
            assert keep.default is NO_KEEP, name
