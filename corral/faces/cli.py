"""The `corral` command: doctor, call, tools, serve, mcp-config, history, audit.

Exit codes: 0 success; 1 a tool call that returned an error result, a sandbox
that could not start (e.g. a layer in `require` that the kernel lacks), or a
doctor that found a worker without a layer the kernel offers; 2 misuse: bad
arguments, a workspace or config that cannot be used.
Errors are one line on stderr: `corral: error: ...`.

On a terminal the command talks to a person (a call prints the result's
`text`, a supervised call asks y/N); into a pipe it prints JSON for programs.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import functools
import gc
import json
import os
import re
import shlex
import signal
import stat
import sys
import textwrap
from collections.abc import Callable
from typing import Any, NoReturn

from corral import __version__
from corral._malloc import keep_freed_memory
from corral.api import (
    NO_ONE_TO_ASK,
    Approver,
    Sandbox,
    check_history_path,
    default_store_inside,
    probe,
)
from corral.audit import LOCK_WAIT_S, AuditError, read_key
from corral.config import Config, ConfigError, Remedy
from corral.errors import CorralError, SandboxError, did_you_mean
from corral.faces import cli_history
from corral.faces.stdio import protocol_streams
from corral.tools.formats import FORMATS
from corral.tools.registry import TOOLS
from corral.trust import operator_config

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and failed: a tool error, a sandbox that cannot start
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT


Commands = argparse._SubParsersAction  # what add_subparsers returns


class Parser(argparse.ArgumentParser):
    """argparse, plus "did you mean" for a misspelt command or choice (argparse only
    learns that in Python 3.14; its message is the one place the choices are named),
    and its help formatter told the width (help_width) instead of asking shutil."""

    def __init__(self, *, formatter_class: Any = argparse.HelpFormatter, **kwargs: Any) -> None:
        width = functools.partial(formatter_class, width=help_width())
        super().__init__(formatter_class=width, **kwargs)

    def error(self, message: str) -> NoReturn:
        invalid = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if invalid:
            choices = re.findall(r"'([^']*)'", invalid.group(2))
            message += did_you_mean(invalid.group(1), choices)
        super().error(message)


def help_width() -> int:
    """The width argparse would use, as shutil.get_terminal_size() gives it (COLUMNS,
    else the terminal's, else 80) less a margin of 2. Written out because argparse
    builds a help formatter for each argument it adds (to check its metavar) and
    the first one imports shutil, with bz2 and lzma: ~3 ms of CPU, a third of a
    bare interpreter's start, for a command that prints no help."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


class UsageError(Exception):
    """Misuse of the command line: reported in one line, exit code 2."""



def loaded_config(args: argparse.Namespace) -> Config:
    """The operator's config (--config, else the user config, else the defaults) for
    the workspace (--workspace, else the config's root, else the current
    directory), narrowed by the workspace's own corral.toml (see corral.trust)."""
    if args.workspace is not None and not os.path.isdir(args.workspace):
        raise UsageError(f"workspace {args.workspace} is not a directory")
    if args.config is not None and not os.path.isfile(args.config):
        raise UsageError(f"config file {args.config} does not exist")
    return operator_config(args.workspace, args.config)


def check_history(config: Config) -> None:
    """ConfigError if the store the operator named would lie inside a root, before
    anything starts (the default store there turns history off: see api.py)."""
    check_history_path(config.history, [root.path for root in config.roots])


def history_off(config: Config) -> str | None:
    """Why history will be off for this config: the default store inside a root."""
    return default_store_inside(config.history, [root.path for root in config.roots])


def effective_config(args: argparse.Namespace) -> Config:
    """loaded_config, checked as far as it can be without starting a sandbox."""
    config = loaded_config(args)
    check_history(config)
    return config


def open_sandbox(args: argparse.Namespace, approve: Approver | None = None) -> Sandbox:
    return Sandbox.from_config(effective_config(args), approve=approve)


def open_history_sandbox(args: argparse.Namespace) -> Sandbox:
    """open_sandbox for the history commands, which have nothing to work on with
    history off: say so in one line instead of an empty list or a failed undo."""
    config = effective_config(args)
    if not config.history.enabled:
        raise CorralError(
            "tool_disabled", f"{args.command}: history is off for this workspace "
            "([history] enabled = false), so nothing is recorded to list, undo or rewind.")
    if (why := history_off(config)) is not None:
        raise CorralError("tool_disabled", f"{args.command}: {why}.")
    return Sandbox.from_config(config)


def said_on_the_command_line(remedy: Remedy) -> str:
    """A config error's fix in this face's words: its flags, not Python's calls."""
    if remedy.where == "name_file":
        return "To trust the file, name it with --config FILE"
    return f"Set {', '.join(remedy.keys)} in a config passed with --config (or the user config)"


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def missing_layers(kernel: dict[str, Any], worker: dict[str, Any]) -> list[str]:
    """Layers the kernel offers that the worker does not run under."""
    lacking = [key for key in kernel if kernel[key] and key in worker and not worker[key]]
    return [key.removesuffix("_abi") for key in lacking]


def namespace_refusal() -> str:
    """Why a worker can have no mount namespace here, and what usually causes it."""
    from corral.api import mount_namespace_refusal

    said = mount_namespace_refusal() or "refused"
    return (f"unshare: {said}; not root and no unprivileged user namespaces, or a seccomp "
            "profile that refuses unshare, as Docker's and containerd's defaults do")


def describe(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "yes" if value else "no"
    return str(value)


def verdict(worker: dict[str, Any], missing: list[str]) -> str:
    """The doctor's first line: is a worker confined, and by what."""
    if missing:
        return f"warning: workers lack {', '.join(missing)}, which the kernel offers"
    active = [
        f"Landlock ABI {worker['landlock_abi']}" if key == "landlock_abi"
        else "a mount namespace" if key == "mount_namespace" else key
        for key in ("landlock_abi", "seccomp", "no_new_privs", "openat2", "rlimits",
                    "mount_namespace")
        if worker.get(key)
    ]
    lacking = [key.removesuffix("_abi") for key in worker if key != "level" and not worker[key]]
    if worker.get("level") == "full":
        return f"ok: workers are confined by {', '.join(active)}"
    if not active:
        return "not confined: this kernel offers none of corral's layers"
    return (f"partly confined: workers run with {', '.join(active)}; "
            f"this kernel lacks {', '.join(lacking)}")


def policy_lines(sandbox: Sandbox) -> list[str]:
    """The roots, tool modes, rules and limits a sandbox runs under, for people."""
    policy, lines = sandbox.policy, []
    for index, root in enumerate(sandbox.roots):
        lines.append(f"  {'workspace' if index == 0 else 'root':<18}{root.path} ({root.mode})")
    modes: dict[str, list[str]] = {}
    for tool in TOOLS.values():
        modes.setdefault(policy.tool_mode(tool.name, writes=tool.writes), []).append(tool.name)
    for mode in ("allow", "supervised", "deny"):
        if modes.get(mode):
            lines.append(f"  {'tools ' + mode:<18}{', '.join(modes[mode])}")
    for kind, rules in (("rule", policy.rules), ("workspace rule", policy.workspace_rules)):
        for rule in rules:
            scope = [*([] if rule.tools == ("*",) else rule.tools), *rule.access]
            tools = f" for {', '.join(scope)}" if scope else ""
            lines.append(f"  {kind:<18}{rule.name}: {rule.action}{tools} {', '.join(rule.paths)}")
    lines.append(f"  {'default':<18}{policy.default_action}")
    lines.append(f"  {'hardlinks':<18}{policy.hardlinks}")
    lines.append(f"  {'read_before_write':<18}{policy.read_before_write}")
    if policy.path_regex:
        lines.append(f"  {'path_regex':<18}{', '.join(policy.path_regex)}")
    limits = ", ".join(f"{k} {v}" for k, v in vars(sandbox.limits).items())
    lines.append(f"  {'limits':<18}{limits}")
    quota = ", ".join(f"{k} {v}" for k, v in vars(sandbox.quota).items() if v is not None)
    lines.append(f"  {'quota':<18}{quota or 'none'}")
    return lines


def cmd_doctor(args: argparse.Namespace) -> int:
    kernel = probe()
    config = loaded_config(args)
    history = history_off(config)  # said here, not warned again by the sandbox
    try:  # a store the sandbox refuses is a finding: report it, probe a worker without it
        check_history(config)
        problem = None
    except ConfigError as exc:
        problem = history = f"error: {exc.spelled(said_on_the_command_line)}"
    if history is not None:
        config = dataclasses.replace(
            config, history=dataclasses.replace(config.history, enabled=False))
    with Sandbox.from_config(config) as sandbox:
        history = history or sandbox.history_off or "on"
        worker = sandbox.confinement
        workspace = sandbox.roots[0].path
        policy = policy_lines(sandbox)
        policy_data = sandbox.policy.to_dict()
    missing = missing_layers(kernel, worker)
    found = problem or verdict(worker, missing)
    if args.json:
        print_json({
            "verdict": found, "kernel": kernel, "worker": worker,
            "missing": missing, "config": config.source,
            "workspace_config": config.narrowed_by, "policy": policy_data,
            "history": history,
        })
    else:
        print(found)
        print(f"config: {config.source or 'none (the built-in defaults)'}")
        if config.narrowed_by:
            print(f"narrowed by: {config.narrowed_by} (the workspace's own, untrusted)")
        print(f"history: {history}")
        print("policy in effect:")
        print("\n".join(policy))
        print("the kernel offers:")
        for key, value in kernel.items():
            why = f" ({namespace_refusal()})" if key == "mount_namespace" and not value else ""
            print(f"  {key:<16}{describe(value)}{why}")
        print(f"a worker for {workspace} runs with:")
        for key, value in worker.items():
            print(f"  {key:<16}{describe(value)}")
    return EXIT_OK if not missing and problem is None else EXIT_FAILED


def ask_on_terminal(request: dict[str, Any]) -> bool:
    """A supervised call's approval, asked of the person at the terminal."""
    tool, paths = request["tool"], [target["shown"] for target in request.get("targets") or ()]
    rules = [rule for rule in request.get("rules") or () if rule]
    why = f"rule {', '.join(rules)}" if rules else f'{tool} = "supervised" in [tools]'
    on = f" on {', '.join(paths)}" if paths else ""
    if request.get("diff"):  # bounded and escaped (the request's diff)
        sys.stderr.write(request["diff"] + "\n")
    sys.stderr.write(f"corral: {tool}{on} needs your approval ({why}). Allow? [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def approver(args: argparse.Namespace) -> Approver | None:
    """--yes approves every supervised call; a terminal on stdin is asked; else nobody."""
    if args.yes:
        return lambda request: True
    return ask_on_terminal if sys.stdin is not None and sys.stdin.isatty() else None


def explain(outcome: dict[str, Any]) -> dict[str, Any]:
    """The result, with an approval error telling a command-line user what to do."""
    error = outcome.get("error") or {}
    if error.get("code") != "approval_required":
        return outcome
    what = error["message"].split(NO_ONE_TO_ASK)[0].rstrip(".")
    tool = outcome["tool"]
    fix = f', or set {tool} = "allow" in [tools]' if what.startswith(f"the tool {tool} ") else ""
    return {**outcome, "error": {**error, "message": f"{what}: run with --yes{fix}."}}


def wants_text(args: argparse.Namespace) -> bool:
    """--text / --json as asked; else text for a person at a terminal, JSON for a pipe."""
    return args.output == "text" if args.output else sys.stdout.isatty()


def closed_streams(args: argparse.Namespace) -> str | None:
    """What a command cannot do for a closed standard stream (`>&-`, `<&-`): every
    command but an HTTP server writes its result (a stdio server its protocol) to
    stdout, and a stdio server and `call -` read stdin; None when it has what it
    needs."""
    stdio_server = args.run is cmd_serve and getattr(args, "http", None) is None
    if sys.stdout is None and (stdio_server or args.run is not cmd_serve):
        return "standard output is closed: there is nowhere to write the result"
    if sys.stdin is None and (stdio_server or getattr(args, "arguments", None) == "-"):
        return "standard input is closed: there is nothing to read"
    return None


def cmd_call(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.arguments == "-" else args.arguments
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"ARGUMENTS is not valid JSON: {exc}") from exc
    except RecursionError:  # the parser recurses once per level of nesting
        raise UsageError("ARGUMENTS is not valid JSON: nested too deeply") from None
    if not isinstance(arguments, dict):
        raise UsageError('ARGUMENTS must be a JSON object, like \'{"path": "README.md"}\'')
    with open_sandbox(args, approver(args)) as sandbox:
        outcome = explain(sandbox.call(args.tool, arguments))
    if not wants_text(args):
        print_json(outcome)
    elif outcome["ok"]:
        print(outcome["text"])
    else:
        print(f"{outcome['error']['code']}: {outcome['error']['message']}", file=sys.stderr)
    return EXIT_OK if outcome["ok"] else EXIT_FAILED


def cmd_tools(args: argparse.Namespace) -> int:
    with open_sandbox(args) as sandbox:
        specs = sandbox.tools(format=args.format, strict=args.strict)
    print_json(specs)
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    # imported here, not at the top: `corral call` would load the servers for nothing
    from corral.faces import logs

    with logs.configured(args.log_format):
        return serve(args)


def serve(args: argparse.Namespace) -> int:
    from corral.faces import jsonl_server, logs, mcp_server

    keep_freed_memory()  # a server passes megabyte answers on, one after another
    if args.http is not None:
        return serve_http(args)
    if args.tenants is not None:
        raise UsageError("--tenants goes with --http HOST:PORT")
    if args.metrics is not None:
        raise UsageError("--metrics goes with --http HOST:PORT (a stdio server lives as long "
                         "as one client's session)")
    if args.state_key_file is not None:
        raise UsageError("--state-key-file goes with --http HOST:PORT (a stdio server "
                         "serves one client, which never reaches another process)")
    if args.jsonl and args.structured_text is not None:
        raise UsageError("--structured-text and --no-structured-text are for MCP; --jsonl "
                         "results have no structuredContent")
    if sys.stdin.isatty():  # a person ran it by hand: say that it is waiting, and for what
        protocol = "JSON lines" if args.jsonl else "MCP"
        logs.log.info("corral: serving %s on stdin/stdout until end of input (Ctrl-D); an MCP "
                      "client starts this itself, see `corral mcp-config`", protocol)
    if args.jsonl:
        # Streams first: the sandbox's processes must not inherit the protocol's fd 1.
        reader, writer = protocol_streams()
        with open_sandbox(args) as sandbox:
            jsonl_server.serve(sandbox, reader, writer)
        return EXIT_OK
    # The MCP server opens the sandbox on `initialize`; check what can be checked first,
    # so a bad command line or config fails here, in one line, before the protocol starts.
    config = effective_config(args)
    served = mcp_server.serve(
        lambda approve: Sandbox.from_config(config, approve=approve), *protocol_streams(),
        said_on_the_command_line, args.structured_text,
    )
    return EXIT_OK if served else EXIT_FAILED


def serve_http(args: argparse.Namespace) -> int:
    """MCP over Streamable HTTP for the tenants of --tenants, in front of one Pool."""
    from corral.faces import http_server  # its server (uvicorn) is an optional extra
    from corral.faces.roster import load_roster
    from corral.faces.state_key import load_state_key

    if args.jsonl:
        raise UsageError("--jsonl serves stdio only; --http serves MCP")
    if args.tenants is None:
        raise UsageError("--http needs --tenants FILE (who may reach which workspace)")
    if args.workspace is not None or args.config is not None:
        raise UsageError("with --http, each tenant names its workspace or config in --tenants")
    http_server.parse_address(args.http)  # a bad address fails here, in one line
    if args.metrics is not None:
        http_server.parse_address(args.metrics)
    # every tenant's config is checked before anything listens (and again at SIGHUP)
    roster = load_roster(args.tenants)
    state_key = None if args.state_key_file is None else load_state_key(args.state_key_file)
    http_server.serve(
        args.http, roster, allowed_origins=args.allow_origin, max_workers=args.max_workers,
        idle_timeout_s=args.idle_timeout, max_body_bytes=args.max_body_bytes,
        max_connections=args.max_connections, max_tenant_requests=args.max_tenant_requests,
        client_timeout_s=args.client_timeout,
        ready=http_server.announce, metrics=args.metrics, log_format=args.log_format,
        structured_text=args.structured_text, state_key=state_key,
        drain_delay_s=args.drain_delay, drain_timeout_s=args.drain_timeout,
        reload=functools.partial(load_roster, os.path.abspath(args.tenants)),
    )
    return EXIT_OK


CLIENTS = {  # --client: where the printed block goes
    "claude": "paste it into claude_desktop_config.json (Claude Desktop) or .mcp.json "
    "(Claude Code), or add it to Claude Code with:",
    "cursor": "paste it into ~/.cursor/mcp.json, or .cursor/mcp.json in a project",
    "vscode": "paste it into .vscode/mcp.json in the project",
    "codex": "paste it into ~/.codex/config.toml, or .codex/config.toml in a trusted project",
}


def server_command(args: argparse.Namespace) -> list[str]:
    """`corral serve` for this workspace, spelled for a client that starts it: the
    running interpreter by absolute path (clients do not inherit a virtualenv's
    PATH), absolute paths throughout (clients start servers in any directory). A
    --config alone names its own workspace, as it does for `serve`."""
    argv = [sys.executable, "-m", "corral", "serve"]
    workspace = None
    if args.workspace is not None or args.config is None:
        workspace = os.path.realpath(args.workspace or ".")
        if not os.path.isdir(workspace):
            raise UsageError(f"workspace {args.workspace} is not a directory")
        argv += ["--workspace", workspace]
    if args.config is not None:
        if not os.path.isfile(args.config):
            raise UsageError(f"config file {args.config} does not exist")
        argv += ["--config", os.path.realpath(args.config)]
    # What `serve` would refuse fails here, in one line, not later inside the client.
    effective_config(argparse.Namespace(**{**vars(args), "workspace": workspace}))
    return argv


def config_block(servers: str, server: dict[str, Any]) -> str:
    """`{servers: {"corral": server}}` indented, with the args list on one line, as
    people write these blocks (json.dumps cannot indent some levels only)."""
    args = json.dumps(server["args"], ensure_ascii=False)
    text = json.dumps({servers: {"corral": {**server, "args": None}}}, indent=2,
                      ensure_ascii=False)
    return text.replace('"args": null', f'"args": {args}')


def toml_block(command: str, arguments: list[str]) -> str:
    """Codex's [mcp_servers.corral] table. A JSON string is a TOML basic string
    (the same quotes and escapes), so json.dumps spells each value."""
    args = ", ".join(json.dumps(argument, ensure_ascii=False) for argument in arguments)
    return (f"[mcp_servers.corral]\ncommand = {json.dumps(command, ensure_ascii=False)}\n"
            f"args = [{args}]")


def cmd_mcp_config(args: argparse.Namespace) -> int:
    command, *arguments = server_command(args)
    if args.client == "codex":
        print(toml_block(command, arguments))
    elif args.client == "vscode":
        print(config_block("servers", {"type": "stdio", "command": command, "args": arguments}))
    else:
        print(config_block("mcpServers", {"command": command, "args": arguments}))
    where = CLIENTS.get(args.client, "paste it into the client's MCP settings "
                       "(Claude Desktop: claude_desktop_config.json)")
    print(f"corral: {where}", file=sys.stderr)
    if args.client == "claude":
        claude = ["claude", "mcp", "add", "corral", "--", command, *arguments]
        print(f"  {shlex.join(claude)}", file=sys.stderr)
    return EXIT_OK


def add_doctor(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    doctor = commands.add_parser(
        "doctor",
        parents=common,
        help="show what confinement the kernel offers and what a worker gets",
        description="Probe the kernel (Landlock ABI, seccomp, openat2, no_new_privs), start "
        "a sandbox for the workspace and show, after a one-line verdict, the config file and "
        "policy in effect and which layers its workers actually run under. "
        "Exit code 1 if a worker lacks a layer the kernel offers.",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(run=cmd_doctor)


def add_call(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    call = commands.add_parser(
        "call",
        parents=common,
        help="run one tool call in a confined worker",
        description=textwrap.fill(
            "Run one tool call in a confined worker. On a terminal it prints the result's "
            "text (or `code: message` on stderr); into a pipe, the result as JSON. Exit code "
            "0 if the call succeeded, 1 if it returned an error result.", 78
        ),
        epilog=textwrap.fill(f"tools: {', '.join(TOOLS)}", 78, subsequent_indent="  ")
        + "\n\nexample:\n  corral call read_file '{\"path\": \"README.md\", \"limit\": 5}'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    call.add_argument("tool", metavar="TOOL", help="tool name, e.g. read_file")
    call.add_argument(
        "arguments",
        metavar="ARGUMENTS",
        nargs="?",
        default="{}",
        help="the tool's arguments as a JSON object, or - to read them from stdin",
    )
    output = call.add_mutually_exclusive_group()
    output.add_argument(
        "--text", dest="output", action="store_const", const="text",
        help="print the result's text (the default on a terminal)",
    )
    output.add_argument(
        "--json", dest="output", action="store_const", const="json",
        help="print the whole result as JSON (the default into a pipe)",
    )
    call.add_argument(
        "--yes", action="store_true",
        help="approve a supervised call without asking (on a terminal it asks y/N)",
    )
    call.set_defaults(run=cmd_call)


def add_tools(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    tools = commands.add_parser(
        "tools",
        parents=common,
        help="print the tool specs visible under the policy",
        description="Print the tools the policy allows as JSON, shaped for MCP, OpenAI "
        "(Chat Completions or Responses function tools) or Anthropic (Messages API tools).",
    )
    tools.add_argument(
        "--format", choices=sorted(FORMATS), default="mcp", help="spec shape (default: mcp)"
    )
    tools.add_argument(
        "--strict", action="store_true",
        help="schemas for strict tool calling: every property required (null means the "
        "default), nothing a strict grammar refuses",
    )
    tools.set_defaults(run=cmd_tools)


def add_serve(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        parents=common,
        help="serve the tools over stdio (MCP, or JSON lines with --jsonl)",
        description="Serve the tools on stdin/stdout until stdin closes: the Model Context "
        "Protocol by default, or one JSON request and one JSON result per line with --jsonl.",
    )
    serve.add_argument(
        "--jsonl",
        action="store_true",
        help='JSON lines: {"id", "tool", "arguments"} in, the result plus "id" out',
    )
    serve.add_argument(
        "--log-format", choices=["text", "json"], default="text",
        help="log lines on stderr: text, or one JSON object a line (default: text)",
    )
    shown = serve.add_mutually_exclusive_group()
    shown.add_argument(
        "--structured-text", dest="structured_text", action="store_true", default=None,
        help="MCP: every result's structuredContent repeats the text the model is shown, "
        "for every client (by default only for those that show the model structuredContent: "
        "fastmcp, and pydantic-ai and others that name themselves as the Python SDK does)",
    )
    shown.add_argument(
        "--no-structured-text", dest="structured_text", action="store_false",
        help="MCP: no result's structuredContent repeats the text (it stays in content), "
        "whatever the client",
    )
    http = serve.add_argument_group(
        "many tenants over HTTP (needs the http extra: pip install '.[http]' in corral's "
        "source directory, or pip install uvicorn prometheus_client)",
        "MCP Streamable HTTP at /mcp in front of one shared pool of workers; each tenant "
        "is reached only by its bearer token (see the HTTP page of the docs)",
    )
    http.add_argument("--http", metavar="HOST:PORT",
                      help="listen here (host 127.0.0.1 unless given; port 0: any free port)")
    http.add_argument("--tenants", metavar="FILE",
                      help="tenants.toml: [[tenant]] name, token_sha256, config or workspace")
    http.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                      help="a browser Origin allowed to call (repeatable; default: loopback "
                      "origins only)")
    http.add_argument("--max-workers", type=int, default=64,
                      help="workers of every tenant together (default 64)")
    http.add_argument("--idle-timeout", type=float, default=30.0, metavar="SECONDS",
                      help="an idle worker exits after this long (default 30)")
    http.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024,
                      help="largest request body (default 4 MiB)")
    http.add_argument("--max-connections", type=positive(int), default=512, metavar="N",
                      help="connections open at once; past it a new one pushes out the one "
                      "waiting longest for its headers, or gets 503 (default 512)")
    http.add_argument("--max-tenant-requests", type=positive(int), default=16, metavar="N",
                      help="requests of one tenant in progress at once; past it, 429 "
                      "(default 16)")
    http.add_argument("--client-timeout", type=positive(float), default=30.0, metavar="SECONDS",
                      help="a request's headers, then its body, must each arrive within this "
                      "long, else 408; a client that leaves its answer unread this long is "
                      "cut off (default 30)")
    http.add_argument("--state-key-file", metavar="PATH",
                      help="the key that seals 2026-07-28 requestState (a file only the server "
                      "may read, 32 bytes or more): replicas and restarts given the same file "
                      "accept each other's rounds (default: a key of this process's own)")
    http.add_argument("--metrics", metavar="HOST:PORT",
                      help="serve Prometheus metrics here, on a listener of their own (needs "
                      "prometheus_client; host 127.0.0.1 unless given; port 0: any free port)")
    http.add_argument("--drain-delay", type=not_negative, default=0.0, metavar="SECONDS",
                      help="at SIGTERM, /readyz answers 503 at once and requests are still "
                      "served this long (for a load balancer to stop sending them; default 0)")
    http.add_argument("--drain-timeout", type=not_negative, metavar="SECONDS",
                      help="then new requests get 503 and those in flight have this long to "
                      "end before their calls are ended (default: the longest [limits] "
                      "timeout_s of any tenant, plus 5)")
    serve.set_defaults(run=cmd_serve)


def not_negative(text: str) -> float:
    """An argparse type: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0 or more), not {text!r}")
    return value


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: a number of `kind` above zero."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}")
        return value

    return parse


def add_mcp_config(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    config = commands.add_parser(
        "mcp-config",
        parents=common,
        help="print the setup an MCP client needs to start corral",
        description="Print a ready MCP client configuration that starts `corral serve` for "
        "the workspace with this interpreter, by absolute path. Without --client: the "
        "mcpServers JSON most clients take (Claude Desktop, Cursor, ...).",
    )
    config.add_argument(
        "--client", choices=sorted(CLIENTS),
        help="claude: the block and a `claude mcp add` command; cursor, vscode: their "
        "mcp.json; codex: its config.toml table",
    )
    config.set_defaults(run=cmd_mcp_config)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from corral import audit_verify  # as cmd_serve's imports: only this command needs it

    path, key_file = args.path, args.key
    if path is None or key_file is None:  # what the operator's config names
        config = operator_config(args.workspace, args.config)
        path = path or config.audit_path
        key_file = key_file or (config.audit_key_file if path == config.audit_path else None)
    if path is None:
        raise UsageError("no audit log: name one, or set [audit] path in the config")
    try:
        key = read_key(key_file) if key_file else None
    except AuditError as exc:
        raise UsageError(str(exc)) from None
    path = os.path.abspath(path)
    try:  # one consistent set while writers append and rotate
        with audit_verify.listed(path) as parts:
            for part in parts:
                # the live log by its descriptor: by now its name may be a rotation's
                if not (stat.S_ISREG(os.fstat(part.fd).st_mode) if part.fd is not None
                        else os.path.isfile(part.name)):
                    raise UsageError(f"{part.name}: no such audit log")
            verdict = audit_verify.verify(parts, key, args.head, continues=args.continues)
    except (FileNotFoundError, IsADirectoryError):
        raise UsageError(f"{path}: no such audit log") from None
    except OSError as exc:
        raise UsageError(f"cannot read {exc.filename or path}: {exc.strerror}") from None
    except audit_verify.LockHeld:
        raise UsageError(f"{path}: another process has held the log's lock for "
                         f"{LOCK_WAIT_S:g} s (a hung writer?); try again") from None
    for note in verdict.notes:
        print(f"corral: {note}", file=sys.stderr)
    if not verdict.ok:
        print(f"broken: {verdict.broken}")
        return EXIT_FAILED
    print(f"ok {verdict.records} records")
    if verdict.head:
        print(f"head {verdict.head}")
    return EXIT_OK


def add_audit(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    audit = commands.add_parser(
        "audit", parents=common, help="check the audit log's chain",
        description="verify: check that every record's prev matches the line before it, "
        "across the rotated files PATH.1, PATH.2, ... and PATH. Prints `ok N records` and "
        "the chain's head (exit 0), or `broken: FILE:LINE: why` for the first broken line "
        "(exit 1).",
    )
    audit.add_argument("action", choices=["verify"], help="what to do (verify)")
    audit.add_argument("path", metavar="PATH", nargs="?",
                       help="the log (default: [audit] path of the config); a rotated "
                       "file PATH.N alone is checked alone")
    audit.add_argument("--key", metavar="FILE",
                       help="the HMAC key file (default: [audit] key_file of the config)")
    audit.add_argument("--head", metavar="DIGEST",
                       help="a head printed before: it must still be in the chain (records "
                       "removed from the end are found only this way)")
    audit.add_argument("--continues", action="store_true",
                       help="the oldest file continues a chain whose earlier files are gone")
    audit.set_defaults(run=cmd_audit_verify)


def add_history(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    """corral history | checkpoint | diff | undo | rewind (corral/faces/cli_history.py)."""
    cli_history.add_commands(commands, common, open_history_sandbox)


Adder = Callable[[Commands, list[argparse.ArgumentParser]], None]

# Each subcommand's name and the `add_*` function that adds its parser (pointing at
# its `cmd_*`), in `corral --help` order: a new command is an entry here.
COMMANDS: dict[str, Adder] = {
    "doctor": add_doctor,
    "call": add_call,
    "tools": add_tools,
    "serve": add_serve,
    "mcp-config": add_mcp_config,
    **dict.fromkeys(cli_history.NAMES, add_history),
    "audit": add_audit,
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line's parser; with `command` (a subcommand's name), one
    that knows only the parsers that command's `add_*` adds: argparse builds each
    parser's help formatter eagerly, and all of them cost a one-shot `corral call`
    ~5 ms of CPU, a tenth of a bare interpreter's start, to parse one subcommand."""
    parser = Parser(
        prog="corral",
        description="Kernel-confined file tools for AI agents.",
        epilog="Run `corral COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"corral {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    place = Parser(add_help=False)
    place.add_argument(
        "--workspace",
        help="the directory the tools work in (default: the current directory, or with "
             "--config that config's [workspace] root)",
    )
    place.add_argument(
        "--config",
        help="the operator's corral.toml, trusted wherever it lies (default: the user config "
        "$XDG_CONFIG_HOME/corral/corral.toml if it exists; a corral.toml in the workspace "
        "can only narrow either)",
    )
    adders = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for add in adders:
        add(commands, [place])
    return parser


def leave(code: int) -> NoReturn:
    """Exit now that the command has done its work (its sandbox closed, its processes
    reaped): without the interpreter's teardown of ~200 modules, ~7 ms of a
    `corral call` on a 2-core VM. As at a usual exit, the exit functions run (a
    coverage tool's, say), then the output is flushed; an output that cannot take
    it is an error, as one while the command ran is (a closed pipe is not: `corral
    tools | head` has what it wanted)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second ^C ends it, not an exception
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # closed when the command started (2>&-)
            continue
        try:
            stream.flush()
        except BrokenPipeError:
            pass
        except OSError as exc:
            if sys.stderr is not None and stream is not sys.stderr:
                with contextlib.suppress(OSError):
                    sys.stderr.write(f"corral: error: {exc}\n")
                    sys.stderr.flush()
            code = code or EXIT_USAGE
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the program itself (a caller passes argv), which exits after one command
        # What is loaded now lives until exit: the collector need not walk it again,
        # nor at exit (~8% of a `corral call`'s CPU on a 2-core VM).
        gc.freeze()
    words = sys.argv[1:] if argv is None else argv
    # the first word names the subcommand, unless it is an option (--help, --version)
    args = build_parser(words[0] if words else None).parse_args(argv)
    closed = closed_streams(args)
    if closed is not None:
        if sys.stderr is not None:
            print(f"corral: error: {closed}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.run(args)
    except ConfigError as exc:
        print(f"corral: error: {exc.spelled(said_on_the_command_line)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `corral tools | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return EXIT_OK
    except (UsageError, CorralError, OSError, ValueError) as exc:
        print(f"corral: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SandboxError as exc:
        print(f"corral: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
