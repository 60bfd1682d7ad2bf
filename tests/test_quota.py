"""Quotas through every face that runs in-process or on stdio: Sandbox.call, Pool
sandboxes, a host stepping a CallFlow with a forged answer, JSON lines and MCP;
and where a quota may come from (operator, workspace, tenants file)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from corral import AsyncSandbox, Pool, Sandbox, testing
from corral.calls.messages import Answer, CallRequest, Malformed, Meta
from corral.config import ConfigError, QuotaOptions
from corral.faces.tenants import parse_tenants, tenant_config
from corral.host.flow import Approve, Submit
from corral.host.quota import FILES, QuotaUsage
from corral.policy import Policy
from tests.helpers.cli_helpers import run
from tests.helpers.mcp_helpers import REPO, run_session, structured

HEX = "ab" * 32


def refusal(response: dict[str, Any], code: str = "quota_exceeded") -> dict[str, Any]:
    assert response["ok"] is False and response["error"]["code"] == code, response
    return response["error"]


class Submits:
    """Counts the requests a sandbox sends its workers (a private seam: the point is
    that a refused call never gets that far)."""

    def __init__(self, sb: Sandbox) -> None:
        self.count = 0
        submit = testing.broker(sb).submit

        def counted(request: Any, *args: Any) -> Any:
            self.count += 1
            return submit(request, *args)

        testing.broker(sb).submit = counted  # type: ignore[method-assign]


@pytest.fixture
def quota_sb(ws: Path) -> Iterator[Sandbox]:
    with Sandbox(ws, quota=QuotaOptions(calls_per_minute=3, write_bytes_per_hour=10,
                                        files_created_per_hour=2)) as sandbox:
        yield sandbox


def test_calls_per_minute_refuses_the_next_call_without_a_worker(quota_sb: Sandbox) -> None:
    submits = Submits(quota_sb)
    for _ in range(3):
        assert quota_sb.call("list_directory", {})["ok"]
    error = refusal(quota_sb.call("list_directory", {}))
    assert set(error) == {"code", "message", "retry_after_s"}
    assert isinstance(error["retry_after_s"], float) and 0 < error["retry_after_s"] <= 60
    assert "calls_per_minute = 3" in error["message"]
    assert submits.count == 3


def test_a_write_over_the_byte_quota_is_refused_before_it_runs(
    quota_sb: Sandbox, ws: Path
) -> None:
    assert quota_sb.call("write_file", {"path": "a.txt", "content": "123456"})["ok"]
    error = refusal(quota_sb.call("append_file", {"path": "a.txt", "content": "12345"}))
    assert 3590 < error["retry_after_s"] <= 3600
    assert (ws / "a.txt").read_text() == "123456"  # nothing ran
    assert quota_sb.call("append_file", {"path": "a.txt", "content": "1234"})["ok"]
    refusal(quota_sb.call("write_file", {"path": "b.txt", "content": "x" * 11}), "too_large")
    assert not (ws / "b.txt").exists()


def test_files_created_per_hour_counts_new_files_only(ws: Path) -> None:
    with Sandbox(ws, quota=QuotaOptions(files_created_per_hour=2)) as sb:
        for _ in range(3):  # a rewrite creates nothing
            assert sb.call("write_file", {"path": "a.txt", "content": "x"})["ok"]
        assert sb.call("create_directory", {"path": "d"})["ok"]
        refusal(sb.call("write_file", {"path": "b.txt", "content": "x"}))
        refusal(sb.call("create_directory", {"path": "e"}))
        assert sb.call("read_file", {"path": "a.txt"})["ok"]
    assert sorted(os.listdir(ws)) == ["a.txt", "d"]


def test_a_patch_counts_the_files_it_adds_and_the_directories_made_for_them(ws: Path) -> None:
    patch = "*** Begin Patch\n*** Add File: a/b/new.txt\n+x\n*** End Patch\n"
    with Sandbox(ws, quota=QuotaOptions(files_created_per_hour=3)) as sb:
        assert sb.call("apply_patch", {"patch": patch})["ok"]  # a/, a/b/ and the file
        refusal(sb.call("write_file", {"path": "c.txt", "content": "x"}))
    assert sorted(os.listdir(ws)) == ["a"]


@pytest.mark.parametrize("spelled", [
    "*** Begin Patch\n  *** Add File: a.txt\n+x\n  *** Add File: b.txt\n+y\n*** End Patch\n",
    "<<'EOF'\n*** Begin Patch\n*** Add File: a.txt\n+x\n*** Add File: b.txt\n+y\n"
    "*** End Patch\nEOF\n",
])
def test_a_patch_spelled_as_codex_allows_is_counted_as_the_worker_applies_it(
    ws: Path, spelled: str,
) -> None:
    """Padded markers and a heredoc wrapper (which the patch parser accepts, as Codex
    does): the host counts the files the worker will add, so they cannot slip past
    files_created_per_hour."""
    with Sandbox(ws, quota=QuotaOptions(files_created_per_hour=2)) as sb:
        assert sb.call("write_file", {"path": "first.txt", "content": "x"})["ok"]
        refusal(sb.call("apply_patch", {"patch": spelled}))
    assert os.listdir(ws) == ["first.txt"]


def test_a_patchs_move_may_make_directories_and_they_are_counted(ws: Path) -> None:
    (ws / "old.txt").write_text("x\n")
    patch = ("*** Begin Patch\n*** Update File: old.txt\n*** Move to: a/b/c/new.txt\n"
             "*** End Patch\n")
    moves = Policy({"delete_file": "allow"})  # a patch's move deletes the old name
    with Sandbox(ws, policy=moves, quota=QuotaOptions(files_created_per_hour=3)) as sb:
        assert sb.call("apply_patch", {"patch": patch})["ok"]  # a/, a/b/, a/b/c/
        refusal(sb.call("create_directory", {"path": "d"}))


def test_a_forged_answer_does_not_evade_the_byte_quota(ws: Path) -> None:
    """A host stepping the flow (as the faces do) hands back whatever a worker said:
    here a write that claims 0 bytes written and no file created."""
    with Sandbox(ws, quota=QuotaOptions(write_bytes_per_hour=100)) as sb:
        flow = sb.flow("write_file", {"path": "a.txt", "content": "x" * 80})
        step = flow.step()
        assert isinstance(step, Submit)
        forged = Answer(True, "write_file", {"path": "a.txt", "bytes_written": 0,
                                             "created": False}, "Wrote nothing.",
                        meta=Meta(bytes=0), id=step.request.id)
        assert flow.step(forged) is None and flow.result is not None
        assert flow.result["ok"]
        refusal(sb.call("write_file", {"path": "b.txt", "content": "x" * 21}))
        assert sb.call("write_file", {"path": "b.txt", "content": "x" * 20})["ok"]


def test_a_worker_cannot_answer_quota_exceeded() -> None:
    request = CallRequest("read_file", {"path": "a"}, id=7)
    wire = {"id": 7, "ok": False, "tool": "read_file", "meta": {},
            "error": {"code": "quota_exceeded", "message": "wait", "retry_after_s": 1e9}}
    with pytest.raises(Malformed):
        Answer.from_wire(wire, request)


def test_pool_sandboxes_share_a_usage_only_when_given_one(tmp_path: Path) -> None:
    spaces = [tmp_path / name for name in ("a", "b", "c")]
    for space in spaces:
        space.mkdir()
    usage = QuotaUsage()
    quota = QuotaOptions(calls_per_minute=2)
    with Pool(max_workers=4) as pool:
        a = pool.sandbox(spaces[0], quota=quota, quota_usage=usage)
        b = pool.sandbox(spaces[1], quota=quota, quota_usage=usage)
        c = pool.sandbox(spaces[2], quota=quota)
        assert a.call("list_directory", {})["ok"] and b.call("list_directory", {})["ok"]
        submits = Submits(a)
        refusal(a.call("list_directory", {}))
        refusal(b.call("list_directory", {}))
        assert submits.count == 0
        assert c.call("list_directory", {})["ok"] and c.call("list_directory", {})["ok"]
        assert usage.used("calls_per_minute") == 2


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_workspace_config_may_add_or_lower_a_quota_never_raise_it(ws: Path) -> None:
    config = ws / "corral.toml"
    write_toml(config, "[quota]\ncalls_per_minute = 10\n")
    with pytest.raises(ConfigError, match=r"\[quota\] calls_per_minute = 10: above the "
                       "operator's 5"):
        Sandbox(ws, quota=QuotaOptions(calls_per_minute=5))
    write_toml(config, "[quota]\ncalls_per_minute = 1\nfiles_created_per_hour = 7\n")
    with Sandbox(ws, quota=QuotaOptions(calls_per_minute=5)) as sb:
        assert sb.quota == QuotaOptions(calls_per_minute=1, files_created_per_hour=7)
        assert sb.call("stat_file", {"path": "corral.toml"})["ok"]
        refusal(sb.call("stat_file", {"path": "corral.toml"}))
    with Sandbox(ws) as sb:  # the operator set none: the workspace may add one
        assert sb.quota.calls_per_minute == 1


def test_an_operator_config_sets_quotas(tmp_path: Path, ws: Path) -> None:
    config = write_toml(tmp_path / "op.toml", f'[workspace]\nroot = "{ws}"\n'
                        "[quota]\nwrite_bytes_per_hour = 5\n")
    with Sandbox.from_config(config) as sb:
        assert sb.quota == QuotaOptions(write_bytes_per_hour=5)
        refusal(sb.call("write_file", {"path": "a", "content": "123456"}), "too_large")
    write_toml(config, f'[workspace]\nroot = "{ws}"\n[quota]\nwrite_bytes_per_hour = 0\n')
    with pytest.raises(ConfigError, match=r"\[quota\] write_bytes_per_hour"):
        Sandbox.from_config(config)


def tenants_file(tmp_path: Path, quota: str, place: str = 'workspace = "ws"') -> dict[str, Any]:
    return {"tenant": [{"name": "alice", "token_sha256": HEX, **_place(place),
                        **({"quota": json.loads(quota)} if quota else {})}]}


def _place(place: str) -> dict[str, str]:
    key, value = place.split(" = ")
    return {key: json.loads(value)}


@pytest.mark.parametrize(("quota", "key", "said"), [
    ('{"calls_per_minute": 0}', "tenant[0].quota.calls_per_minute", "positive integer"),
    ('{"calls_per_minute": true}', "tenant[0].quota.calls_per_minute", "positive integer"),
    ('{"calls_per_minute": 1.5}', "tenant[0].quota.calls_per_minute", "positive integer"),
    ('{"calls_per_minut": 5}', "tenant[0].quota.calls_per_minut", "did you mean"),
    ('{"max_read_bytes": 5}', "tenant[0].quota.max_read_bytes", "unknown key"),
    ('5', "tenant[0].quota", "expected a table"),
])
def test_a_tenants_quota_is_checked_naming_file_and_key(
    tmp_path: Path, quota: str, key: str, said: str
) -> None:
    source = str(tmp_path / "tenants.toml")
    with pytest.raises(ConfigError) as caught:
        parse_tenants(source, tenants_file(tmp_path, quota))
    assert caught.value.key == key and said in str(caught.value)
    assert source in str(caught.value)


def test_a_tenants_quota_is_the_operators(tmp_path: Path, ws: Path) -> None:
    config = write_toml(tmp_path / "alice.toml", f'[workspace]\nroot = "{ws}"\n'
                        "[quota]\ncalls_per_minute = 50\nwrite_bytes_per_hour = 9\n")
    source = str(tmp_path / "tenants.toml")
    [tenant] = parse_tenants(source, tenants_file(
        tmp_path, '{"calls_per_minute": 20, "files_created_per_hour": 3}',
        f'config = "{config}"'))
    # both are the operator's: the stricter of each holds
    assert tenant_config(tenant).quota == QuotaOptions(20, 9, 3)
    write_toml(ws / "corral.toml", "[quota]\ncalls_per_minute = 30\n")
    with pytest.raises(ConfigError, match=r"calls_per_minute = 30: above the operator's 20"):
        tenant_config(tenant)
    write_toml(ws / "corral.toml", "[quota]\ncalls_per_minute = 2\n")
    assert tenant_config(tenant).quota.calls_per_minute == 2
    [plain] = parse_tenants(source, tenants_file(tmp_path, '{"calls_per_minute": 1}'))
    (tmp_path / "ws" / "corral.toml").unlink()
    assert tenant_config(plain).quota == QuotaOptions(calls_per_minute=1)


def test_quota_exceeded_over_json_lines(ws: Path) -> None:
    write_toml(ws / "corral.toml", "[quota]\ncalls_per_minute = 2\n")
    lines = [json.dumps({"id": i, "tool": "list_directory", "arguments": {}}) for i in range(3)]
    proc = subprocess.run(
        [sys.executable, "-m", "corral", "serve", "--jsonl", "--workspace", str(ws)],
        input="".join(line + "\n" for line in lines).encode(), capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    refused = [answer for answer in answers if not answer["ok"]]
    assert len(answers) == 3 and len(refused) == 1
    error = refused[0]["error"]
    assert error["code"] == "quota_exceeded" and 0 < error["retry_after_s"] <= 60


def test_quota_exceeded_over_mcp(ws: Path) -> None:
    write_toml(ws / "corral.toml", "[quota]\ncalls_per_minute = 1\n")
    seen: list[Any] = []

    async def body(session: Any) -> None:
        seen.append(await session.call_tool("list_directory", {}))
        seen.append(await session.call_tool("list_directory", {}))

    run_session(ws, body)
    assert not seen[0].is_error and seen[1].is_error
    error = structured(seen[1])["error"]
    assert error["code"] == "quota_exceeded" and 0 < error["retry_after_s"] <= 60
    text = seen[1].content[0].text
    assert text.startswith("quota_exceeded: the quota [quota] calls_per_minute = 1")
    assert "accepted in" in text


def test_doctor_shows_the_quotas_in_effect(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_toml(ws / "corral.toml", "[quota]\nwrite_bytes_per_hour = 4096\n")
    code, out, _ = run(capsys, "doctor", "--workspace", str(ws))
    assert code == 0 and "quota             write_bytes_per_hour 4096" in out


def test_an_async_sandbox_counts_the_same(ws: Path) -> None:
    async def calls() -> list[dict[str, Any]]:
        async with AsyncSandbox(ws, quota=QuotaOptions(calls_per_minute=2)) as sb:
            return list(await asyncio.gather(*(sb.call("list_directory") for _ in range(5))))

    answers = asyncio.run(calls())
    assert sum(answer["ok"] for answer in answers) == 2
    for answer in answers:
        if not answer["ok"]:
            refusal(answer)


def test_a_call_given_up_on_keeps_what_it_reserved(ws: Path) -> None:
    """A cancelled call may have written: its reservation stays counted."""
    with Sandbox(ws, quota=QuotaOptions(write_bytes_per_hour=10)) as sb:
        flow = sb.flow("append_file", {"path": "a.txt", "content": "x" * 8})
        assert isinstance(flow.step(), Submit)
        flow.close()
        refusal(sb.call("append_file", {"path": "a.txt", "content": "xxx"}))


def test_a_call_given_up_on_while_asking_gives_its_reservation_back(ws: Path) -> None:
    """The worker stops before acting until a person answers: a call closed then (an
    MCP stateless round ends so, and is sent again) wrote nothing."""
    policy = Policy(tool_modes={"write_file": "supervised"})
    quota = QuotaOptions(write_bytes_per_hour=10, files_created_per_hour=1)
    with Sandbox(ws, policy=policy, quota=quota, approve=lambda request: True) as sb:
        flow = sb.flow("write_file", {"path": "a.txt", "content": "x" * 8})
        step = flow.step()
        assert isinstance(step, Submit)
        assert isinstance(flow.step(sb.submit(step.request)), Approve)
        flow.close()
        assert sb.call("write_file", {"path": "b.txt", "content": "x" * 8})["ok"]
    assert not (ws / "a.txt").exists()


def test_directories_made_on_the_way_count_as_files_created(ws: Path) -> None:
    """A call reserves its file and one directory per level of its path (any may be
    missing), and is settled down to what it made."""
    usage = QuotaUsage()
    with Sandbox(ws, quota=QuotaOptions(files_created_per_hour=7), quota_usage=usage) as sb:
        assert sb.call("create_directory", {"path": "a/b/c"})["ok"]  # 3 made
        assert sb.call("write_file", {"path": "a/b/c/f.txt", "content": "x"})["ok"]  # 4, 1
        assert sb.call("write_file", {"path": "d/f.txt", "content": "x"})["ok"]  # 2
        assert sb.call("create_directory", {"path": "e"})["ok"]  # 1
        error = refusal(sb.call("write_file", {"path": "g.txt", "content": "x"}))
        assert "7 files created" in error["message"]
    assert usage.used(FILES) == 7


def test_a_deep_path_cannot_take_the_files_quota_past_its_bound(ws: Path) -> None:
    deep = "/".join(["d"] * 10)
    patch = f"*** Begin Patch\n*** Add File: {deep}/new.txt\n+x\n*** End Patch\n"
    with Sandbox(ws, quota=QuotaOptions(files_created_per_hour=5)) as sb:
        for tool, args in (("write_file", {"path": f"{deep}/f.txt", "content": "x"}),
                           ("append_file", {"path": f"{deep}/f.txt", "content": "x"}),
                           ("create_directory", {"path": f"{deep}/e"}),
                           ("apply_patch", {"patch": patch})):
            error = refusal(sb.call(tool, args), "too_large")
            assert "11 in all" in error["message"], error
        assert sb.call("write_file", {"path": "d/d/d/d/f.txt", "content": "x"})["ok"]  # 5
    assert sum(len(dirs) + len(files) for _, dirs, files in os.walk(ws)) == 5
    with Sandbox(ws, quota=QuotaOptions(files_created_per_hour=1)) as sb:
        # an absolute path's depth counts from its root
        assert sb.call("write_file", {"path": f"{ws}/top.txt", "content": "x"})["ok"]


def test_concurrent_writes_into_new_directories_hold_the_files_quota(ws: Path) -> None:
    """Ten writes at once, each making two directories and a file, under a quota of
    10: the directories are reserved before the calls run, so at most three get in."""
    barrier = threading.Barrier(10)

    def one(sb: Sandbox, index: int) -> dict[str, Any]:
        barrier.wait()
        return sb.call("write_file", {"path": f"d{index}/x/new.txt", "content": "x"})

    usage = QuotaUsage()
    with Sandbox(ws, quota=QuotaOptions(files_created_per_hour=10), quota_usage=usage) as sb, \
            ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda index: one(sb, index), range(10)))
    used = usage.used(FILES)
    made = sum(len(dirs) + len(files) for _, dirs, files in os.walk(ws))
    written = [answer for answer in answers if answer["ok"]]
    assert made == 3 * len(written) == used <= 10, answers
    assert all(answer["error"]["code"] == "quota_exceeded" for answer in answers
               if not answer["ok"])


def test_a_patch_that_creates_nothing_is_not_held_back_by_the_files_quota(ws: Path) -> None:
    """Past files_created_per_hour (a deep write's parent directories took it there),
    a patch that only edits runs; one whose move may make directories waits."""
    edit = ("*** Begin Patch\n*** Update File: a/b/c.txt\n@@\n-x\n+y\n*** End Patch\n")
    move = ("*** Begin Patch\n*** Update File: a/b/c.txt\n*** Move to: d/e.txt\n"
            "*** End Patch\n")
    moves = Policy({"delete_file": "allow"})  # a patch's move deletes the old name
    with Sandbox(ws, policy=moves, quota=QuotaOptions(files_created_per_hour=3)) as sb:
        assert sb.call("write_file", {"path": "a/b/c.txt", "content": "x\n"})["ok"]  # 3
        assert sb.call("apply_patch", {"patch": edit})["ok"]
        refusal(sb.call("apply_patch", {"patch": move}))
    assert (ws / "a" / "b" / "c.txt").read_text() == "y\n"
