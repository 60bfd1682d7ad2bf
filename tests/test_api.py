"""The Sandbox / AsyncSandbox surface: specs, call contract, approval rounds,
lifecycle and concurrency. Tool semantics are in tests/test_tools_*.py."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import AsyncSandbox, Sandbox, testing
from corral.audit import Audit
from corral.config import ConfigError, Limits
from corral.fs import Root, Roots
from corral.policy import Policy, Rule
from corral.tools.base import Context
from corral.tools.registry import TOOLS
from tests.helpers.wire_calls import execute

CONTRACT_KEYS_OK = {"ok", "tool", "result", "text"}
CONTRACT_KEYS_ERROR = {"ok", "tool", "error"}


@pytest.fixture(scope="module")
def module_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    module_ws = tmp_path_factory.mktemp("api")
    (module_ws / "a.txt").write_text("alpha\n")
    (module_ws / "docs").mkdir()
    (module_ws / "docs" / "d.txt").write_text("doc\n")
    return module_ws


@pytest.fixture(scope="module")
def module_sb(module_ws: Path) -> Iterator[Sandbox]:
    with Sandbox(module_ws) as sandbox:
        yield sandbox


class TestSpecs:
    def test_tools_lists_visible_specs(self, module_sb: Sandbox) -> None:
        specs = module_sb.tools()
        names = [spec["name"] for spec in specs]
        assert "delete_file" not in names  # off by default
        assert set(names) == set(TOOLS) - {"delete_file", "delete_directory"}
        for spec in specs:
            assert set(spec) == {"name", "title", "description", "input_schema", "output_schema",
                                 "annotations"}
            json.dumps(spec)  # hosts send specs as JSON

    def test_specs_are_copies(self, module_sb: Sandbox) -> None:
        spec = module_sb.tools()[0]
        spec["annotations"]["readOnlyHint"] = "changed"
        spec["input_schema"]["properties"].clear()
        assert all(
            isinstance(v, bool) for s in module_sb.tools() for v in s["annotations"].values()
        )
        assert module_sb.tools()[0]["input_schema"]["properties"]

    def test_read_only_policy_shows_only_readers(self, module_ws: Path) -> None:
        with Sandbox(module_ws, policy=Policy(read_only=True)) as sandbox:
            assert all(s["annotations"]["readOnlyHint"] for s in sandbox.tools())
            assert sandbox.call("write_file", {"path": "x", "content": ""})["error"]["code"] == (
                "tool_disabled"
            )
        assert not (module_ws / "x").exists()


class TestCallContract:
    def test_ok_result_shape_has_no_meta(self, module_sb: Sandbox) -> None:
        response = module_sb.call("read_file", {"path": "a.txt"})
        assert set(response) == CONTRACT_KEYS_OK
        json.dumps(response)

    def test_error_result_shape(self, module_sb: Sandbox) -> None:
        response = module_sb.call("read_file", {"path": "missing"})
        assert set(response) == CONTRACT_KEYS_ERROR
        assert set(response["error"]) == {"code", "message"}
        assert "missing" in response["error"]["message"]

    @pytest.mark.parametrize("name", ["no_such_tool", "", 3, None])
    def test_unknown_tool(self, module_sb: Sandbox, name: Any) -> None:
        response = module_sb.call(name, {})
        assert response["ok"] is False and response["error"]["code"] == "unknown_tool"

    @pytest.mark.parametrize("arguments", [[], "a.txt", 7])
    def test_arguments_must_be_an_object(self, module_sb: Sandbox, arguments: Any) -> None:
        assert module_sb.call("read_file", arguments)["error"]["code"] == "invalid_arguments"

    def test_no_arguments_means_defaults(self, module_sb: Sandbox) -> None:
        assert module_sb.call("list_directory")["ok"]
        assert module_sb.call("list_directory", None)["ok"]

    def test_unknown_argument_is_named(self, module_sb: Sandbox) -> None:
        error = module_sb.call("read_file", {"path": "a.txt", "lines": 3})["error"]
        assert error["code"] == "invalid_arguments" and "'lines'" in error["message"]

    def test_disabled_tool_is_refused(self, module_ws: Path) -> None:
        policy = Policy(tool_modes={"write_file": "deny"})
        with Sandbox(module_ws, policy=policy) as sandbox:
            error = sandbox.call("write_file", {"path": "w.txt", "content": "x"})["error"]
            assert error["code"] == "tool_disabled"
        assert not (module_ws / "w.txt").exists()

    def test_confinement_names_the_layers(self, module_sb: Sandbox) -> None:
        assert {"landlock_abi", "seccomp", "openat2", "no_new_privs", "level"} <= set(
            module_sb.confinement
        )

    def test_bad_workspace_is_misuse(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError):
            Sandbox(tmp_path / "missing")
        with pytest.raises(ConfigError):
            Sandbox("/etc")


class TestApprovalRounds:
    """A supervised path rule: the worker reports what needs a yes, the host asks."""

    POLICY = Policy(rules=(Rule("ask-docs", "supervised", ("*",), ("docs/**",)),))

    def test_each_supervised_path_of_a_move_is_asked_for(self, module_ws: Path) -> None:
        (module_ws / "docs" / "m1.txt").write_text("m")
        asked: list[dict[str, Any]] = []
        with Sandbox(
            module_ws, policy=self.POLICY, approve=lambda r: asked.append(r) or True
        ) as sandbox:
            response = sandbox.call(
                "move_file", {"source": "docs/m1.txt", "destination": "docs/m2.txt"}
            )
        assert response["ok"], response
        assert [r["paths"] for r in asked] == [["docs/m1.txt"], ["docs/m2.txt"]]
        assert asked[0]["rules"] == ["ask-docs"]
        assert asked[0]["resolved"] == [str(module_ws / "docs" / "m1.txt")]
        assert (module_ws / "docs" / "m2.txt").exists()

    def test_read_multiple_files_asks_once_for_all(self, module_ws: Path) -> None:
        asked: list[dict[str, Any]] = []
        with Sandbox(
            module_ws, policy=self.POLICY, approve=lambda r: asked.append(r) or True
        ) as sandbox:
            response = sandbox.call(
                "read_multiple_files", {"paths": ["a.txt", "docs/d.txt", "docs/../docs/d.txt"]}
            )
        assert [f["ok"] for f in response["result"]["files"]] == [True, True, True]
        assert len(asked) == 1 and asked[0]["paths"] == ["docs/d.txt", "docs/../docs/d.txt"]

    def test_without_a_callback_each_file_says_so(self, module_ws: Path) -> None:
        with Sandbox(module_ws, policy=self.POLICY) as sandbox:
            files = sandbox.call("read_multiple_files", {"paths": ["a.txt", "docs/d.txt"]})
        codes = [f["ok"] or f["error"]["code"] for f in files["result"]["files"]]
        assert codes == [True, "approval_required"]

    def test_grep_in_an_approved_directory_searches_its_files(self, module_ws: Path) -> None:
        asked: list[list[str]] = []
        with Sandbox(module_ws, policy=self.POLICY,
                     approve=lambda r: asked.append(r["paths"]) or True) as sandbox:
            inside = sandbox.call("grep", {"pattern": "doc", "path": "docs"})["result"]
            everywhere = sandbox.call("grep", {"pattern": "doc"})["result"]
        assert [m["path"] for m in inside["matches"]] == ["docs/d.txt"]
        assert asked == [["docs"]]  # grep over the root passes supervised files by
        assert all(not m["path"].startswith("docs/") for m in everywhere["matches"])

    def test_a_callback_that_raises_propagates(self, module_ws: Path) -> None:
        def broken(request: dict[str, Any]) -> bool:
            raise KeyError("host bug")

        with Sandbox(module_ws, policy=self.POLICY, approve=broken) as sandbox:
            with pytest.raises(KeyError):
                sandbox.call("read_file", {"path": "docs/d.txt"})
            assert sandbox.call("read_file", {"path": "a.txt"})["ok"]  # still usable


class TestLifecycle:
    def test_closed_sandbox_raises(self, module_ws: Path) -> None:
        sandbox = Sandbox(module_ws)
        sandbox.close()
        sandbox.close()  # twice is fine
        with pytest.raises(RuntimeError, match="closed"):
            sandbox.call("read_file", {"path": "a.txt"})

    def test_context_manager_closes(self, module_ws: Path) -> None:
        with Sandbox(module_ws) as sandbox:
            assert sandbox.call("read_file", {"path": "a.txt"})["ok"]
        with pytest.raises(RuntimeError):
            sandbox.call("read_file", {"path": "a.txt"})

    def test_given_audit_object_is_left_open(self, module_ws: Path, tmp_path: Path) -> None:
        audit = Audit(tmp_path / "audit.jsonl")
        with Sandbox(module_ws, audit=audit) as sandbox:
            sandbox.call("stat_file", {"path": "a.txt"})
        audit.record(tool="after", ok=True)  # still open: the host owns it
        audit.close()
        lines = (tmp_path / "audit.jsonl").read_text().splitlines()
        assert [json.loads(line)["tool"] for line in lines] == ["stat_file", "after"]

    def test_threads_share_one_sandbox(self, module_sb: Sandbox, module_ws: Path) -> None:
        failures: list[Any] = []

        def worker(n: int) -> None:
            for i in range(20):
                path = f"threads/{n}/{i}.txt"
                written = module_sb.call("write_file", {"path": path, "content": f"{n}-{i}"})
                read = module_sb.call("read_file", {"path": path})
                if not (written["ok"] and read["result"]["content"] == f"{n}-{i}"):
                    failures.append((written, read))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(list((module_ws / "threads").rglob("*.txt"))) == 160

    def test_close_waits_for_a_running_tool(self, module_ws: Path) -> None:
        sandbox = Sandbox(module_ws)
        entered, release = threading.Event(), threading.Event()
        submit = testing.broker(sandbox).submit

        def slow_submit(request: Any, *wait: Any) -> Any:
            entered.set()
            release.wait(5)
            return submit(request, *wait)

        testing.broker(sandbox).submit = slow_submit  # type: ignore[method-assign]
        results: list[dict[str, Any]] = []
        caller = threading.Thread(
            target=lambda: results.append(sandbox.call("read_file", {"path": "a.txt"}))
        )
        caller.start()
        assert entered.wait(5)
        closer = threading.Thread(target=sandbox.close)
        closer.start()
        for _ in range(100_000):  # new calls are refused as soon as close starts
            try:
                sandbox.call("read_file", {"path": "a.txt"})
            except RuntimeError:
                break
        else:
            pytest.fail("calls still accepted while closing")
        assert closer.is_alive()  # the running call still has the executor
        release.set()
        caller.join(5)
        closer.join(5)
        assert not closer.is_alive()
        assert results and results[0]["ok"]

    def test_close_does_not_wait_for_an_approval(self, module_ws: Path) -> None:
        entered, release = threading.Event(), threading.Event()

        def slow_yes(request: dict[str, Any]) -> bool:
            entered.set()
            release.wait(5)
            return True

        policy = Policy(tool_modes={"stat_file": "supervised"})
        sandbox = Sandbox(module_ws, policy=policy, approve=slow_yes)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                sandbox.call("stat_file", {"path": "a.txt"})
            except RuntimeError as error:
                errors.append(error)

        caller = threading.Thread(target=call)
        caller.start()
        assert entered.wait(5)
        sandbox.close()  # returns while the host's callback still runs
        release.set()
        caller.join(5)
        assert len(errors) == 1 and "closed" in str(errors[0])


class TestAsyncSandbox:
    def test_same_surface(self, module_ws: Path) -> None:
        async def main() -> None:
            async with AsyncSandbox(module_ws) as sandbox:
                assert [s["name"] for s in sandbox.tools()] == [s["name"] for s in sandbox.tools()]
                assert "level" in sandbox.confinement
                responses = await asyncio.gather(
                    *(sandbox.call("read_file", {"path": "a.txt"}) for _ in range(10)),
                    sandbox.call("read_file", {"path": "missing"}),
                )
                assert all(r["ok"] for r in responses[:10])
                assert responses[10]["error"]["code"] == "not_found"
            with pytest.raises(RuntimeError):
                await sandbox.call("read_file", {"path": "a.txt"})

        asyncio.run(main())

    def test_async_approve_callback(self, module_ws: Path) -> None:
        asked: list[str] = []

        async def approve(request: dict[str, Any]) -> bool:
            asked.append(request["tool"])
            return request["paths"] == ["a.txt"]

        async def main() -> None:
            policy = Policy(tool_modes={"stat_file": "supervised"})
            sandbox = AsyncSandbox(module_ws, policy=policy, approve=approve)
            try:
                assert (await sandbox.call("stat_file", {"path": "a.txt"}))["ok"]
                denied = await sandbox.call("stat_file", {"path": "docs"})
                assert denied["error"]["code"] == "approval_denied"
            finally:
                await sandbox.aclose()

        asyncio.run(main())
        assert asked == ["stat_file", "stat_file"]


class TestExecute:
    """The worker-side entry point answers every request, whatever happens."""

    @pytest.fixture
    def ctx(self, module_ws: Path) -> Iterator[Context]:
        root = Root(str(module_ws))
        yield Context(Roots(root), Limits(), Policy())
        root.close()

    def test_unexpected_exception_becomes_io_error(
        self, ctx: Context, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def boom(ctx: Context, args: dict[str, Any]) -> Any:
            raise OSError(5, "secret /host/path")

        monkeypatch.setitem(TOOLS, "stat_file", TOOLS["stat_file"]._replace(run=boom))
        response = execute(ctx, {"tool": "stat_file", "arguments": {"path": "a.txt"}})
        assert response["error"]["code"] == "io_error"
        assert "/host/path" not in response["error"]["message"]

    def test_meta_reports_touched_paths(self, ctx: Context) -> None:
        response = execute(ctx, {"tool": "read_file", "arguments": {"path": "docs/../a.txt"}})
        assert list(response["meta"]["touched"]) == [{
            "path": "docs/../a.txt", "root": ctx.roots.workspace.path, "resolved": "a.txt",
            "decision": "allow", "rule": None,
        }]
        assert response["meta"]["bytes"] == len("alpha\n")
        assert "needs_approval" not in response["meta"]  # none: left out

    def test_denied_tool_is_refused_in_the_worker_too(self, module_ws: Path) -> None:
        root = Root(str(module_ws))
        try:
            ctx = Context(Roots(root), Limits(), Policy(read_only=True))
            request = {"tool": "write_file", "arguments": {"path": "x.txt", "content": "x"}}
            assert execute(ctx, request)["error"]["code"] == "tool_disabled"
        finally:
            root.close()
        assert not (module_ws / "x.txt").exists()
