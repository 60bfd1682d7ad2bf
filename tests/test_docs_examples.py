"""The docs pages, checked against the code they describe: every Python block is
valid as written (no undefined name, no `await` outside a function), the
examples of the Python API, history, Pool and HTTP pages run (placeholders
replaced by a temp workspace), the command line page names every command and
option `corral COMMAND --help` has and none it lacks, the workspace-config table
names every `[policy]` key a workspace may narrow, and nothing tells a user to
`pip install corral[...]`, which would fetch whatever a registry calls corral
instead of this clone."""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral import Sandbox
from corral.config_keys import KEYS
from corral.faces.cli import build_parser
from tests.helpers.doc_blocks import DOCS, REPO, block, python_blocks
from tests.helpers.http_helpers import TOKENS, Server, post


def run(code: str, cwd: Path, *, replace: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for placeholder, real in replace.items():
        assert placeholder in code, placeholder
        code = code.replace(placeholder, real)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("page", "index", "code"), list(python_blocks()),
                         ids=lambda v: str(v) if not isinstance(v, str) or "\n" not in v else "")
def test_python_block_is_valid_as_written(page: str, index: int, code: str,
                                          tmp_path: Path) -> None:
    """pyflakes' checks (ruff's F rules): imports, undefined names, top-level await."""
    source = tmp_path / f"{Path(page).stem}_{index}.py"
    source.write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F",
         "--output-format", "concise", str(source)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stdout


def test_api_examples_run(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('hi')\n")
    (tmp_path / "operator.toml").write_text("[limits]\ntimeout_s = 5\n")
    for code in [c for name, _, c in python_blocks() if name == "api.md"]:
        done = run(code, tmp_path, replace={
            "/path/to/workspace": str(ws),
            **({"/path/to/operator.toml": str(tmp_path / "operator.toml")}
               if "/path/to/operator.toml" in code else {}),
        })
        assert done.returncode == 0, done.stderr


def test_api_page_operator_config_applies_the_workspace_config(tmp_path: Path) -> None:
    """What api.md says: Sandbox(ws) and from_config of operator_config(ws) both
    apply ws/corral.toml, and from_config(path) serves the file's folder unless
    workspace= names another."""
    from corral.trust import operator_config

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "corral.toml").write_text('[tools]\nwrite_file = "supervised"\n')
    write = {"path": "a.txt", "content": "x"}
    with Sandbox(ws) as sb:
        assert sb.call("write_file", write)["error"]["code"] == "approval_required"
    with Sandbox.from_config(operator_config(ws)) as sb:
        assert sb.call("write_file", write)["error"]["code"] == "approval_required"
    (tmp_path / "op.toml").write_text("")
    with Sandbox.from_config(tmp_path / "op.toml") as sb:
        assert [root.path for root in sb.roots] == [str(tmp_path)]
    with Sandbox.from_config(tmp_path / "op.toml", workspace=ws) as sb:
        assert [root.path for root in sb.roots] == [str(ws)]
    page = (DOCS / "api.md").read_text()
    assert "may only narrow them" in page and "operator_config(workspace" in page


def test_history_examples_run(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    code = block("history.md", "sb.checkpoint(")
    done = run(code, tmp_path, replace={"/path/to/workspace": str(ws)})
    assert done.returncode == 0, done.stderr
    for _, _, shown in python_blocks():
        if shown.lstrip().startswith("{"):  # a result as data
            assert isinstance(ast.literal_eval(re.sub(r"#.*", "", shown)), dict)


def pool_tree(top: Path) -> dict[str, str]:
    """The pool example's paths, made under `top`; {placeholder: real}."""
    for name in ("alice", "bob", "carol"):
        (top / "srv" / "ws" / name).mkdir(parents=True)
    (top / "srv" / "ws" / "alice" / "src").mkdir()
    (top / "srv" / "ws" / "alice" / "src" / "app.py").write_text("print('alice')\n")
    (top / "srv" / "ws" / "carol" / "notes.txt").write_text("TODO: carol's\n")
    (top / "etc" / "corral").mkdir(parents=True)
    (top / "etc" / "corral" / "bob.toml").write_text(
        f'[workspace]\nroot = "{top / "srv" / "ws" / "bob"}"\n')
    (top / "log").mkdir()
    return {"/srv/ws": str(top / "srv" / "ws"), "/etc/corral": str(top / "etc" / "corral"),
            "/var/log/corral": str(top / "log")}


def test_pool_example_runs_as_written(tmp_path: Path) -> None:
    code = block("pool.md", "Pool(")
    done = run(code, tmp_path, replace=pool_tree(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "     1\tprint('alice')"
    assert "notes.txt" in lines[1] and "TODO: carol's" in lines[1]
    stats = ast.literal_eval(lines[-1])  # how many workers: the pool's business
    assert set(stats) == {"sandboxes", "workers", "idle_workers", "busy_workers", "queued_calls"}
    assert stats["sandboxes"] == 3 and stats["workers"] >= 2
    assert json.loads((tmp_path / "log" / "alice.jsonl").read_text().splitlines()[0])


def test_pool_example_approval_callback_reads_a_real_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example's ask_the_user, as written, against a supervised call."""
    tree = ast.parse(block("pool.md", "Pool("))
    (function,) = [n for n in tree.body
                   if isinstance(n, ast.FunctionDef) and n.name == "ask_the_user"]
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module([function], []), "pool.md", "exec"), namespace)
    asked: list[str] = []

    def answer(prompt: str) -> str:
        asked.append(prompt)
        return "y"

    monkeypatch.setattr(builtins, "input", answer)
    (tmp_path / "op.toml").write_text('[tools]\nwrite_file = "supervised"\n')
    with Sandbox.from_config(tmp_path / "op.toml", approve=namespace["ask_the_user"]) as sb:
        assert sb.call("write_file", {"path": "b.txt", "content": "x"})["ok"]
    assert asked == ["write_file b.txt: allow? [y/N] "]


def test_http_example_runs_and_a_wrong_token_is_what_the_page_says(server: Server) -> None:
    (server.alice / "README.md").write_text("# alice\n")
    code = block("http.md", "streamable_http_client")
    url = {"http://127.0.0.1:8931/mcp": server.url}
    done = run(code, server.alice, replace={**url, "the tenant's token": TOKENS["alice"]})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "     1\t# alice\n"
    done = run(code, server.alice, replace={**url, "the tenant's token": "not-a-token"})
    assert done.returncode != 0
    assert "MCPError: Server returned an error response" in done.stderr
    assert "401" not in done.stderr  # why the page explains it
    status, headers, body = post(server, {}, token="not-a-token")
    assert (status, body.strip()) == (401, b"a valid bearer token is required")
    assert headers["www-authenticate"] == 'Bearer realm="corral"'
    assert post(server, {}, token="alice")[0] == 200


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in build_parser()._actions
                 if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_cli_page_names_every_command_and_option() -> None:
    page = (DOCS / "cli.md").read_text()
    synopsis = page.split("```\n")[1]
    missing = []
    for name, parser in subcommands().items():
        if f"corral {name} " not in synopsis and f"corral {name}\n" not in synopsis:
            missing.append(name)
        for action in parser._actions:
            options = [o for o in action.option_strings if o.startswith("--")]
            if not options or options[0] in ("--help", "--workspace", "--config"):
                continue
            if options[0] not in page:
                missing.append(f"{name} {options[0]}")
            for choice in action.choices or ():
                if choice not in page:
                    missing.append(f"{name} {options[0]} {choice}")
    assert not missing, f"docs/cli.md lacks {missing}"


def test_cli_page_invents_no_option() -> None:
    commands = subcommands()
    synopsis = (DOCS / "cli.md").read_text().split("```\n")[1]
    command = ""
    for line in synopsis.splitlines():
        named = re.match(r"corral ([a-z-]+)", line)
        if named:
            command = named.group(1)
        for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            if option == "--version":
                continue
            known = {o for a in commands[command]._actions for o in a.option_strings}
            assert option in known, f"cli.md: corral {command} has no {option}"


def test_workspace_config_table_names_every_key_a_workspace_may_set() -> None:
    page = (DOCS / "configuration.md").read_text()
    table = page.split("| in a workspace config |")[1].split("\n\n")[0]
    rows = [line.split("|")[1] for line in table.splitlines()[2:]]
    for key in KEYS:
        if key.section == "policy" and key.narrows != "operator":
            assert any("[policy]" in row and re.search(rf"\b{key.name}`", row)
                       for row in rows), key.name
        assert any(f"[{key.section}]" in row for row in rows), key.section
    assert any("`[history]`" in row for row in rows)


INSTALL_FROM_A_REGISTRY = re.compile(r"""corral\[|pip install ['"]?corral(?![\w/.-])""")


def test_no_page_or_message_installs_corral_from_a_registry() -> None:
    texts = [REPO / "README.md", *DOCS.glob("*.md"), *(REPO / "corral").rglob("*.py")]
    found = [f"{path.relative_to(REPO)}: {m.group(0)}" for path in texts
             for m in INSTALL_FROM_A_REGISTRY.finditer(path.read_text())]
    assert not found
    help_text = subprocess.run([sys.executable, "-m", "corral", "serve", "--help"],
                               capture_output=True, text=True, timeout=60, check=True).stdout
    assert "pip install '.[http]'" in help_text


def test_the_needs_uvicorn_error_says_to_install_from_the_clone(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "tenants.toml").write_text(
        f'[[tenant]]\nname = "a"\ntoken_sha256 = "{"0" * 64}"\nworkspace = "ws"\n')
    without_uvicorn = ("import sys; sys.modules['uvicorn'] = None; "
                       "from corral.faces.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run(
        [sys.executable, "-c", without_uvicorn, "serve", "--http", "127.0.0.1:0",
         "--tenants", str(tmp_path / "tenants.toml")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "corral: error: the HTTP face needs the http extra: pip install '.[http]' in the "
        "corral clone")
    assert not INSTALL_FROM_A_REGISTRY.search(done.stderr)
