"""What corral shows over MCP: who the server is (its info and instructions), a
tool's answer as a `tools/call` result, and the approval form a supervised
call asks the user with (its message, its `remember` choices, what an answer
to it means, and why none can be asked). docs/mcp.md says why these shapes."""

from __future__ import annotations

import importlib.metadata
from typing import Any

from corral.faces.mcp_revisions import REMEMBER_FIELD, STATELESS_VERSIONS
from corral.host.flow import Approval
from corral.host.grants import REMEMBER
from corral.tools.render import size_text

# Why an approval cannot be asked for (NoApprover's hint), and what would let it be.
NO_ELICITATION = ("this client does not support form elicitation, which is how corral asks; "
                  "use an MCP client that does")
NO_REQUESTS = ("this server cannot send requests on this connection (an HTTP request that "
               "does not accept text/event-stream, or one of a tenant with as many calls "
               "waiting for answers as it may have); use a client that accepts server-sent "
               "events, or one that speaks protocol 2026-07-28, which asks inside the result")

INSTRUCTIONS = (
    "File tools confined to the workspace by the kernel. Paths are relative to the "
    "workspace root; list_allowed_directories names every directory you may use. Pass a "
    "file's `version` back as `expected_version` to avoid overwriting someone else's change."
)


def server_version() -> str:
    try:
        return importlib.metadata.version("corral")
    except importlib.metadata.PackageNotFoundError:
        return "0+checkout"  # running from a source tree that was never installed


SERVER_INFO = {"name": "corral", "version": server_version()}
CAPABILITIES = {"tools": {"listChanged": False}}  # the tools never change in a session


def initialize_result(version: str) -> dict[str, Any]:
    """What `initialize` answers (a handshake revision): the server and its tools."""
    return {"protocolVersion": version, "capabilities": CAPABILITIES,
            "serverInfo": SERVER_INFO, "instructions": INSTRUCTIONS}


def discover_result() -> dict[str, Any]:
    """What `server/discover` answers (the stateless revision): the same, unversioned."""
    return {"supportedVersions": list(STATELESS_VERSIONS), "capabilities": CAPABILITIES,
            "instructions": INSTRUCTIONS}


# Clients that hand a model a result's structuredContent rather than its content, as
# their `initialize` names them: fastmcp's Client, and the Python SDK's default name,
# which pydantic-ai's toolset (and other frameworks built on that SDK) send. They get
# the text in structuredContent too; a client that names itself otherwise gets it
# once, unless the server is told (--structured-text).
TEXT_CLIENTS = frozenset({"fastmcp", "mcp"})
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"  # a stateless request's _meta


def text_client(info: object) -> bool:
    return isinstance(info, dict) and info.get("name") in TEXT_CLIENTS


def tool_result(
    outcome: dict[str, Any], *, structured: bool, structured_text: bool = False
) -> dict[str, Any]:
    """The `tools/call` result for a contract result. structured_text: a success's
    structuredContent repeats the text (see the module docstring)."""
    if not outcome["ok"]:
        error = outcome["error"]
        text = f"{error['code']}: {error['message']}"
        # most refusals already say "... by policy rule 'x'": name the rule once
        if error.get("rule") and f"'{error['rule']}'" not in error["message"]:
            text += f" (rule {error['rule']})"
        reply: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
        if structured:
            reply["structuredContent"] = {"error": error}
        return reply
    result = outcome["result"]
    content: list[dict[str, Any]] = [{"type": "text", "text": outcome["text"]}]
    image = result.get("image")
    if image:
        content.append({"type": "image", "data": image["data"], "mimeType": image["media_type"]})
        result = {key: value for key, value in result.items() if key != "image"}
    reply = {"content": content, "isError": False}
    if structured:
        # `text` too: pydantic-ai and fastmcp hand a model structuredContent instead of
        # content, and the text is what carries line numbers and paging hints
        reply["structuredContent"] = (
            {**result, "text": outcome["text"]} if structured_text else result)
    return reply


def approval_message(request: dict[str, Any]) -> str:
    """What the user is asked: the tool, the paths as resolved (and as the agent
    spelled them, where that differs) with their sizes, the rules that asked for
    approval, and a change's diff (bounded, escaped line by line)."""
    paths = [_sized(target) for target in request.get("targets") or ()]  # escaped
    where = f" on {', '.join(paths)}" if paths else ""
    rules = sorted({str(rule) for rule in request.get("rules") or () if rule})
    why = f" (rule {', '.join(rules)})" if rules else ""
    diff = request.get("diff")
    shown = f"\n\n{diff}" if diff else ""
    return f"Allow the agent to run {request['tool']}{where}?{why}{shown}"


def _sized(target: dict[str, Any]) -> str:
    size = target.get("size")
    return f"{target['shown']} ({size_text(size)})" if isinstance(size, int) else str(
        target["shown"])


def approval_choices(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The `remember` choices of the approval form, with titles; "once" first."""
    tool, targets = request["tool"], request.get("targets") or ()
    these = "this file" if len(targets) == 1 else "these files"
    rules = sorted({str(rule) for rule in request.get("rules") or () if rule})
    if rules:
        named = ", ".join(f"'{rule}'" for rule in rules)
        covered = f"everything rule {named} covers" if len(rules) == 1 else (
            f"everything rules {named} cover")
    else:  # the tool's mode (or the default action): paths a named rule covers still ask
        covered = "every path (those a supervised rule names still ask)"
    return [
        ("once", "Allow once"),
        ("path", f"Allow {tool} on {these} for this session"),
        ("rule", f"Allow {tool} on {covered} for this session"),
    ]


def approval_of(answer: dict[str, Any] | None) -> Approval:
    """An elicitation answer as an Approval (no answer: a denial)."""
    if answer is None or answer.get("action") != "accept":
        return Approval(False)
    content = answer.get("content")
    remember = content.get(REMEMBER_FIELD) if isinstance(content, dict) else None
    return Approval(True, remember if remember in REMEMBER else "once")
