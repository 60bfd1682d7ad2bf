"""Crash recovery in one entry (history/recover.py): `recover` settles a dead writer's
records, then removes its temp files; a record is settled by its kind, never by a
tool's name; and history raises errors of its own (the caller that reads the
config says a store inside a root as the config error it is)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from corral.api import check_history_path
from corral.config import ConfigError, HistoryOptions
from corral.fs import Root, Roots
from corral.history import recover
from corral.history.location import StoreInsideRoot, check_location
from corral.history.records import CHANGE, PATCH
from corral.policy import Policy
from tests.helpers.history_helpers import left, work_store
from tests.test_history_crash import OLD, _torn_append

HISTORY = Path(__file__).parent.parent / "corral" / "history"


def test_recover_settles_then_removes_the_dead_writers_temps(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "log.txt").write_bytes(OLD)
    work, store = work_store(tmp_path / "store")
    pid = _torn_append(workspace, work, "log.txt")
    for sub in ("a", "b"):
        (workspace / sub).mkdir()
    # beside a path its call named, and one a sweep listed (the settle removes those
    # beside its record's own paths)
    (workspace / "a" / f".corral-tmp-{pid}-{'0' * 16}").write_text("half\n")
    listed = f"b/.corral-tmp-{pid}-{'1' * 16}"
    (workspace / listed).write_text("half\n")
    (workspace / "b" / "plain.txt").write_text("mine\n")  # named, but no temp: left alone
    with Root(str(workspace)) as root:
        done = recover.recover(Roots(root), store, Policy(), 1 << 20, [pid],
                               beside=["a/x.txt"], temps=[(0, listed), (0, "b/plain.txt")])
    assert done == recover.Recovered(settled=1, removed=2)
    assert (workspace / "log.txt").read_bytes() == OLD  # the torn append was cut back first
    assert left(work, ".pending", ".done") == []
    assert sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*")) == [
        "a", "b", "b/plain.txt", "log.txt"]


def test_recover_without_a_store_still_removes_the_temps(tmp_path: Path) -> None:
    (tmp_path / ".corral-tmp-99999-0123456789abcdef").write_text("x")
    with Root(str(tmp_path)) as root:
        done = recover.recover(Roots(root), None, Policy(), 1 << 20, [99999],
                               temps=[(0, ".corral-tmp-99999-0123456789abcdef")])
    assert done == recover.Recovered(settled=0, removed=1) and list(tmp_path.iterdir()) == []


def test_every_record_kind_has_its_settler() -> None:
    assert set(recover.SETTLERS) == {PATCH, CHANGE}


def _names(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        for alias in node.names}


def test_history_branches_on_record_kinds_and_raises_no_config_error() -> None:
    """Only records.py knows which tool writes which kind of record; no module of
    history raises (or imports) config's error."""
    for module in HISTORY.glob("*.py"):
        names = _names(module)
        assert "ConfigError" not in names and "Remedy" not in names, module.name
        if module.name != "records.py":
            assert "PATCH_TOOL" not in names, module.name


def test_a_store_inside_a_root_is_historys_refusal_said_as_a_config_error(
    tmp_path: Path,
) -> None:
    root = str(tmp_path)
    with pytest.raises(StoreInsideRoot) as inside:
        check_location(f"{root}/store", [root])
    assert not isinstance(inside.value, ConfigError)
    with pytest.raises(ConfigError) as refused:
        check_history_path(HistoryOptions(path=f"{root}/store"), [root])
    assert refused.value.key == "[history] path"
    assert refused.value.problem == (  # the words it always said
        f"the history store {root}/store overlaps the root {root}, where tools could reach "
        "it; set [history] path to a directory outside every root, or [history] enabled "
        "= false")
    check_history_path(HistoryOptions(path=f"{root}/store", enabled=False), [root])
