"""corral history | checkpoint | diff | undo | rewind: the command-line face of history."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from corral.api import FORCE_HINT, Sandbox
from corral.tools.render import escaped

EXIT_OK, EXIT_FAILED = 0, 1
CLI_FORCE_HINT = "Run again with --force to restore a conflicting path anyway."
Opener = Callable[[argparse.Namespace], Sandbox]


PATCH_NAMES_SHOWN = 5  # files of one patch a history line names


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _state(state: dict[str, Any] | None) -> str:
    if state is None:
        return "-"
    size = f" {state['size']}B" if "size" in state else ""
    return f"{state['type']}{size}"


def history_line(entry: dict[str, Any]) -> str:
    """One line of the listing; every name escaped (a file name or label holding
    terminal escapes must not erase or fake lines of what a person reviews)."""
    if entry["action"] == "checkpoint":
        label = f" {escaped(entry['checkpoint'])}" if entry.get("checkpoint") else ""
        return f"{entry['id']}  {_when(entry['time'])}  checkpoint{label}"
    if entry["action"] == "patch":
        names = [escaped(f["path"]) + (f" -> {escaped(f['destination'])}"
                                       if "destination" in f else "") for f in entry["files"]]
        shown = ", ".join(names[:PATCH_NAMES_SHOWN]) + (
            f" (+{len(names) - PATCH_NAMES_SHOWN} more)" if len(names) > PATCH_NAMES_SHOWN else "")
        return (f"{entry['id']}  {_when(entry['time'])}  {escaped(entry['tool']):<16} "
                f"patch   {len(names)} file{'s' if len(names) != 1 else ''}: {shown}")
    where = escaped(entry["path"])
    if "destination" in entry:
        where += f" -> {escaped(entry['destination'])}"
    change = f"{_state(entry['before'])} -> {_state(entry['after'])}"
    return (f"{entry['id']}  {_when(entry['time'])}  {escaped(entry['tool']):<16} "
            f"{entry['action']:<7} {where}  ({change})")


def shown_json(value: Any) -> str:
    """JSON for a terminal: json's own escapes stop at the C0 controls, so DEL, C1
    controls (a CSI), bidi overrides and lone surrogates are written as \\u escapes
    too (valid inside a JSON string, the only place they can occur; a reader
    decodes the same text)."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return "".join(c if c.isprintable() or c == "\n" else _json_escape(c) for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # a JSON string spells it as a UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# The commands add_commands adds, in `corral --help` order.
NAMES = ("history", "checkpoint", "diff", "undo", "rewind")
DIFF_MARKS = (("changed", "M"), ("added", "A"), ("removed", "D"))


def add_commands(
    commands: argparse._SubParsersAction, common: list[argparse.ArgumentParser], opener: Opener
) -> None:
    """The history commands; `opener` starts the sandbox the options describe."""

    def cmd_history(args: argparse.Namespace) -> int:
        with opener(args) as sandbox:
            entries = sandbox.history(args.path, limit=args.limit)
        if args.json:
            print(shown_json(entries))
        elif not entries:  # say so: silence reads as a command that did nothing
            print("No recorded changes." if args.path is None
                  else f"No recorded changes of {escaped(args.path)}.")
        else:
            for entry in entries:
                print(history_line(entry))
        return EXIT_OK

    def cmd_checkpoint(args: argparse.Namespace) -> int:
        with opener(args) as sandbox:
            print(sandbox.checkpoint(args.label))
        return EXIT_OK

    def cmd_diff(args: argparse.Namespace) -> int:
        with opener(args) as sandbox:
            changes = sandbox.diff(args.checkpoint)
        if args.json:
            print(shown_json(changes))
            return EXIT_OK
        lines = [(change["path"], mark, change["by"]) for key, mark in DIFF_MARKS
                 for change in changes[key]]
        for path, mark, by in sorted(lines):
            print(f"{mark} {escaped(path)}  ({by})")
        if not lines:
            print(f"No changes since {escaped(args.checkpoint)}.")
        return EXIT_OK

    def restoring(name: str) -> Callable[[argparse.Namespace], int]:
        def run(args: argparse.Namespace) -> int:
            with opener(args) as sandbox:
                method = sandbox.undo if name == "undo" else sandbox.rewind
                outcome = method(args.target, force=args.force)
            if "text" in outcome:  # say the flag, not the Python keyword
                outcome["text"] = outcome["text"].replace(FORCE_HINT, CLI_FORCE_HINT)
            if args.json:
                print(shown_json(outcome))
            else:  # the text is escaped where it is made; an error message may not be
                print(outcome["text"] if outcome["ok"] else
                      f"corral: {name} failed: {escaped(outcome['error']['message'])}")
            return EXIT_OK if outcome["ok"] and not outcome["result"]["conflicts"] else EXIT_FAILED
        return run

    history = commands.add_parser(
        "history", parents=common, help="list the recorded changes, newest first",
        description="List what corral's tools changed in the workspace (and the checkpoints), "
        "newest first; with PATH, only the changes of that path.",
    )
    history.add_argument("path", metavar="PATH", nargs="?", help="only this path's changes")
    history.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    history.add_argument("--json", action="store_true", help="print a JSON list")
    history.set_defaults(run=cmd_history)

    checkpoint = commands.add_parser(
        "checkpoint", parents=common, help="mark the workspace's state; prints its ID",
        description="Mark the workspace's state now and print the checkpoint's ID, which "
        "`corral rewind ID` takes the workspace back to.",
    )
    checkpoint.add_argument("label", metavar="LABEL", nargs="?", help="a note to find it by")
    checkpoint.set_defaults(run=cmd_checkpoint)

    diff = commands.add_parser(
        "diff", parents=common, help="list what changed since checkpoint ID, and by whom",
        description="List every path changed (M), added (A) or removed (D) since the "
        "checkpoint's snapshot of the workspace, each with who changed it: corral (a "
        "recorded change) or other (a shell, an editor). Unchanged files are not read.",
    )
    diff.add_argument("checkpoint", metavar="ID")
    diff.add_argument("--json", action="store_true", help="print the lists as JSON")
    diff.set_defaults(run=cmd_diff)

    for name, target, what in (
        ("undo", "PATH", "revert the last recorded change of PATH"),
        ("rewind", "ID", "put every path changed since checkpoint ID back as it was"),
    ):
        command = commands.add_parser(
            name, parents=common, help=what,
            description=f"{what[0].upper()}{what[1:]}. A path changed since by something "
            "other than corral is a conflict and left alone unless --force. Exit code 1 if "
            "anything was left alone.",
        )
        command.add_argument("target", metavar=target)
        command.add_argument("--force", action="store_true",
                             help="restore conflicting paths too (what they hold is recorded)")
        command.add_argument("--json", action="store_true", help="print the result as JSON")
        command.set_defaults(run=restoring(name))
