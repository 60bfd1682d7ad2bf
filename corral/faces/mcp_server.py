"""MCP over stdio: newline-delimited JSON-RPC 2.0, served by a small loop of our own.

Why not the official `mcp` SDK: on this machine its servers spend about 590 µs
on a bare `ping` and 440 ms to start, more than the whole file operation costs,
and they pull a web stack (starlette, uvicorn, an HTTP client, pydantic) into a
security tool. The SDK's own client is the conformance test (tests/test_mcp.py,
tests/test_mcp_revisions.py).

This module is only the stdio face: bytes in and out. What the messages mean,
for every revision, is mcp_core.McpSession.

Concurrency (stdio.LineServer, driven through mcp_threads.SessionDriver): one
thread at a time reads messages; each `tools/call` runs on a thread of a pool,
so calls overlap across the sandbox's workers. A call that asks the client
holds no thread while it waits: the answer, when it is read, lets it go on. A
call that arrives with no other call running is run by the reading thread
itself (no thread hand-off); once it is slow (waiting.SLOW_CALL_S), a pool
thread takes over reading (LineServer's inline policy, which the JSON-lines
face shares). Writes to stdout are serialised by one lock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, BinaryIO

from corral.api import Approver, Sandbox
from corral.config import Remedy, any_face
from corral.faces.mcp_actions import Action, Reply, Run, Send
from corral.faces.mcp_core import McpSession
from corral.faces.mcp_jsonrpc import INVALID_REQUEST, PARSE_ERROR, ProtocolError, error_response
from corral.faces.mcp_threads import Own, SessionDriver
from corral.faces.stdio import MAX_LINE_BYTES, Job, LineServer, LineWriter, parse_line, read_lines

# Calls served at once: more than the pool's workers, so calls waiting for a
# user's approval do not starve the rest; beyond this they queue.
MAX_CONCURRENT_CALLS = 32


def decode(line: bytes | None) -> Any:
    """One line as a JSON value; ProtocolError if it is none."""
    if line is None:
        raise ProtocolError(INVALID_REQUEST, f"message over {MAX_LINE_BYTES} bytes")
    try:
        return parse_line(line)
    except ValueError as exc:
        raise ProtocolError(PARSE_ERROR, f"parse error: {exc}") from exc


class McpServer:
    """Serves one client on a pair of byte streams until the input ends."""

    def __init__(
        self, open_sandbox: Callable[[Approver], Sandbox], reader: BinaryIO, writer: BinaryIO,
        say_remedy: Callable[[Remedy], str] = any_face, structured_text: bool | None = None,
    ) -> None:
        self._out = LineWriter(writer)
        self._session = McpSession(
            open_sandbox, say_remedy=say_remedy, structured_text=structured_text)
        lines = read_lines(reader, arrived=self._session.wake)
        self._lines = LineServer(lines, self._receive, MAX_CONCURRENT_CALLS)
        self._driver = SessionDriver(self._session, deliver=self._deliver, spawn=self._spawn)

    def serve(self) -> bool:
        """Read and answer messages until EOF, then finish the calls in flight and close.
        False if the sandbox could not be started."""
        try:
            self._lines.run(at_end=self._driver.close)
        except KeyboardInterrupt:  # ^C: end the calls in flight now, not at their timeouts
            self._session.stop_calls()
            raise
        finally:
            self._session.shut()
        return not self._session.failed

    def _receive(self, line: bytes | None) -> Job | None:
        """Answer one message; a tools/call comes back as the job that runs it."""
        try:
            message = decode(line)
        except ProtocolError as exc:
            self._out.write(error_response(None, exc.code, exc.message))
            return None
        runs = self._driver.handle(message)
        if self._session.failed:
            self._lines.stop()
        for run in runs[1:]:
            self._spawn(run)
        return functools.partial(self._driver.execute, runs[0]) if runs else None

    def _deliver(self, action: Action, _own: Own) -> None:
        if isinstance(action, Reply | Send):  # a withdrawn call (Drop): nothing to say
            self._out.write(action.message)

    def _spawn(self, run: Run) -> None:
        self._lines.spawn(functools.partial(self._driver.execute, run))


def serve(
    open_sandbox: Callable[[Approver], Sandbox], reader: BinaryIO, writer: BinaryIO,
    say_remedy: Callable[[Remedy], str] = any_face, structured_text: bool | None = None,
) -> bool:
    """Run an MCP server on the given streams until the client closes its end.
    `open_sandbox(approve)` is called on the first message that needs the tools;
    False if it failed (a config error's fix said by `say_remedy`). structured_text:
    McpSession's."""
    return McpServer(open_sandbox, reader, writer, say_remedy, structured_text).serve()
