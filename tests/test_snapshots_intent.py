"""A whole-workspace rewind's intent (history/intent.py) as the next sandbox reads
it: a dead writer's is finished (rolled forward, or back when the target's
snapshot is gone), a live writer's is left alone, and one that is not a valid
intent of a rewind is refused: logged, removed, the tree untouched."""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import HistoryOptions
from corral.history.intent import intent_name
from corral.history.store import kept_name, new_id
from tests.helpers.history_helpers import snapshot


def _tree(root: Path) -> None:
    for i in range(12):
        folder = root / f"d{i % 3}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"{i}\n" * 50)
    os.symlink("d0/f0.txt", root / "link")


def _others(root: Path, n: int) -> None:
    (root / "d0" / "f3.txt").write_text(f"changed {n}\n")
    (root / "d1" / "f1.txt").unlink()
    (root / f"new{n}").mkdir()
    (root / f"new{n}" / "n.txt").write_text("new\n")
    (root / "link").unlink()


class Rewound:
    """A workspace rewound once: `cp` its checkpoint, `before` the rewind's own
    ("before rewind to cp", whose snapshot holds `changed`), the tree now `at_cp`."""

    def __init__(self, workspace: Path, store: Path) -> None:
        self.workspace, self.options = workspace, HistoryOptions(path=str(store))
        _tree(workspace)
        self.at_cp = snapshot(workspace)
        with Sandbox(workspace, workers=1, history=self.options) as sb:
            self.cp = sb.checkpoint("cp")
            _others(workspace, 0)
            self.changed = snapshot(workspace)
            rewound = sb.rewind(self.cp, force=True)
            assert rewound["ok"] and rewound["result"]["conflicts"] == [], rewound
            self.before = rewound["result"]["checkpoint"]
            self.home = Path(str(sb.history_path))
        assert snapshot(workspace) == self.at_cp
        self.intent = self.home / intent_name(kept_name(os.path.realpath(workspace)))

    def forge(self, **fields: Any) -> None:
        body = {"v": 1, "id": new_id(), "target": self.cp, "before": self.before,
                "force": True, **fields}
        self.intent.write_bytes(json.dumps(body).encode())

    def open(self) -> Sandbox:
        return Sandbox(self.workspace, workers=1, history=self.options)


@pytest.fixture
def rewound(workspace: Path, tmp_path: Path) -> Iterator[Rewound]:
    yield Rewound(workspace, tmp_path / "hist")


def test_a_dead_writers_intent_is_rolled_forward_at_the_next_open(
    rewound: Rewound, caplog: pytest.LogCaptureFixture
) -> None:
    _others(rewound.workspace, 1)  # the tree part-way, as a killed rewind leaves it
    rewound.forge()
    with caplog.at_level(logging.WARNING, logger="corral"), rewound.open() as sb:
        assert snapshot(rewound.workspace) == rewound.at_cp  # before any call
        assert "finishing a rewind" in caplog.text
        assert not rewound.intent.exists()
        assert any(e["tool"] == "rewind" for e in sb.history(limit=1000))


def test_a_live_writers_intent_is_left_alone_until_it_dies(rewound: Rewound) -> None:
    _others(rewound.workspace, 1)
    mixed = snapshot(rewound.workspace)
    rewound.forge()
    fd = os.open(rewound.intent, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as its writer holds it while it rewinds
    try:
        with rewound.open() as sb:
            sb.history()
            assert snapshot(rewound.workspace) == mixed
            assert rewound.intent.exists()
            beside = sb.rewind(rewound.cp, force=True)  # no second rewind alongside
            assert beside["error"]["code"] == "conflict", beside
            assert snapshot(rewound.workspace) == mixed
            os.close(fd)  # its writer dies
            fd = -1
            sb.history()  # the next settle finishes it
            assert snapshot(rewound.workspace) == rewound.at_cp
            assert not rewound.intent.exists()
    finally:
        if fd >= 0:
            os.close(fd)


def test_an_intent_whose_target_snapshot_is_gone_is_rolled_back(rewound: Rewound) -> None:
    """All before instead: the tree its "before" snapshot holds."""
    rewound.forge()
    for manifest in rewound.home.glob(f"**/m-{rewound.cp}.json"):
        # as eviction drops it: kept (n-) as the base of the "before" one's delta
        manifest.rename(manifest.with_name(f"n-{rewound.cp}.json"))
    with rewound.open():
        assert snapshot(rewound.workspace) == rewound.changed
        assert not rewound.intent.exists()


FORGED: dict[str, bytes | dict[str, Any]] = {
    "not json": b"\x00garbage{",
    "not an object": b"[1, 2, 3]",
    "an unknown field": {"extra": 1},
    "a missing field": {"force": None},
    "another version": {"v": 2},
    "an id that is not one": {"target": "../../etc"},
    "ids out of order": {"id": "0" * 26},
    "force not a bool": {"force": "yes"},
    "too big": b'{"v": 1' + b" " * 5000 + b"}",
}


@pytest.mark.parametrize("kind", list(FORGED))
def test_a_forged_intent_is_refused_and_changes_nothing(
    rewound: Rewound, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    _others(rewound.workspace, 1)
    mixed = snapshot(rewound.workspace)
    forged = FORGED[kind]
    if isinstance(forged, bytes):
        rewound.intent.write_bytes(forged)
    else:
        fields = {k: v for k, v in forged.items() if v is not None}
        rewound.forge(**fields)
        if None in forged.values():  # a field left out
            body = json.loads(rewound.intent.read_bytes())
            for key in (k for k, v in forged.items() if v is None):
                del body[key]
            rewound.intent.write_bytes(json.dumps(body).encode())
    _refused(rewound, caplog, mixed)


@pytest.mark.parametrize("kind", ["symlink", "directory", "not a rewind's pair"])
def test_an_intent_that_is_no_rewinds_is_refused(
    rewound: Rewound, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    _others(rewound.workspace, 1)
    mixed = snapshot(rewound.workspace)
    if kind == "symlink":  # to a valid intent elsewhere: never followed
        elsewhere = rewound.home.parent / "elsewhere.json"
        rewound.forge()
        rewound.intent.rename(elsewhere)
        rewound.intent.symlink_to(elsewhere)
    elif kind == "directory":
        rewound.intent.mkdir()
    else:  # real checkpoints, but the "before" is not the rewind's own: the one it rewound to
        with rewound.open() as sb:
            other = sb.checkpoint("other")
        rewound.forge(target=rewound.cp, before=other)
    _refused(rewound, caplog, mixed)


def _refused(rewound: Rewound, caplog: pytest.LogCaptureFixture,
             mixed: dict[str, Any]) -> None:
    with caplog.at_level(logging.WARNING, logger="corral"), rewound.open() as sb:
        assert snapshot(rewound.workspace) == mixed  # nothing of the tree changed
        assert "refused the rewind intent" in caplog.text
        assert not os.path.lexists(rewound.intent)
        again = sb.rewind(rewound.cp, force=True)  # and the store works on
        assert again["ok"] and again["result"]["conflicts"] == [], again
    assert snapshot(rewound.workspace) == rewound.at_cp
