"""The public CallFlow: a call as steps a host can drive itself (Submit: run a
request in a worker; Approve: ask someone), what Sandbox.call, AsyncSandbox.call
and the MCP face each do their own way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from corral import Approve, AsyncSandbox, CallFlow, NoApprover, Sandbox, Submit
from corral.calls.messages import Answer
from corral.policy import Policy

SUPERVISED_WRITE = Policy(tool_modes={"write_file": "supervised"})


@pytest.fixture
def ws_with_a(tmp_path: Path) -> Path:
    ws_with_a = tmp_path / "ws"
    ws_with_a.mkdir()
    (ws_with_a / "a.txt").write_text("hello\n")
    return ws_with_a


def test_a_host_drives_a_supervised_write_step_by_step(ws_with_a: Path) -> None:
    with Sandbox(ws_with_a, policy=SUPERVISED_WRITE) as sb:
        flow = sb.flow("write_file", {"path": "b.txt", "content": "new\n"}, can_ask=True)
        assert isinstance(flow, CallFlow)
        kinds = []
        with flow:
            step = flow.step()
            while step is not None:
                kinds.append(type(step).__name__)
                if isinstance(step, Submit):
                    reply: object = sb.submit(step.request)
                    assert isinstance(reply, Answer)
                else:
                    assert isinstance(step, Approve)
                    assert step.request["tool"] == "write_file"
                    assert step.request["targets"][0]["path"] == "b.txt"
                    reply = True
                step = flow.step(reply)
        assert kinds == ["Submit", "Approve", "Submit"]  # resolved, asked, then run
        assert flow.result is not None and flow.result["ok"], flow.result
        assert "meta" not in flow.result  # the worker's meta never reaches a caller
    assert (ws_with_a / "b.txt").read_text() == "new\n"


def test_run_answers_approve_steps_with_the_callback_it_is_given(ws_with_a: Path) -> None:
    asked: list[str] = []

    def approve(request: dict) -> bool:
        asked.append(request["targets"][0]["path"])
        return False

    with Sandbox(ws_with_a, policy=SUPERVISED_WRITE) as sb:
        flow = sb.flow("write_file", {"path": "c.txt", "content": "x"}, can_ask=True)
        result = sb.run(flow, approve=approve)
        nobody = sb.run(sb.flow("write_file", {"path": "c.txt", "content": "x"}, can_ask=True),
                        approve=lambda request: (_ for _ in ()).throw(NoApprover("no client")))
    assert asked == ["c.txt"]
    assert result["error"]["code"] == "approval_denied"
    assert nobody["error"]["code"] == "approval_required"
    assert "no client" in nobody["error"]["message"]
    assert not (ws_with_a / "c.txt").exists()


def test_a_flow_the_driver_gives_up_on_is_closed_and_acts_on_nothing(ws_with_a: Path) -> None:
    class Boom(Exception):
        pass

    def approve(request: dict) -> bool:
        raise Boom

    with Sandbox(ws_with_a, policy=SUPERVISED_WRITE) as sb:
        flow = sb.flow("write_file", {"path": "d.txt", "content": "x"}, can_ask=True)
        with pytest.raises(Boom):
            sb.run(flow, approve=approve)
        assert flow.step() is None and flow.result is None  # closed: nothing more runs
        assert sb.call("read_file", {"path": "a.txt"})["ok"]  # the sandbox serves on
    assert not (ws_with_a / "d.txt").exists()


def test_async_run_awaits_a_coroutine_approver(ws_with_a: Path) -> None:
    async def approve(request: dict) -> bool:
        await asyncio.sleep(0)
        return True

    async def main() -> dict:
        async with AsyncSandbox(ws_with_a, policy=SUPERVISED_WRITE, approve=approve) as sb:
            return await sb.call("write_file", {"path": "e.txt", "content": "async\n"})

    assert asyncio.run(main())["ok"]
    assert (ws_with_a / "e.txt").read_text() == "async\n"
