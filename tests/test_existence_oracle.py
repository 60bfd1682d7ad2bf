"""A denied name answers path_denied whether it exists or not, however it is
spelled: `.ssh/.`, `.env/x`, `.ssh/..`. Otherwise the difference between
"denied" and "not found" (or "not a directory") tells a model what is there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config import SandboxOptions

SPELLINGS = [
    ".ssh/.", ".ssh/..", ".ssh/x/..", "sub/../.ssh/.", ".ssh/./id", ".ssh//.",
    ".env/x", ".env/.", ".env/..", ".env/x/y", "sub/../.env/x",
    ".aws/credentials/.", ".aws/credentials/x", "deep/er/.ssh/.", "deep/er/.env/x",
]


def calls() -> list[tuple[str, dict[str, Any]]]:
    made: list[tuple[str, dict[str, Any]]] = []
    for path in SPELLINGS:
        made += [(tool, {"path": path}) for tool in ("stat_file", "read_file", "list_directory",
                                                      "create_directory")]
        made += [("search_files", {"pattern": "*", "path": path}),
                 ("grep", {"pattern": "k", "path": path}),
                 ("write_file", {"path": path, "content": "x"}),
                 ("append_file", {"path": path, "content": "x"}),
                 ("edit_file", {"path": path, "old_string": "k", "new_string": "j"}),
                 ("copy_file", {"source": path, "destination": "copy"}),
                 ("copy_file", {"source": "a.txt", "destination": path}),
                 ("move_file", {"source": path, "destination": "moved"}),
                 ("move_file", {"source": "a.txt", "destination": path})]
    return made


def populate(ws: Path, denied_exist: bool) -> None:
    for base in (ws, ws / "deep" / "er"):
        base.mkdir(parents=True, exist_ok=True)
        (base / "sub").mkdir()
        if denied_exist:
            (base / ".ssh").mkdir()
            (base / ".ssh" / "id").write_text("key")
            (base / ".env").write_text("SECRET=1")
            (base / ".aws").mkdir()
            (base / ".aws" / "credentials").write_text("k")
    (ws / "a.txt").write_text("a")


@pytest.fixture(scope="module", params=["openat2", "walk"])
def answers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    both = []
    for denied_exist in (True, False):
        ws = tmp_path_factory.mktemp("exist" if denied_exist else "absent")
        populate(ws, denied_exist)
        options = SandboxOptions(resolver=request.param)
        with Sandbox(ws, options=options) as sb:
            both.append([sb.call(tool, arguments) for tool, arguments in calls()])
    yield both[0], both[1]


@pytest.mark.parametrize("index", range(len(calls())), ids=[
    f"{tool}-{'-'.join(str(v) for v in arguments.values())}" for tool, arguments in calls()
])
def test_one_answer_whether_the_denied_name_exists_or_not(
    answers: tuple[list[dict[str, Any]], list[dict[str, Any]]], index: int
) -> None:
    existing, absent = answers[0][index], answers[1][index]
    assert existing == absent
    assert existing["error"]["code"] == "path_denied", existing
