"""Approvals are asked about the file a call will really touch: the path as the
worker resolved it (root-relative, with its root), after symlinks and `..`,
not the path as typed; control characters escaped; and a path that resolves
differently by the time the call runs is asked about again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.faces.mcp_render import approval_message
from corral.policy import Policy, Rule

SUPERVISED_WRITE = Policy(tool_modes={"write_file": "supervised"})
SUPERVISED_RULE = Policy(rules=(Rule("review", "supervised", ("*",), ("deploy/**",)),))


@pytest.fixture
def linked_ws(tmp_path: Path) -> Path:
    linked_ws = tmp_path / "ws"
    (linked_ws / "deploy" / "prod" / "templates").mkdir(parents=True)
    (linked_ws / "tpl").symlink_to("deploy/prod/templates")
    return linked_ws


class Asker:
    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> bool:
        self.asked.append(request)
        return self.answers.pop(0)


@pytest.mark.parametrize("policy", [SUPERVISED_WRITE, SUPERVISED_RULE], ids=["tool", "rule"])
def test_the_request_names_the_resolved_file(linked_ws: Path, policy: Policy) -> None:
    asker = Asker(True)
    with Sandbox(linked_ws, policy=policy, approve=asker) as sb:
        result = sb.call("write_file", {"path": "tpl/../deploy.yml", "content": "x"})
    assert result["ok"], result
    assert (linked_ws / "deploy" / "prod" / "deploy.yml").read_text() == "x"
    assert not (linked_ws / "deploy.yml").exists()
    (request,) = asker.asked
    (target,) = request["targets"]
    assert target["root"] == str(linked_ws) and target["path"] == "deploy/prod/deploy.yml"
    assert target["given"] == "tpl/../deploy.yml"
    assert target["shown"] == "deploy/prod/deploy.yml (given as tpl/../deploy.yml)"
    assert request["paths"] == ["tpl/../deploy.yml"]
    assert request["resolved"] == [str(linked_ws / "deploy" / "prod" / "deploy.yml")]
    assert request["rules"] == ([None] if policy is SUPERVISED_WRITE else ["review"])
    message = approval_message(request)
    assert "deploy/prod/deploy.yml" in message and "tpl/../deploy.yml" in message


def test_a_refused_tool_mode_approval_changes_nothing(linked_ws: Path) -> None:
    asker = Asker(False)
    with Sandbox(linked_ws, policy=SUPERVISED_WRITE, approve=asker) as sb:
        result = sb.call("write_file", {"path": "tpl/../deploy.yml", "content": "x"})
    assert result["error"]["code"] == "approval_denied"
    assert "deploy/prod/deploy.yml" in result["error"]["message"]
    assert not (linked_ws / "deploy" / "prod" / "deploy.yml").exists()


def test_control_characters_are_escaped_everywhere_a_person_reads(linked_ws: Path) -> None:
    name = "deploy/evil\x1b[2J\nname\u202e.yml"
    (linked_ws / name).write_text("old")
    asker = Asker(True)
    with Sandbox(linked_ws, policy=SUPERVISED_RULE, approve=asker) as sb:
        assert sb.call("read_file", {"path": name})["ok"]
    (request,) = asker.asked
    shown = "deploy/evil\\x1b[2J\\nname\\u202e.yml"
    assert request["targets"][0]["path"] == shown and request["paths"] == [shown]
    assert request["resolved"] == [f"{linked_ws}/{shown}"]
    message = approval_message(request)
    assert shown in message
    assert message.isprintable()


def test_a_path_that_resolves_elsewhere_by_the_time_it_runs_is_asked_again(linked_ws: Path) -> None:
    """The host approved deploy/prod/deploy.yml; the link then moved to deploy/other:
    the worker re-resolves, finds an unapproved file and asks about that one."""
    (linked_ws / "deploy" / "other" / "templates").mkdir(parents=True)

    def swap_then_answer(request: dict[str, Any]) -> bool:
        asker.asked.append(request)
        if len(asker.asked) == 1:
            os.remove(linked_ws / "tpl")
            (linked_ws / "tpl").symlink_to("deploy/other/templates")
            return True
        return False

    asker = Asker()
    with Sandbox(linked_ws, policy=SUPERVISED_WRITE, approve=swap_then_answer) as sb:
        result = sb.call("write_file", {"path": "tpl/../deploy.yml", "content": "x"})
    assert [r["targets"][0]["path"] for r in asker.asked] == [
        "deploy/prod/deploy.yml", "deploy/other/deploy.yml"
    ]
    assert result["error"]["code"] == "approval_denied"
    assert not (linked_ws / "deploy" / "other" / "deploy.yml").exists()
    assert not (linked_ws / "deploy" / "prod" / "deploy.yml").exists()


def test_a_file_in_another_root_is_shown_absolute(linked_ws: Path, tmp_path: Path) -> None:
    from corral.policy import RootSpec

    data = tmp_path / "data"
    data.mkdir()
    asker = Asker(True)
    with Sandbox(linked_ws, policy=SUPERVISED_WRITE, approve=asker,
                 allowed_paths=[RootSpec(str(data), "rw")]) as sb:
        assert sb.call("write_file", {"path": f"{data}/n.txt", "content": "x"})["ok"]
    (target,) = asker.asked[0]["targets"]
    assert (target["root"], target["path"], target["shown"]) == (
        str(data), "n.txt", f"{data}/n.txt"
    )


def test_a_name_or_content_cannot_forge_lines_of_the_diff_a_person_reads(linked_ws: Path) -> None:
    """Only the diff's own line breaks break it: a newline in the file's name (its
    header) or a lone CR, U+2028 or U+0085 in its content shows escaped."""
    name = "deploy/a.yml\n-password: kept\n+++ b/other.yml"
    asker = Asker(True)
    with Sandbox(linked_ws, policy=SUPERVISED_RULE, approve=asker) as sb:
        content = "safe\r-deleted\u2028 context\x85+added\n"
        assert sb.call("write_file", {"path": name, "content": content})["ok"]
    (request,) = asker.asked
    lines = request["diff"].split("\n")
    assert len(lines) == 4, lines  # ---, +++, @@, and the one line added
    assert lines[3] == "+safe\\r-deleted\\u2028 context\\x85+added"
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ ")
    assert "\\n-password" in lines[0] and lines[2].startswith("@@ ")


def test_a_crlf_files_preview_shows_its_lines_without_their_cr(linked_ws: Path) -> None:
    (linked_ws / "deploy" / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    asker = Asker(True)
    with Sandbox(linked_ws, policy=SUPERVISED_RULE, approve=asker) as sb:
        edit = {"path": "deploy/w.txt", "old_string": "two", "new_string": "2"}
        assert sb.call("edit_file", edit)["ok"]
    assert asker.asked[0]["diff"].split("\n")[-3:] == [" one", "-two", "+2"]
