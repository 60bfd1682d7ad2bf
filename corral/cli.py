"""The `corral` command: doctor, call, tools, serve.

Exit codes: 0 success; 1 a tool call that returned an error result, a sandbox
that could not start (e.g. a layer in `require` that the kernel lacks), or a
doctor that found a worker without a layer the kernel offers; 2 misuse: bad
arguments, a workspace or config that cannot be used.
Errors are one line on stderr: `corral: error: ...`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral import jsonl_server, mcp_server
from corral.api import Sandbox
from corral.config import find_config, load_config
from corral.errors import CorralError
from corral.mcp_server import Approve, mcp_tool
from corral.sandbox.pool import SandboxError
from corral.sandbox.probe import probe
from corral.stdio import protocol_streams

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and failed: a tool error, a sandbox that cannot start
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT


Commands = argparse._SubParsersAction  # what add_subparsers returns


class UsageError(Exception):
    """Misuse of the command line: reported in one line, exit code 2."""


def openai_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """The function-tool shape of OpenAI's Chat Completions `tools` list."""
    return {
        "type": "function",
        "function": {
            "name": spec["name"],
            "description": spec["description"],
            "parameters": spec["input_schema"],
        },
    }


def anthropic_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """The client-tool shape of Anthropic's Messages API `tools` list."""
    return {
        "name": spec["name"],
        "description": spec["description"],
        "input_schema": spec["input_schema"],
    }


FORMATS = {"mcp": mcp_tool, "openai": openai_tool, "anthropic": anthropic_tool}


def locate(args: argparse.Namespace) -> tuple[Path, str | None]:
    """The workspace (--workspace, default: the current directory) and the config
    file (--config, default: corral.toml in the workspace, if there is one)."""
    workspace = Path(args.workspace or ".")
    if not workspace.is_dir():
        raise UsageError(f"workspace {workspace} is not a directory")
    if args.config is None:
        return workspace, find_config(workspace)
    if not Path(args.config).is_file():
        raise UsageError(f"config file {args.config} does not exist")
    return workspace, args.config


def open_sandbox(args: argparse.Namespace, approve: Approve | None = None) -> Sandbox:
    """The sandbox the command line describes; an explicit --workspace wins over
    the config file's [workspace] root."""
    workspace, config = locate(args)
    if config is None:
        return Sandbox(workspace, approve=approve)
    if args.workspace is None:
        return Sandbox.from_config(config, approve=approve)
    return Sandbox.from_config(config, workspace=workspace, approve=approve)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def missing_layers(kernel: dict[str, Any], worker: dict[str, Any]) -> list[str]:
    """Layers the kernel offers that the worker does not run under."""
    lacking = [key for key in kernel if kernel[key] and key in worker and not worker[key]]
    return [key.removesuffix("_abi") for key in lacking]


def describe(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "yes" if value else "no"
    return str(value)


def cmd_doctor(args: argparse.Namespace) -> int:
    kernel = probe()
    with open_sandbox(args) as sandbox:
        worker = sandbox.confinement
        workspace = sandbox.roots[0].path
    missing = missing_layers(kernel, worker)
    if args.json:
        print_json({"kernel": kernel, "worker": worker, "missing": missing})
    else:
        print("the kernel offers:")
        for key, value in kernel.items():
            print(f"  {key:<14}{describe(value)}")
        print(f"a worker for {workspace} runs with:")
        for key, value in worker.items():
            print(f"  {key:<14}{describe(value)}")
        if missing:
            print(f"warning: the worker lacks {', '.join(missing)}, which the kernel offers")
    return EXIT_OK if not missing else EXIT_FAILED


def cmd_call(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.arguments == "-" else args.arguments
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"ARGUMENTS is not valid JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise UsageError('ARGUMENTS must be a JSON object, like \'{"path": "README.md"}\'')
    with open_sandbox(args) as sandbox:
        outcome = sandbox.call(args.tool, arguments)
    print_json(outcome)
    return EXIT_OK if outcome["ok"] else EXIT_FAILED


def cmd_tools(args: argparse.Namespace) -> int:
    with open_sandbox(args) as sandbox:
        specs = sandbox.tools()
    print_json([FORMATS[args.format](spec) for spec in specs])
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    if args.jsonl:
        # Streams first: the sandbox's processes must not inherit the protocol's fd 1.
        reader, writer = protocol_streams()
        with open_sandbox(args) as sandbox:
            jsonl_server.serve(sandbox, reader, writer)
        return EXIT_OK
    # The MCP server opens the sandbox on `initialize`; check what can be checked first,
    # so a bad command line fails here, in one line, before the protocol starts.
    _, config = locate(args)
    if config is not None:
        load_config(config)
    served = mcp_server.serve(lambda approve: open_sandbox(args, approve), *protocol_streams())
    return EXIT_OK if served else EXIT_FAILED


def add_doctor(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    doctor = commands.add_parser(
        "doctor",
        parents=common,
        help="show what confinement the kernel offers and what a worker gets",
        description="Probe the kernel (Landlock ABI, seccomp, openat2, no_new_privs), start "
        "a sandbox for the workspace and show which layers its workers actually run under. "
        "Exit code 1 if a worker lacks a layer the kernel offers.",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(run=cmd_doctor)


def add_call(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    call = commands.add_parser(
        "call",
        parents=common,
        help="run one tool call and print its result as JSON",
        description="Run one tool call in a confined worker and print the result as JSON. "
        "Exit code 0 if the call succeeded, 1 if it returned an error result.",
    )
    call.add_argument("tool", metavar="TOOL", help="tool name, e.g. read_file")
    call.add_argument(
        "arguments",
        metavar="ARGUMENTS",
        nargs="?",
        default="{}",
        help="the tool's arguments as a JSON object, or - to read them from stdin",
    )
    call.set_defaults(run=cmd_call)


def add_tools(commands: Commands, common: list[argparse.ArgumentParser]) -> None:
    tools = commands.add_parser(
        "tools",
        parents=common,
        help="print the tool specs visible under the policy",
        description="Print the tools the policy allows as JSON, shaped for MCP, OpenAI "
        "(Chat Completions function tools) or Anthropic (Messages API tools).",
    )
    tools.add_argument(
        "--format", choices=sorted(FORMATS), default="mcp", help="spec shape (default: mcp)"
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
    serve.set_defaults(run=cmd_serve)


# One entry per subcommand, in `corral --help` order: a new command is an `add_*`
# function (its parser, pointing at its `cmd_*`) appended here.
COMMANDS: list[Callable[[Commands, list[argparse.ArgumentParser]], None]] = [
    add_doctor,
    add_call,
    add_tools,
    add_serve,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corral",
        description="Kernel-confined file tools for AI agents.",
        epilog="Run `corral COMMAND --help` for a command's options.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    place = argparse.ArgumentParser(add_help=False)
    place.add_argument(
        "--workspace",
        help="the directory the tools work in (default: the current directory)",
    )
    place.add_argument(
        "--config",
        help="a corral.toml (default: corral.toml in the workspace, if there is one)",
    )
    for add in COMMANDS:
        add(commands, [place])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (UsageError, CorralError, OSError, ValueError) as exc:
        print(f"corral: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SandboxError as exc:
        print(f"corral: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
