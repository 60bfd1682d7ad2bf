"""JSON-RPC 2.0 as MCP uses it: the error codes, the error a bad message is
answered with, the two response shapes, and the check of an incoming message
(the session, mcp_core, decides what a checked one means)."""

from __future__ import annotations

from typing import Any, TypeGuard

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022


class ProtocolError(Exception):
    """A message answered with a JSON-RPC error (id None where it had no usable id)."""

    def __init__(
        self, code: int, message: str, request_id: str | int | None = None, data: Any = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id
        self.data = data


def response(request_id: object, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: object, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def check_message(message: object) -> dict[str, Any]:
    """One incoming message, checked: a response (no method: result or error) or a
    request/notification with a string method and object params (null or omitted: {})."""
    if not isinstance(message, dict):
        raise ProtocolError(INVALID_REQUEST, "a message must be a JSON object (no batches)")
    if "method" not in message and ("result" in message or "error" in message):
        return message  # a response is never answered, however malformed
    if "id" in message and not valid_id(message["id"]):
        raise ProtocolError(INVALID_REQUEST, "id must be a string or an integer")
    request_id = message.get("id")
    if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        raise ProtocolError(INVALID_REQUEST, 'need "jsonrpc": "2.0" and a method', request_id)
    params = message.get("params")
    if params is None or ("id" not in message and not isinstance(params, dict)):
        # null is what some clients send for "no params"; a notification is never
        # answered, so one with bad params is taken as having none
        message["params"] = {}
    elif not isinstance(params, dict):
        raise ProtocolError(INVALID_PARAMS, "params must be an object", request_id)
    return message


def call_params(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A `tools/call`'s tool name and arguments (null or omitted: {}), checked."""
    name = params.get("name")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(name, str):
        raise ProtocolError(INVALID_PARAMS, "tools/call needs a tool name string")
    if not isinstance(arguments, dict):
        raise ProtocolError(INVALID_PARAMS, "tools/call arguments must be an object")
    return name, arguments


def valid_id(value: object) -> TypeGuard[str | int]:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
