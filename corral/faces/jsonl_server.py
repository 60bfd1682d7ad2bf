"""`corral serve --jsonl`: tool calls as JSON lines, for hosts in any language.

In:  {"id": 7, "tool": "read_file", "arguments": {"path": "a.txt"}}   one per line
Out: the contract's result plus the request's id, one per line:
     {"id": 7, "ok": true, "tool": "read_file", "result": {...}, "text": "..."}

Calls run concurrently across the sandbox's workers, so responses can arrive
out of order: match them by id. A line that is not such a request gets an
error line (code `invalid_arguments`, with the id when one could be read) and
the server keeps serving. Supervised calls fail `approval_required`: this
protocol has no way to ask a user. The server exits when its input ends,
after answering every call it has read.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from corral.api import Sandbox
from corral.calls.messages import error_answer
from corral.calls.waiting import WaitPolicy
from corral.faces.stdio import (
    MAX_LINE_BYTES,
    Job,
    LineServer,
    LineWriter,
    guarded_call,
    parse_line,
    read_lines,
)

# Calls run at once; more than the pool's workers keeps every worker busy while
# results are encoded and written. Beyond this, requests queue in the host.
MAX_CONCURRENT_CALLS = 16


def parse_request(line: bytes) -> tuple[Any, str, dict[str, Any]]:
    """(id, tool, arguments) from one line; ValueError naming what is wrong."""
    try:
        message = parse_line(line)
    except ValueError as exc:
        raise ValueError(f"line is not valid JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ValueError('a request must be a JSON object {"id", "tool", "arguments"}')
    tool = message.get("tool")
    arguments = message.get("arguments")
    if arguments is None:
        arguments = {}  # omitted or null: a call without arguments
    if not isinstance(tool, str):
        raise ValueError('"tool" must be a string naming the tool')
    if not isinstance(arguments, dict):
        raise ValueError('"arguments" must be an object')
    return message.get("id"), tool, arguments


def error_line(line: bytes | None, message: str) -> dict[str, Any]:
    """The error response for a line that is not a request, keeping its id if it has one."""
    request_id = tool = None
    try:
        parsed = parse_line(line) if line is not None else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        request_id = parsed.get("id")
        tool = parsed.get("tool") if isinstance(parsed.get("tool"), str) else None
    return {"id": request_id, **error_answer(tool, "invalid_arguments", message).public()}


def serve(sandbox: Sandbox, reader: BinaryIO, writer: BinaryIO) -> None:
    """Answer every request line until the input ends; the caller closes the sandbox."""
    out = LineWriter(writer)

    def handle(line: bytes | None) -> Job | None:
        if line is None:
            out.write(error_line(None, f"line is over {MAX_LINE_BYTES} bytes"))
            return None
        try:
            request_id, tool, arguments = parse_request(line)
        except ValueError as exc:
            out.write(error_line(line, str(exc)))
            return None
        def job(wait: WaitPolicy) -> None:
            flow = sandbox.flow(tool, arguments, raw=True)  # written out as it came
            result = guarded_call(tool, lambda: sandbox.run(flow, wait=wait))
            out.write({"id": request_id, **result})

        return job

    try:
        LineServer(read_lines(reader, arrived=sandbox.wake), handle, MAX_CONCURRENT_CALLS).run()
    except KeyboardInterrupt:  # ^C: end the calls in flight now, not at their timeouts
        sandbox.stop_calls()
        raise
