"""Remembered approvals through the Python API: what each `remember` grants, for
which tool and which resolved paths, listing and forgetting grants, the audit
record of every decision and every use, a worker's forged claim of a grant, and
what the person asked sees (sizes, a bounded diff). Real workers, real kernel."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from corral import Approval, AsyncSandbox, Pool, Sandbox, Submit
from corral.calls.messages import (
    MAX_PREVIEW_CHARS,
    CallRequest,
    GrantRef,
    GrantUse,
    Malformed,
    Meta,
    NeedsApproval,
)
from corral.config import Limits, SandboxOptions
from corral.host.grants import Grants
from corral.policy import Policy, RootSpec, Rule
from corral.tools import preview
from corral.tools.base import Context, Outcome, Tool
from corral.tools.patch_format import files_of
from corral.tools.preview import PREVIEW_BYTES, PREVIEW_LINES
from tests.helpers.approval_helpers import Asker
from tests.helpers.mcp_helpers import REPO

DOCS = Rule("ask-docs", "supervised", ("write_file", "edit_file"), ("docs/**",))
CONF = Rule("ask-conf", "supervised", ("write_file",), ("conf/**",))
RULES = Policy(rules=(DOCS, CONF))
TOOL_MODE = Policy(tool_modes={"write_file": "supervised"}, rules=(DOCS,))


def write(sb: Sandbox, path: str, content: str = "x") -> dict[str, Any]:
    result = sb.call("write_file", {"path": path, "content": content})
    assert result["ok"], result
    return result


def test_path_grants_that_tool_on_that_file_for_the_sandbox(ws: Path) -> None:
    asker = Asker(Approval(True, remember="path"))
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        write(sb, "docs/a.md", "1")
        write(sb, "docs/a.md", "2")  # not asked: the grant covers it
        assert asker.paths == ["docs/a.md"]
        write(sb, "docs/b.md")  # another file of the same rule still asks
        assert asker.paths == ["docs/a.md", "docs/b.md"]
        edited = sb.call("edit_file", {"path": "docs/a.md", "old_string": "2", "new_string": "3"})
        assert edited["ok"] and asker.paths[-1] == "docs/a.md"  # another tool asks
        (first, second, third) = sb.approvals()
    assert first == {"id": "g1", "tool": "write_file", "root": str(ws), "path": "docs/a.md",
                     "created": first["created"], "uses": 1}
    assert second["path"] == "docs/b.md" and second["uses"] == 0
    assert third["tool"] == "edit_file" and third["id"] == "g3"
    assert (ws / "docs/a.md").read_text() == "3"


def test_rule_grants_every_path_of_that_rule_for_that_tool(ws: Path) -> None:
    asker = Asker(Approval(True, remember="rule"))
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        write(sb, "docs/a.md")
        write(sb, "docs/deep/b.md")
        write(sb, "docs/a.md")
        assert asker.paths == ["docs/a.md"]
        write(sb, "conf/c.toml")  # another rule asks
        assert asker.paths == ["docs/a.md", "conf/c.toml"]
        (docs, conf) = sb.approvals()
    assert docs == {"id": "g1", "tool": "write_file", "root": None, "rule": "ask-docs",
                    "created": docs["created"], "uses": 2}
    assert conf["rule"] == "ask-conf" and conf["uses"] == 0


def test_rule_on_a_supervised_tool_grants_the_tool_but_not_named_rules(ws: Path) -> None:
    asker = Asker(Approval(True, remember="rule"))
    with Sandbox(ws, policy=TOOL_MODE, approve=asker) as sb:
        write(sb, "a.txt")
        write(sb, "b/c.txt")
        assert asker.paths == ["a.txt"]
        write(sb, "docs/d.md")  # a path a named supervised rule covers still asks
        assert asker.paths == ["a.txt", "docs/d.md"]
        assert [g["rule"] for g in sb.approvals()] == [None, "ask-docs"]


@pytest.mark.parametrize("reply", [True, Approval(True)], ids=["bool", "once"])
def test_once_remembers_nothing(ws: Path, reply: Any) -> None:
    asker = Asker(reply)
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        write(sb, "docs/a.md")
        write(sb, "docs/a.md")
        assert asker.paths == ["docs/a.md", "docs/a.md"] and sb.approvals() == []


def test_a_denial_is_never_remembered(ws: Path) -> None:
    asker = Asker(Approval(False, remember="path"))
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        for _ in range(2):
            denied = sb.call("write_file", {"path": "docs/a.md", "content": "x"})
            assert denied["error"]["code"] == "approval_denied"
        assert len(asker.asked) == 2 and sb.approvals() == []
    assert not (ws / "docs/a.md").exists()


def test_approval_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="remember"):
        Approval(True, remember="forever")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Approval("yes")  # type: ignore[arg-type]
    assert Approval(True) and not Approval(False)


@pytest.mark.parametrize("reply", ["n", "path", None, 1], ids=["n", "path", "none", "one"])
def test_a_reply_that_is_not_a_bool_or_an_approval_approves_nothing(
    ws: Path, reply: Any
) -> None:
    """A callback returning input()'s "n" (truthy) must not approve: it is the host's
    mistake, raised out of call, and the call has acted on nothing."""
    with Sandbox(ws, policy=RULES, approve=Asker(reply)) as sb:
        with pytest.raises(TypeError, match=r"bool or a corral\.Approval"):
            sb.call("write_file", {"path": "docs/a.md", "content": "x"})
        assert sb.approvals() == [] and sb.call("stat_file", {"path": "."})["ok"]
    assert not (ws / "docs/a.md").exists()


def test_forget_drops_one_grant_or_all(ws: Path) -> None:
    asker = Asker(Approval(True, remember="path"))
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        for name in ("docs/a.md", "docs/b.md", "docs/c.md"):
            write(sb, name)
        assert sb.forget("g1") == 1 and sb.forget("g1") == 0 and sb.forget("nope") == 0
        assert [g["id"] for g in sb.approvals()] == ["g2", "g3"]
        write(sb, "docs/a.md")  # asked again, and a new id: g1 is never reused
        write(sb, "docs/b.md")  # still granted
        assert asker.paths[3:] == ["docs/a.md"]
        assert [g["id"] for g in sb.approvals()] == ["g2", "g3", "g4"]
        assert sb.forget() == 3 and sb.approvals() == []
        write(sb, "docs/b.md")
        assert asker.paths[4:] == ["docs/b.md"]


def test_a_symlink_swapped_after_the_grant_is_asked_about_again(
    ws: Path, resolver: SandboxOptions
) -> None:
    """The grant is the resolved file: the link that led to it grants nothing
    (both resolvers: openat2 and the component walk)."""
    (ws / "docs").mkdir()
    (ws / "docs/a.md").write_text("a")
    (ws / "docs/b.md").write_text("b")
    (ws / "docs/link.md").symlink_to("a.md")
    asker = Asker(Approval(True, remember="path"))
    with Sandbox(ws, policy=RULES, approve=asker, options=resolver) as sb:
        write(sb, "docs/link.md", "1")
        write(sb, "docs/a.md", "2")  # the same file by its own name: granted
        assert asker.paths == ["docs/a.md"]
        os.replace(_link(ws / "docs", "b.md"), ws / "docs/link.md")
        write(sb, "docs/link.md", "3")
        assert asker.paths == ["docs/a.md", "docs/b.md"]
        assert asker.asked[-1]["targets"][0]["given"] == "docs/link.md"
    assert (ws / "docs/a.md").read_text() == "2" and (ws / "docs/b.md").read_text() == "3"


def _link(directory: Path, target: str) -> Path:
    made = directory / ".new-link"
    made.symlink_to(target)
    return made


def test_every_decision_and_every_use_of_a_grant_is_audited(ws: Path, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    replies = iter([Approval(True, "path"), True, False])
    with Sandbox(ws, policy=RULES, approve=lambda request: next(replies), audit=log) as sb:
        write(sb, "docs/a.md")
        write(sb, "docs/a.md")
        write(sb, "docs/b.md")
        assert sb.call("write_file", {"path": "docs/c.md", "content": "x"})["error"]["code"] \
            == "approval_denied"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    decisions = [(r["path"], r["approval"], r["grant"], r["ok"]) for r in records if r["approval"]]
    assert decisions == [("docs/a.md", "path", "g1", True), ("docs/b.md", "once", None, True),
                         ("docs/c.md", "denied", None, False)]
    calls = [(r["path"], r["grant"]) for r in records if not r["approval"]]
    assert calls == [("docs/a.md", None), ("docs/a.md", "g1"), ("docs/b.md", None),
                     ("docs/c.md", None)]
    assert all(r["rule"] == "ask-docs" and r["decision"] == "supervised" for r in records)


def _forged(sb: Sandbox, path: str, uses: tuple[GrantUse, ...]) -> dict[str, Any]:
    """A call whose worker answer claims `uses` (a compromised worker's meta)."""
    flow = sb.flow("write_file", {"path": path, "content": "x"})
    with flow:
        step = flow.step()
        while step is not None:
            assert isinstance(step, Submit)
            answer = sb.submit(step.request)
            step = flow.step(answer._replace(meta=replace(answer.meta, grants=uses)))
    assert flow.result is not None
    return flow.result


def test_a_grant_use_the_host_did_not_send_is_ignored(ws: Path, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    asker = Asker(Approval(True, remember="path"))
    with Sandbox(ws, policy=RULES, approve=asker, audit=log) as sb:
        write(sb, "docs/a.md")
        root = str(ws)
        never = (GrantUse("g99", root, "docs/a.md"),)  # never issued
        elsewhere = (GrantUse("g1", root, "x/b.md"),)  # issued, for another path
        assert _forged(sb, "docs/a.md", never)["ok"]
        assert _forged(sb, "docs/a.md", elsewhere)["ok"]
        assert _forged(sb, "docs/a.md", (GrantUse("g1", root, "docs/a.md"),))["ok"]
        assert sb.approvals()[0]["uses"] == 1  # only the true claim counts
    grants = [json.loads(line)["grant"] for line in log.read_text().splitlines()]
    assert grants == ["g1", None, None, None, "g1"]


def test_a_rule_grant_claimed_for_another_rules_path_is_ignored(ws: Path) -> None:
    asker = Asker(Approval(True, remember="rule"))
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        write(sb, "docs/a.md")
        # g1 covers ask-docs; a claim for conf/ (ask-conf) or an allowed path is false
        for claimed in ("conf/c.toml", "free.txt", "docs/b.md"):
            assert _forged(sb, "docs/a.md", (GrantUse("g1", str(ws), claimed),))["ok"]
        assert sb.approvals()[0]["uses"] == 1  # only docs/b.md lies in the rule


@pytest.mark.parametrize("meta", [
    {"grants": [["g1", "/w"]]}, {"grants": "g1"}, {"grants": [["g1", "/w", 3]]},
    {"diff": "x" * (MAX_PREVIEW_CHARS + 1)}, {"diff": 3},
    {"needs_approval": [{"key": "k", "root": "/w", "resolved": "a", "path": "a",
                         "size": -1}]},
])
def test_a_malformed_grant_claim_or_preview_is_a_malformed_answer(meta: Any) -> None:
    with pytest.raises(Malformed):
        Meta.from_wire({"touched": [], "bytes": 0, **meta})


def test_a_call_carries_only_the_grants_that_can_apply(ws: Path) -> None:
    """The message stays small: no grants key without a grant of that tool."""
    assert "grants" not in CallRequest("write_file", {}).to_wire()
    ref = GrantRef("g1", f"{ws}\0a.txt", None)
    wire = CallRequest("write_file", {}, grants=(ref,)).to_wire()
    assert wire["grants"] == [["g1", f"{ws}\0a.txt", None]]
    assert CallRequest.from_wire(wire).grants == (ref,)
    forged = {**wire, "grants": [["g1", 7, None], "x", ["g2", None, "r"]]}
    assert CallRequest.from_wire(forged).grants == (GrantRef("g2", None, "r"),)
    asker = Asker(Approval(True, remember="path"))
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        write(sb, "docs/a.md")
        write(sb, "docs/b.md")
        assert sent(sb, "write_file", path="docs/a.md", content="") == ["g1"]
        assert sent(sb, "write_file", path=f"{ws}/docs/./a.md", content="") == ["g1"]
        assert sent(sb, "write_file", path="docs/c.md", content="") == []
        assert sent(sb, "edit_file", path="docs/a.md", old_string="x", new_string="y") == []
        assert sent(sb, "move_file", source="docs", destination="d") == []  # another tool
        asker.reply = Approval(True, remember="rule")
        write(sb, "docs/c.md")
        assert sent(sb, "write_file", path="elsewhere.md", content="") == ["g3"]  # rule: always


def sent(sb: Sandbox, tool: str, **arguments: Any) -> list[str]:
    """The grant ids the first request of this call carries to its worker."""
    with sb.flow(tool, arguments) as flow:
        step = flow.step()
        assert isinstance(step, Submit)
        return [grant.id for grant in step.request.grants]


def test_the_request_shows_the_size_and_a_bounded_diff(ws: Path) -> None:
    (ws / "docs").mkdir()
    old = "".join(f"line {n}\n" for n in range(300))
    (ws / "docs/big.md").write_text(old)
    asker = Asker(False)
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        sb.call("write_file", {"path": "docs/big.md", "content": old.replace("line", "LINE")})
        sb.call("write_file", {"path": "docs/new.md", "content": "hello\x1b[2J\n"})
        sb.call("edit_file", {"path": "docs/big.md", "old_string": "line 7\n",
                              "new_string": "seven\n"})
    big, new, edit = asker.asked
    assert big["targets"][0]["size"] == len(old)
    lines = big["diff"].split("\n")
    assert len(lines) == PREVIEW_LINES + 1 and len(big["diff"].encode()) <= PREVIEW_BYTES + 40
    assert lines[-1] == f"… {600 + 3 - PREVIEW_LINES} more lines"
    assert new["targets"][0]["size"] is None
    assert "+hello\\x1b[2J" in new["diff"]  # escaped: shown to a person
    assert "-line 7" in edit["diff"] and "+seven" in edit["diff"]


def test_the_diff_of_a_legacy_encoded_file_is_of_its_text(ws: Path) -> None:
    """A file in one of [workspace] fallback_encodings is previewed as a read shows
    it, not refused as binary."""
    (ws / "docs").mkdir()
    (ws / "docs/old.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("cp1252"))
    asker = Asker(False)
    policy = dataclasses.replace(RULES, fallback_encodings=("cp1252",))
    with Sandbox(ws, policy=policy, approve=asker) as sb:
        sb.call("write_file", {"path": "docs/old.txt", "content": "th\xe9\n"})
    (request,) = asker.asked
    assert "-caf\xe9 cr\xe8me" in request["diff"] and "+th\xe9" in request["diff"]


def test_no_diff_where_a_rule_hides_the_files_content(ws: Path) -> None:
    hidden = Policy(rules=(Rule("hide", "deny", ("read_file",), ("notes/**",)),
                           Rule("ask", "supervised", ("write_file",), ("notes/**",))))
    (ws / "notes").mkdir()
    (ws / "notes/n.txt").write_text("private")
    asker = Asker(True)
    with Sandbox(ws, policy=hidden, approve=asker) as sb:
        write(sb, "notes/n.txt", "public")
    (request,) = asker.asked
    assert request["diff"] is None and request["targets"][0]["size"] == len("private")


def test_the_async_sandbox_remembers_and_forgets(ws: Path) -> None:
    asked: list[str] = []

    async def approve(request: dict[str, Any]) -> Approval:
        asked.append(request["targets"][0]["path"])
        return Approval(True, remember="rule")

    async def main() -> None:
        async with AsyncSandbox(ws, policy=RULES, approve=approve) as sb:
            for path in ("docs/a.md", "docs/b.md"):
                assert (await sb.call("write_file", {"path": path, "content": "x"}))["ok"]
            assert [g["rule"] for g in sb.approvals()] == ["ask-docs"]
            assert sb.forget() == 1
            assert (await sb.call("write_file", {"path": "docs/c.md", "content": "x"}))["ok"]

    asyncio.run(main())
    assert asked == ["docs/a.md", "docs/c.md"]


def test_a_pooled_sandbox_keeps_its_own_grants(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    asker = Asker(Approval(True, remember="rule"))
    with Pool(max_workers=2) as pool:
        first = pool.sandbox(one, policy=RULES, approve=asker)
        second = pool.sandbox(two, policy=RULES, approve=asker)
        write(first, "docs/a.md")
        write(first, "docs/b.md")
        write(second, "docs/a.md")  # grants are per sandbox
        assert len(asker.asked) == 2
        assert len(first.approvals()) == 1 and len(second.approvals()) == 1
        assert first.forget() == 1 and len(second.approvals()) == 1


def test_past_the_bound_an_approval_is_not_remembered(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("corral.host.grants.MAX_GRANTS", 2)
    asker = Asker(Approval(True, remember="path"))
    with Sandbox(ws, policy=RULES, approve=asker) as sb:
        for name in ("docs/a.md", "docs/b.md", "docs/c.md", "docs/c.md", "docs/a.md"):
            write(sb, name)
        assert [g["path"] for g in sb.approvals()] == ["docs/a.md", "docs/b.md"]
    assert asker.paths == ["docs/a.md", "docs/b.md", "docs/c.md", "docs/c.md"]


def test_the_api_pages_example_runs(ws: Path) -> None:
    page = (Path(__file__).resolve().parent.parent / "docs/api.md").read_text()
    (code,) = [block for block in page.split("```python\n")[1:]
               if 'remember="rule"' in block.split("```")[0]]
    code = code.split("```")[0].replace("/path/to/workspace", str(ws))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "+a" in done.stdout and "'rule': 'ask-docs'" in done.stdout
    assert (ws / "docs/b.md").read_text() == "b"


def test_path_grants_travel_with_calls_that_name_their_file() -> None:
    grants = Grants(Policy(), [RootSpec("/w", "rw"), RootSpec("/data", "ro")])
    need = NeedsApproval("/w\0docs/a.md", "/w", "docs/a.md", "tpl/../a.md", "ask-docs")
    issued = {tool: grants.issue(tool, [need], "path")[0]
              for tool in ("move_file", "read_multiple_files", "apply_patch")}
    patch = "*** Begin Patch\n*** Update File: docs/a.md\n@@\n-a\n+b\n*** End Patch\n"
    for tool, arguments in (
            ("move_file", {"source": "docs/a.md"}), ("move_file", {"source": "/w/docs/a.md"}),
            ("move_file", {"destination": "tpl/../a.md"}), ("move_file", {"source": "docs"}),
            ("move_file", {"source": "."}), ("read_multiple_files", {"paths": ["x", "docs/a.md"]}),
            ("apply_patch", {"patch": patch})):
        files = files_of(arguments.get("patch"))
        assert grants.for_call(tool, arguments, files) == (issued[tool].ref,), arguments
    for arguments in ({"source": "docs/b.md"}, {"source": "/data/docs/a.md"}, {"source": "doc"},
                      {"path": "docs/a.md"}, {}):  # move_file takes no `path`
        assert grants.for_call("move_file", arguments, ()) == (), arguments
    # a patch's files are the ones the flow read from it, once
    assert grants.for_call("apply_patch", {"patch": patch}, ()) == ()
    assert grants.for_call("write_file", {"path": "docs/a.md"}, ()) == ()


def test_a_move_asks_only_about_the_ends_no_grant_covers(ws: Path, tmp_path: Path) -> None:
    moves = Policy(rules=(Rule("ask-docs", "supervised", ("move_file",), ("docs/**",)),))
    (ws / "docs").mkdir()
    (ws / "docs/a.md").write_text("a")
    log = tmp_path / "audit.jsonl"
    asker = Asker(Approval(True, remember="path"))
    with Sandbox(ws, policy=moves, approve=asker, audit=log) as sb:

        def move(source: str, destination: str) -> dict[str, Any]:
            return sb.call("move_file", {"source": source, "destination": destination})

        assert move("docs/a.md", "docs/b.md")["ok"]
        assert asker.paths == ["docs/a.md", "docs/b.md"]
        assert move("docs/b.md", "docs/a.md")["ok"]  # both ends granted: not asked
        assert len(asker.asked) == 2
        asker.reply = False
        assert move("docs/a.md", "docs/c.md")["error"]["code"] == "approval_denied"
        assert asker.paths[2:] == ["docs/c.md"]
        assert [(g["path"], g["uses"]) for g in sb.approvals()] == [
            ("docs/a.md", 1), ("docs/b.md", 1)]  # the refused move used nothing
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["grant"] for r in calls if not r["approval"]] == [None, "g2,g1", None]
    assert (ws / "docs/a.md").read_text() == "a"


def test_a_rule_name_is_escaped_where_a_person_reads_it(ws: Path) -> None:
    sneaky = Policy(rules=(Rule("ask\x1b[2J", "supervised", ("write_file",), ("docs/**",)),))
    asker = Asker(True)
    with Sandbox(ws, policy=sneaky, approve=asker) as sb:
        write(sb, "docs/a.md")
    (request,) = asker.asked
    assert request["rules"] == ["ask\\x1b[2J"] and request["targets"][0]["rule"] == "ask\\x1b[2J"


def test_a_dry_runs_diff_is_taken_whole_or_split_by_file() -> None:
    """apply_patch (a tool with a dry run) lists its files: its diff is split by
    the hunks' own counts (a removed "-- x" line reads "--- x")."""

    def tool(result: dict[str, Any]) -> Tool:
        return Tool("t", "T", "", {}, {}, {}, True, lambda ctx, args: Outcome(result, ""))

    ctx = Context(None, Limits(), Policy())  # type: ignore[arg-type]
    assert preview._dry_run(ctx, tool({"diff": "whole"}), {}) == "whole"
    a = "--- a/a\n+++ b/a\n@@ -1 +1 @@\n--- x\n+++ y\n\\ No newline at end of file\n"
    b = "--- a/b\n+++ b/c\n@@ -0,0 +1 @@\n+b\n"
    files = [{"path": "a"}, {"path": "b", "to": "c"}, {"path": "d"}, "x"]
    assert preview._dry_run(ctx, tool({"files": files, "diff": a + b}), {}) == [
        (("a",), a.removesuffix("\n")), (("b", "c"), b.removesuffix("\n")), (("d",), None)]
    assert preview._dry_run(ctx, tool({"files": files, "diff": a + "junk\n"}), {}) is None
    assert preview._dry_run(ctx, tool({"files": "x", "diff": "-a\n"}), {}) == "-a\n"
    assert preview._dry_run(ctx, tool({"files": files}), {}) is None
    assert preview.bounded("\n".join(["x" * 300] * 2)) == "\n".join(
        ["x" * preview.PREVIEW_LINE_CHARS + "…"] * 2)
