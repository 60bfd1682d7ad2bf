"""Rename-race soak over every tool: while another process swaps a directory inside
the workspace with a symlink to a directory outside it (renameat2 RENAME_EXCHANGE,
as fast as it can), one tool call per round goes through that name, cycling over
all thirteen tools (delete_file enabled). No answer may carry anything of the
outside (content, a name only it has, its files' versions or sizes), nothing
outside may change (its tree is hashed before and after), and nothing of the
outside may land in the workspace.

Two levels: "sandbox" runs the calls through a Sandbox (confined workers, the
real path), "inproc" runs the same tools in this process over a plain Root (no
Landlock behind it, so the resolution code alone must hold, and it is fast).

    python scripts/race_tools.py [--rounds 20000] [--level sandbox|inproc|both]

tests/test_race_tools.py runs a short version of `race`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral import Sandbox
from corral.calls.messages import CallRequest
from corral.config import Limits, SandboxOptions
from corral.fs import Root, Roots, syscalls
from corral.fs.version import content_version
from corral.policy import Policy
from corral.tools.base import Context
from corral.tools.registry import execute
from scripts.race_fs import RENAME_EXCHANGE, start_swapper  # the fs-level race's swapper

SECRET = "RACE-SECRET-OUTSIDE-5d2f"
OUTSIDE_ONLY = "only-outside-b81e.txt"  # a name no inside directory has: a listing leak
OUTSIDE_SECRET = (SECRET + " MARK\n") * 37  # 37 lines: a size no inside file has
SLOTS = 8  # write/delete/copy targets rotate over this many names
POLICY = Policy(tool_modes={"delete_file": "allow"})
TOOLS = (
    "read_file", "read_multiple_files", "write_file", "edit_file", "append_file",
    "list_directory", "search_files", "grep", "create_directory", "stat_file",
    "move_file", "copy_file", "delete_file",
)

Call = Callable[[str, dict[str, Any]], dict[str, Any]]


def layout(base: Path) -> tuple[Path, Path]:
    """ws/d (a real dir) and ws/swap (a symlink to outside/); both trees hold the
    same names (so any write that escapes changes a file outside), outside also
    holds OUTSIDE_ONLY and its files hold SECRET."""
    ws, outside = base / "ws", base / "outside"
    for tree, text in ((ws / "d", "inside MARK\n"), (outside, OUTSIDE_SECRET)):
        (tree / "sub").mkdir(parents=True)
        for name in ("secret.txt", "log.txt", "a.txt", "sub/s2.txt"):
            (tree / name).write_text(text)
        for slot in range(SLOTS):
            (tree / f"new{slot}.txt").write_text(text)
    (outside / OUTSIDE_ONLY).write_text(OUTSIDE_SECRET)
    os.symlink(str(outside), ws / "swap")
    return ws, outside


def tree_state(top: Path) -> dict[str, str]:
    """Every entry under `top`: type, mode and content hash (or link target)."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            if path.is_symlink():
                what = "link:" + os.readlink(path)
            elif path.is_dir():
                what = "dir"
            else:
                what = hashlib.sha256(path.read_bytes()).hexdigest()
            state[str(path.relative_to(top))] = f"{st.st_mode:o} {what}"
    return state


def markers(outside: Path) -> list[str]:
    """Strings that only an answer that saw the outside can hold."""
    found = [SECRET, OUTSIDE_ONLY]
    for path in outside.rglob("*"):
        if path.is_file():
            found.append(content_version(path.read_bytes()))
    return found


def arguments(tool: str, i: int) -> dict[str, Any]:
    """Round i's call of `tool`, every path through the racing name d/."""
    slot = i % SLOTS
    mark, other = ("MARK", "MARQ") if i % 2 else ("MARQ", "MARK")
    return {
        "read_file": {"path": "d/secret.txt"},
        "read_multiple_files": {"paths": ["d/secret.txt", "d/sub/s2.txt", f"d/new{slot}.txt"]},
        "write_file": {"path": f"d/new{slot}.txt", "content": "written\n"},
        "edit_file": {"path": "d/secret.txt", "old_string": mark, "new_string": other,
                      "dry_run": i % 4 == 0},
        "append_file": {"path": "d/log.txt", "content": "appended\n"},
        "list_directory": {"path": "d", "recursive": True},
        "search_files": {"pattern": "**/*.txt", "path": "d"},
        "grep": {"pattern": "SECRET|MARK|MARQ", "path": "d"},
        "create_directory": {"path": f"d/dir{slot}/x"},
        "stat_file": {"path": "d/secret.txt"},
        "move_file": {"source": "d/a.txt" if i % 2 else "d/b.txt",
                      "destination": "d/b.txt" if i % 2 else "d/a.txt"},
        "copy_file": {"source": "d/secret.txt", "destination": f"d/new{slot}.txt",
                      "overwrite": True},
        "delete_file": {"path": f"d/new{(slot + 3) % SLOTS}.txt"},
    }[tool]


def stop_swapper(pid: int, ws: Path) -> None:
    """Kill the swapper and put d back as the real directory (it stops anywhere)."""
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    if (ws / "d").is_symlink():
        fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
        try:
            syscalls.renameat2(fd, "d", fd, "swap", RENAME_EXCHANGE)
        finally:
            os.close(fd)


def leak_in(response: dict[str, Any], found: list[str]) -> str | None:
    text = json.dumps(response)
    for marker in found:
        if marker in text:
            return f"{marker!r} in {text[:300]}"
    result = response.get("result") or {}
    if result.get("size") == len(OUTSIDE_SECRET):
        return f"the outside file's size in {text[:300]}"
    return None


def race(base: Path, level: str, rounds: int, resolver: str = "auto") -> Counter[str]:
    """`rounds` calls (tools in turn) against a live swapper; AssertionError on a
    leak. Returns outcomes per "tool:ok" / "tool:<error code>"."""
    ws, outside = layout(base)
    before, found = tree_state(outside), markers(outside)
    outcomes: Counter[str] = Counter()
    with _caller(ws, level, resolver) as call:
        pid = start_swapper(ws)
        try:
            for i in range(rounds):
                tool = TOOLS[i % len(TOOLS)]
                response = call(tool, arguments(tool, i // len(TOOLS)))
                leak = leak_in(response, found)
                if leak:
                    raise AssertionError(f"{tool} leaked: {leak}")
                outcomes[f"{tool}:{'ok' if response['ok'] else response['error']['code']}"] += 1
                for each in (response.get("result") or {}).get("files", ()):  # one per path
                    outcomes[f"{tool}[]:{'ok' if each['ok'] else each['error']['code']}"] += 1
        finally:
            stop_swapper(pid, ws)
    after = tree_state(outside)
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        raise AssertionError(f"outside changed: {changed}")
    for path in ws.rglob("*"):
        if path.is_file() and not path.is_symlink() and SECRET.encode() in path.read_bytes():
            raise AssertionError(f"outside content landed inside: {path}")
        if path.name == OUTSIDE_ONLY:
            raise AssertionError(f"an outside file landed inside: {path}")
    return outcomes


class _caller:
    """A context manager giving call(tool, arguments) -> response at one level."""

    def __init__(self, ws: Path, level: str, resolver: str) -> None:
        self.ws, self.level, self.resolver = ws, level, resolver

    def __enter__(self) -> Call:
        if self.level == "sandbox":
            self.sandbox = Sandbox(
                self.ws, policy=POLICY, options=SandboxOptions(resolver=self.resolver)
            )
            return self.sandbox.call
        root = Root(str(self.ws), resolver="openat2" if self.resolver == "auto" else self.resolver)
        self.root = root
        ctx = Context(Roots(root), Limits(), POLICY)
        return lambda tool, args: execute(ctx, CallRequest(tool, args)).public()

    def __exit__(self, *exc: object) -> None:
        if self.level == "sandbox":
            self.sandbox.close()
        else:
            self.root.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--level", default="both", choices=["sandbox", "inproc", "both"])
    parser.add_argument("--resolver", default="auto", choices=["auto", "openat2", "walk"])
    args = parser.parse_args()
    levels = ["inproc", "sandbox"] if args.level == "both" else [args.level]
    batch = 13 * 100  # a fresh layout every batch, so moved/deleted files come back
    for level in levels:
        start, done, outcomes = time.monotonic(), 0, Counter[str]()
        while done < args.rounds:
            n = min(batch, args.rounds - done)
            with tempfile.TemporaryDirectory() as tmp:
                outcomes += race(Path(tmp), level, n, args.resolver)
            done += n
        took = time.monotonic() - start
        print(f"{level} ({args.resolver}): {done} rounds in {took:.1f} s, 0 leaks, "
              "outside tree byte-identical")
        for tool in (*TOOLS, "read_multiple_files[]"):
            mine = {k.split(":")[1]: v for k, v in sorted(outcomes.items())
                    if k.split(":")[0] == tool}
            print(f"  {tool:22} {mine}")


if __name__ == "__main__":
    main()
