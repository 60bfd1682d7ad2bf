"""Approvals of apply_patch through a real Sandbox: a remembered approval covers
only the kind of stop it was given for (a patch's deletes answer to delete_file's
mode too), and the person asked sees the diff of each path that stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral import Approval, Sandbox
from corral.calls.messages import CallRequest, GrantRef, GrantUse, Malformed, Meta, NeedsApproval
from corral.host.grants import Grants
from corral.policy import Policy, RootSpec, Rule
from corral.tools.preview import PREVIEW_BYTES, PREVIEW_LINE_CHARS, PREVIEW_LINES, per_file
from tests.helpers.approval_helpers import Asker

BOTH = Policy(tool_modes={"apply_patch": "supervised", "delete_file": "supervised"})
# apply_patch allowed, the default action supervising: an edit and a delete would both
# stop under "the default action" but for delete_file's mode
DEFAULT = Policy(default_action="supervised",
                 tool_modes={"apply_patch": "allow", "delete_file": "supervised"})


def patch(*changes: str) -> dict[str, str]:
    return {"patch": "*** Begin Patch\n" + "".join(changes) + "*** End Patch\n"}


def edit(path: str, old: str, new: str) -> str:
    return f"*** Update File: {path}\n@@\n-{old}\n+{new}\n"


def delete(path: str) -> str:
    return f"*** Delete File: {path}\n"


@pytest.fixture
def files(ws: Path) -> Path:
    for name in ("a.txt", "b.txt", "c.txt"):
        (ws / name).write_text(f"{name}\n")
    return ws


@pytest.mark.parametrize("policy", [BOTH, DEFAULT], ids=["both-supervised", "default-action"])
def test_a_rule_grant_for_a_patchs_edits_does_not_cover_its_deletes(
        files: Path, policy: Policy) -> None:
    asker = Asker(Approval(True, remember="rule"))
    with Sandbox(files, policy=policy, approve=asker) as sb:
        assert sb.call("apply_patch", patch(edit("a.txt", "a.txt", "A")))["ok"]
        assert asker.paths == ["a.txt"]
        assert sb.call("apply_patch", patch(edit("c.txt", "c.txt", "C")))["ok"]
        assert asker.paths == ["a.txt"]  # the edits' grant holds for edits
        deleted = sb.call("apply_patch", patch(delete("b.txt")))
        assert deleted["ok"], deleted
        assert asker.paths == ["a.txt", "b.txt"]  # the delete asked: its own scope
        (edits, deletes) = sb.approvals()
        assert edits["tool"] == deletes["tool"] == "apply_patch"
        assert "mode" not in edits and deletes["mode"] == "delete_file"
        # the deletes' grant covers later deletes, and not edits it was not given for
        (files / "d.txt").write_text("d\n")
        assert sb.call("apply_patch", patch(delete("d.txt")))["ok"]
        assert asker.paths == ["a.txt", "b.txt"]
        sb.forget(edits["id"])
        assert sb.call("apply_patch", patch(edit("c.txt", "C", "CC")))["ok"]
        assert asker.paths == ["a.txt", "b.txt", "c.txt"]
    assert not (files / "b.txt").exists() and (files / "c.txt").read_text() == "CC\n"


def test_a_path_grant_for_a_files_edit_does_not_cover_deleting_it(files: Path) -> None:
    asker = Asker(Approval(True, remember="path"))
    with Sandbox(files, policy=BOTH, approve=asker) as sb:
        assert sb.call("apply_patch", patch(edit("a.txt", "a.txt", "A")))["ok"]
        assert sb.call("apply_patch", patch(edit("a.txt", "A", "AA")))["ok"]
        assert asker.paths == ["a.txt"]
        asker.reply = False
        denied = sb.call("apply_patch", patch(delete("a.txt")))
        assert denied["error"]["code"] == "approval_denied"
        assert asker.paths == ["a.txt", "a.txt"]
    assert (files / "a.txt").read_text() == "AA\n"


def test_a_named_rules_grant_from_an_edit_does_not_cover_a_delete_under_it(
        files: Path) -> None:
    rule = Rule("ask-all", "supervised", ("apply_patch",), ("*.txt",))
    policy = Policy(rules=(rule,), tool_modes={"delete_file": "supervised"})
    asker = Asker(Approval(True, remember="rule"))
    with Sandbox(files, policy=policy, approve=asker) as sb:
        assert sb.call("apply_patch", patch(edit("a.txt", "a.txt", "A")))["ok"]
        asker.reply = False
        denied = sb.call("apply_patch", patch(delete("b.txt")))
        assert denied["error"]["code"] == "approval_denied", denied
        assert asker.paths == ["a.txt", "b.txt"]
    assert (files / "b.txt").exists()


def test_with_delete_file_allowed_the_patchs_own_mode_grant_covers_its_deletes(
        files: Path) -> None:
    """Deletes answer to apply_patch's mode alone then: one scope, as before."""
    policy = Policy(tool_modes={"apply_patch": "supervised", "delete_file": "allow"})
    asker = Asker(Approval(True, remember="rule"))
    with Sandbox(files, policy=policy, approve=asker) as sb:
        assert sb.call("apply_patch", patch(edit("a.txt", "a.txt", "A")))["ok"]
        assert sb.call("apply_patch", patch(delete("b.txt")))["ok"]
        assert asker.paths == ["a.txt"]


def test_a_stops_mode_travels_both_ways_and_is_checked(ws: Path) -> None:
    need = NeedsApproval(f"{ws}\0b.txt", str(ws), "b.txt", "b.txt", "", mode="delete_file")
    assert Meta.from_wire(Meta(needs_approval=(need,)).to_wire()).needs_approval == (need,)
    with pytest.raises(Malformed):
        Meta.from_wire({"touched": [], "bytes": 0,
                        "needs_approval": [{**need.to_wire(), "mode": 7}]})
    ref = GrantRef("g1", None, "", "delete_file")
    wire = CallRequest("apply_patch", {}, grants=(ref, GrantRef("g2", None, ""))).to_wire()
    assert wire["grants"] == [["g1", None, "", "delete_file"], ["g2", None, ""]]
    assert CallRequest.from_wire(wire).grants == (ref, GrantRef("g2", None, ""))
    # the host counts a claim of a deletes' grant only while delete_file's mode asks
    use = GrantUse("g1", str(ws), "b.txt")
    for mode, kept in (("supervised", (use,)), ("allow", ())):
        policy = Policy(tool_modes={"apply_patch": "supervised", "delete_file": mode})
        grants = Grants(policy, [RootSpec(str(ws), "rw")])
        assert grants.checked("apply_patch", (ref,), (use,)) == kept


PROD = Policy(tool_modes={"apply_patch": "allow"},
              rules=(Rule("ask-deploy", "supervised", ("apply_patch",), ("deploy/**",)),))


def long_edit(path: str, count: int) -> str:
    return f"*** Update File: {path}\n@@\n" + "".join(
        f"-line {i}\n+LINE {i}\n" for i in range(count))


@pytest.fixture
def deploy(ws: Path) -> Path:
    (ws / "notes.txt").write_text("".join(f"line {i}\n" for i in range(80)))
    (ws / "deploy").mkdir()
    (ws / "deploy/prod.yml").write_text("replicas: 1\n")
    (ws / "deploy/stage.yml").write_text("".join(f"line {i}\n" for i in range(80)))
    return ws


def test_a_patchs_preview_shows_the_stopped_files_diff_not_the_first_files(
        deploy: Path) -> None:
    asker = Asker(False)
    with Sandbox(deploy, policy=PROD, approve=asker) as sb:
        sb.call("apply_patch", patch(long_edit("notes.txt", 80),
                                     edit("deploy/prod.yml", "replicas: 1", "replicas: 50")))
    (request,) = asker.asked
    assert request["paths"] == ["deploy/prod.yml"]
    diff = request["diff"].split("\n")
    assert "+replicas: 50" in diff and "-replicas: 1" in diff
    assert not any("LINE" in line for line in diff)  # the unasked file's change is not shown
    assert diff[-1] == "Also in the change, not asked about (1): notes.txt"
    assert (deploy / "deploy/prod.yml").read_text() == "replicas: 1\n"


def test_each_stopped_file_gets_its_share_of_the_preview(deploy: Path) -> None:
    asker = Asker(False)
    with Sandbox(deploy, policy=PROD, approve=asker) as sb:
        sb.call("apply_patch", patch(long_edit("deploy/stage.yml", 80),
                                     edit("deploy/prod.yml", "replicas: 1", "replicas: 50")))
    diff = asker.asked[0]["diff"].split("\n")
    assert "+replicas: 50" in diff  # the long first file does not take it all
    assert "+++ b/deploy/stage.yml" in diff and "-line 0" in diff
    assert any(line.startswith("… ") and line.endswith(" more lines") for line in diff)
    assert len(diff) <= PREVIEW_LINES
    assert len("\n".join(diff).encode()) <= PREVIEW_BYTES


def test_many_stopped_files_stay_within_the_bound_and_are_counted(ws: Path) -> None:
    (ws / "deploy").mkdir()
    names = [f"deploy/f{i:02}.yml" for i in range(40)]
    for name in names:
        (ws / name).write_text("".join(f"line {i}\n" for i in range(30)))
    (ws / "z.txt").write_text("z\n")
    asker = Asker(False)
    with Sandbox(ws, policy=PROD, approve=asker) as sb:
        denied = sb.call("apply_patch", patch(
            *[long_edit(name, 30) for name in names], edit("z.txt", "z", "Z")))
    assert denied["error"]["code"] == "approval_denied"
    (request,) = asker.asked
    diff = request["diff"].split("\n")
    assert len(request["paths"]) == 40
    assert "+++ b/deploy/f00.yml" in diff
    assert any(line.endswith(" more files asked about, their diffs left out") for line in diff)
    assert diff[-1] == "Also in the change, not asked about (1): z.txt"
    assert len("\n".join(diff).encode()) <= PREVIEW_BYTES + 2 * PREVIEW_LINE_CHARS


def test_the_line_naming_the_other_files_is_bounded() -> None:
    names = [f"src/module_{i:03}.py" for i in range(100)]
    line = per_file([((name,), "+x\n") for name in names], set())
    assert line is not None and "\n" not in line and len(line) <= PREVIEW_LINE_CHARS
    assert line.startswith("Also in the change, not asked about (100): src/module_000.py, ")
    assert line.endswith(" more")


def test_a_grant_a_patchs_delete_went_through_by_is_counted_and_audited(
        files: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """apply_patch allowed, delete_file supervised: the worker lets a later delete
    through by the deletes' grant, and the host keeps that use (it used to take it
    for a forged claim, since apply_patch's own mode asks nothing)."""
    policy = Policy(tool_modes={"apply_patch": "allow", "delete_file": "supervised"})
    log = tmp_path / "audit.jsonl"
    asker = Asker(Approval(True, remember="rule"))
    with Sandbox(files, policy=policy, approve=asker, audit=log) as sb:
        assert sb.call("apply_patch", patch(delete("a.txt")))["ok"]
        assert sb.call("apply_patch", patch(delete("b.txt")))["ok"]
        assert asker.paths == ["a.txt"]
        (grant,) = sb.approvals()
    assert grant["uses"] == 1, grant  # a use the host kept
    assert grant["mode"] == "delete_file"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    # the approval that made it, the call it approved, the call that went through by it
    assert [(r.get("approval"), r.get("grant")) for r in records] == [
        ("rule", grant["id"]), (None, None), (None, grant["id"])]
    assert "does not cover" not in caplog.text
