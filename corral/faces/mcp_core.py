"""The MCP protocol core: one client's session, whatever carries the messages.

Every revision (mcp_revisions) and every transport goes through this one
object; a transport face only moves JSON values in and out (stdio in
mcp_server; Streamable HTTP mounts the same core).

It is sans-I/O, as h11's Connection is: no threads, no waiting, no streams.
Each input returns the actions it calls for, and a face carries them out
(mcp_threads.SessionDriver does, for the stdio and HTTP faces):

    session = McpSession(open_sandbox, can_ask=True)
    actions = session.handle(message)       # one decoded JSON-RPC value
    actions = session.submitted(call, answer)   # a Run is over
    actions = session.timed_out(question)   # a question went unanswered too long
    actions = session.close()               # input over: open questions count as "no"
    session.shut()                          # after the last call: close the sandbox

The actions (mcp_actions): `Reply` to a request, `Send` the client a request or
a notice of the server's own, `Run` a call's step in a worker, `Drop` a
withdrawn call.

- A face with no way back to the client passes `can_ask=False` (to the
  session, or to `handle` for one request): its handshake clients are never
  asked (a supervised call fails `approval_required`, client roots are not
  read). The stateless revision needs no way back: it asks inside results
  (`input_required`).
- A call's state (queued, running, asking, done, cancelled) lives in its
  `Call`; `cancelled(call)` lets a face skip a Run it had queued.
- `failed` turns true when the sandbox could not start (the face stops reading).
- `open_sandbox(approve)` is called once, on the first message that needs the
  tools. The session steps each call's CallFlow itself and answers its Approve
  steps per call (elicitation, or `input_required` on the stateless revision);
  `approve` only says an approver exists (outside a call it can ask nobody).

The choices the spec leaves to a server, and why corral makes them so, are in
docs/mcp.md ("Choices the spec leaves open"); the session's pieces sit beside
it, one idea each (mcp_*.py; docs/development.md, "Layout").
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from corral.api import Approver, Sandbox
from corral.calls.messages import Answer, error_answer, host_bug_answer
from corral.config import ConfigError, Remedy, any_face
from corral.faces.mcp_actions import Action, Drop, Reply, Run, Send
from corral.faces.mcp_calls import Call, Question
from corral.faces.mcp_jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ProtocolError,
    call_params,
    check_message,
    error_response,
    response,
    valid_id,
)
from corral.faces.mcp_render import (
    CLIENT_INFO_KEY,
    NO_ELICITATION,
    NO_REQUESTS,
    SERVER_INFO,
    approval_choices,
    approval_message,
    approval_of,
    discover_result,
    initialize_result,
    text_client,
    tool_result,
)
from corral.faces.mcp_revisions import (
    Revision,
    elicits_forms,
    lists_roots,
    negotiate,
    served_at,
    states_a_version,
)
from corral.faces.mcp_roots import client_roots
from corral.faces.mcp_state import PROCESS_KEY, STATE_TTL_S, call_digest, open_round
from corral.host.flow import REPLAYED, NoApprover, Submit

log = logging.getLogger("corral.serve")  # the server's own lines (faces/logs.py formats them)

# How long a supervised call waits for the user before it counts as denied: as long as
# a stateless call's requestState stays good between its rounds.
ELICITATION_TIMEOUT_S = STATE_TTL_S
# How long a call waits for a handshake client's roots/list answer; none in time
# fails the call (the client said it has roots: running unnarrowed would widen).
ROOTS_TIMEOUT_S = 30.0
ROOTS_KEY = "corral-roots"  # the inputRequests key of the stateless roots question


def _outside_a_call(request: dict[str, Any]) -> bool:
    """The sandbox's own approve callback: the session answers every call's Approve
    steps itself, so this one only says an approver exists and is never asked."""
    raise NoApprover(NO_ELICITATION)


class McpSession:
    """One MCP client's session (see the module docstring for the interface)."""

    def __init__(
        self,
        open_sandbox: Callable[[Approver], Sandbox],
        *,
        can_ask: bool = True,
        say_remedy: Callable[[Remedy], str] = any_face,
        structured_text: bool | None = None,
        state_key: bytes | None = None,
    ) -> None:
        """state_key: what seals requestState (None: the process's own key)."""
        self._open_sandbox = open_sandbox
        self._state_key = PROCESS_KEY if state_key is None else state_key
        self._structured_text = structured_text  # None: as the client is (TEXT_CLIENTS)
        self._handshake_text = False  # the handshake client is one of TEXT_CLIENTS
        self._say_remedy = say_remedy  # how the face serving this session says a config's fix
        self._can_ask = can_ask
        self._sandbox: Sandbox | None = None
        self._tools: list[dict[str, Any]] = []  # specs, as Sandbox.tools() gives them
        self._handshake: Revision | None = None  # set by initialize
        self._capabilities: dict[str, Any] = {}  # the handshake client's
        self._roots: list[str] | None = None  # the handshake client's, once read
        self._read_roots = False  # _roots holds the client's answer
        self._roots_question: str | None = None  # a roots/list out to the client
        self.failed = False
        self._calls: dict[str | int, Call] = {}
        self._questions: dict[str, Question] = {}
        self._request_ids = itertools.count(1)
        self._ended = False  # input is over: no question can be answered any more

    # -- input ------------------------------------------------------------------

    def handle(self, message: object, *, can_ask: bool = True) -> list[Action]:
        """What to do about one decoded message. `can_ask=False`: the face cannot
        carry a question back for this request (the session's own flag also counts)."""
        try:
            message = check_message(message)
        except ProtocolError as exc:
            return [Reply(error_response(exc.request_id, exc.code, exc.message))]
        if "method" not in message:
            return self._reply_received(message)
        method, params = message["method"], message["params"]
        if "id" not in message:
            return self._notification(method, params)
        request_id = message["id"]
        try:
            if method == "initialize" and not states_a_version(params):
                return [Reply(response(request_id, self._initialize(params)))]
            revision, capabilities = served_at(
                method, params, self._handshake, self._capabilities)
            if method == "tools/call":
                return self._start_call(request_id, revision, capabilities, params, can_ask)
            return [Reply(response(request_id, self._request(method, revision)))]
        except ProtocolError as exc:
            return [Reply(error_response(request_id, exc.code, exc.message, exc.data))]

    def submitted(self, call_id: str | int, answer: Answer | Exception | None) -> list[Action]:
        """A Run is over: its worker's `answer`, the exception `submit` raised, or
        None when the face did not run it (the call was cancelled meanwhile)."""
        call = self._calls.get(call_id)
        if call is None or call.flow is None or call.stage != "running":
            return []
        if call.cancelled or answer is None:
            return self._drop(call)
        if isinstance(answer, Exception):
            return self._failed(call, answer)
        return self._advance(call, answer)

    def cancelled(self, call_id: str | int) -> bool:
        """Whether the call is gone or withdrawn (a face skips its queued Run)."""
        call = self._calls.get(call_id)
        return call is None or call.cancelled

    def timed_out(self, question_id: str) -> list[Action]:
        """A question went unanswered for its timeout: tell the client, then go on
        as if it had said no."""
        question = self._questions.get(question_id)
        if question is None:
            return []
        notice = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": question_id, "reason": "no answer in time"}}
        # sent on the way back of a call still waiting for it (HTTP: an open stream)
        waiting = self._live(question.calls)  # none: every call withdrawn, nothing to say
        sent: list[Action] = [Send(notice, waiting[0].request_id)] if waiting else []
        return sent + self._answered(question_id, None)

    def close(self) -> list[Action]:
        """The input is over: every open question counts as unanswered, and so does
        any later one. The face then carries out what follows, and `shut`s."""
        self._ended = True
        actions: list[Action] = []
        for question_id in list(self._questions):
            actions += self._answered(question_id, None)
        return actions

    def wake(self) -> None:
        """The face is reading a message: Sandbox.wake, once the sandbox is open."""
        if self._sandbox is not None:
            self._sandbox.wake()

    def workspace_replaced(self) -> bool:
        """Whether the sandbox, once open, serves a workspace directory that another
        has replaced at its path (Sandbox._workspace_replaced)."""
        sandbox = self._sandbox
        return sandbox is not None and sandbox._workspace_replaced()

    def stop_calls(self) -> None:
        """End the calls in flight at once (Sandbox.stop_calls), before shut()."""
        if self._sandbox is not None:
            self._sandbox.stop_calls()

    def shut(self) -> None:
        """Close the sandbox (once every call has finished)."""
        if self._sandbox is not None:
            self._sandbox.close()

    def _request(self, method: str, revision: Revision | None) -> dict[str, Any]:
        if method == "ping" and not (revision is not None and revision.stateless):
            return self._complete(revision, {})  # 2026-07-28 has no ping (nor initialize)
        if method == "server/discover" and revision is not None and revision.stateless:
            self._start()
            return self._complete(revision, discover_result(), cacheable=True)
        if method == "tools/list" and revision is not None:
            self._start()
            tools = [revision.tool(spec) for spec in self._tools]
            return self._complete(revision, {"tools": tools}, cacheable=True)
        raise ProtocolError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _complete(
        self, revision: Revision | None, result: dict[str, Any], *, cacheable: bool = False
    ) -> dict[str, Any]:
        if revision is None:
            return result
        return revision.result(result, server_info=SERVER_INFO, cacheable=cacheable)

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self._handshake is not None:
            raise ProtocolError(INVALID_REQUEST, "already initialized")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise ProtocolError(INVALID_PARAMS, "initialize needs a protocolVersion string")
        capabilities = params.get("capabilities")
        self._start()
        self._handshake_text = text_client(params.get("clientInfo"))
        self._handshake = negotiate(requested)
        self._capabilities = capabilities if isinstance(capabilities, dict) else {}
        return initialize_result(self._handshake.version)

    def _start(self) -> Sandbox:
        """The sandbox, opened on the first message that needs the tools."""
        if self._sandbox is not None:
            return self._sandbox
        if self.failed:
            raise ProtocolError(INTERNAL_ERROR, "the sandbox could not start")
        try:
            self._sandbox = self._open_sandbox(_outside_a_call)
        except Exception as exc:
            self.failed = True
            why = exc.spelled(self._say_remedy) if isinstance(exc, ConfigError) else exc
            log.error("corral: error: cannot start the sandbox: %s", why)
            raise ProtocolError(INTERNAL_ERROR, f"cannot start the sandbox: {why}") from exc
        self._tools = self._sandbox.tools()
        return self._sandbox

    def _notification(self, method: str, params: object) -> list[Action]:
        # Unknown notifications are ignored, as JSON-RPC requires (nobody to answer).
        if method == "notifications/cancelled" and isinstance(params, dict):
            return self._cancel(params.get("requestId"))
        if method == "notifications/roots/list_changed":
            self._roots, self._read_roots = None, False  # the next call asks again
        return []

    def _reply_received(self, message: dict[str, Any]) -> list[Action]:
        """A response to a request we sent; an unknown id is ignored."""
        request_id = message.get("id")
        if not isinstance(request_id, str):
            return []
        result = message.get("result")
        return self._answered(request_id, result if isinstance(result, dict) else None)

    # -- tool calls -------------------------------------------------------------

    def _start_call(
        self, request_id: str | int, revision: Revision | None, capabilities: dict[str, Any],
        params: dict[str, Any], can_ask: bool,
    ) -> list[Action]:
        assert revision is not None  # only ping is served without one
        self._start()
        name, arguments = call_params(params)
        if request_id in self._calls:
            raise ProtocolError(INVALID_REQUEST, f"request id {request_id!r} is already in use")
        call = Call(request_id, revision, capabilities, name, arguments,
                    can_ask and self._can_ask)
        call.text = self._structured_text if self._structured_text is not None else (
            text_client(params["_meta"].get(CLIENT_INFO_KEY)) if revision.stateless
            else self._handshake_text)
        if revision.stateless:
            call.state, call.responses = open_round(params, name, arguments, self._state_key)
        self._calls[request_id] = call
        return self._with_roots(call)

    def _with_roots(self, call: Call) -> list[Action]:
        """Start the call's flow once the client's roots are known (None: no
        narrowing), asking for them first where the client has some."""
        if call.state is not None:  # stateless: asked inside the result, once per call
            if lists_roots(call.capabilities) and not call.state.read_roots:
                if not (ROOTS_KEY in call.state.asked and ROOTS_KEY in call.responses):
                    return self._end_round(call, {ROOTS_KEY: {"method": "roots/list"}})
                try:
                    call.state.roots = client_roots(call.responses[ROOTS_KEY])
                except ValueError as exc:
                    return self._unread_roots(call, exc)
                call.state.read_roots = True
            return self._begin(call, call.state.roots)
        if not (call.can_ask and lists_roots(call.capabilities)) or self._read_roots:
            return self._begin(call, self._roots if self._read_roots else None)
        call.stage = "asking"
        if self._roots_question is not None:
            self._questions[self._roots_question].calls.append(call.request_id)
            return []
        question_id, sent = self._ask(call, "roots/list", {}, ROOTS_TIMEOUT_S)
        if question_id in self._questions:  # still open (not answered at once by close)
            self._roots_question = question_id
        return sent

    def _roots_answered(
        self, calls: list[str | int], answer: dict[str, Any] | None
    ) -> list[Action]:
        self._roots_question = None
        try:
            if answer is None:
                raise ValueError("the client did not list its roots")
            roots = client_roots(answer)
        except ValueError as exc:  # every waiting call fails: none runs unnarrowed
            return [act for call in self._live(calls) for act in self._unread_roots(call, exc)]
        self._roots, self._read_roots = roots, True
        return [action for call in self._live(calls) for action in self._begin(call, roots)]

    def _live(self, call_ids: list[str | int]) -> list[Call]:
        return [self._calls[i] for i in call_ids if i in self._calls]

    def _unread_roots(self, call: Call, exc: ValueError) -> list[Action]:
        return self._finish(call, error_answer(call.name, "path_denied", f"{exc}.").public())

    def _begin(self, call: Call, within: list[str] | None) -> list[Action]:
        sandbox = self._start()
        call.flow = sandbox.flow(call.name, call.arguments, within=within, can_ask=True, raw=True)
        return self._advance(call, None)

    def _advance(self, call: Call, reply: Any) -> list[Action]:
        """Step the call's flow with `reply` and act on its next step."""
        assert call.flow is not None and self._sandbox is not None
        try:
            step = call.flow.step(reply)
        except Exception as exc:
            return self._failed(call, exc)
        if step is None:
            assert call.flow.result is not None
            return self._finish(call, call.flow.result)
        if isinstance(step, Submit):
            call.stage = "running"
            return [Run(call.request_id, self._sandbox, step.request)]
        return self._approve(call, step.request)

    def _failed(self, call: Call, exc: Exception) -> list[Action]:
        """A host-side bug: reported to the client as an io_error result, not left
        unanswered."""
        log.error("corral: internal error in a call of %s", call.name, exc_info=exc)
        return self._finish(call, host_bug_answer(call.name, exc).public())

    def _finish(self, call: Call, outcome: dict[str, Any]) -> list[Action]:
        self._close_call(call)
        if call.cancelled:
            return [Drop(call.request_id)]  # withdrawn: no response, as the spec asks
        if not outcome["ok"] and outcome["error"]["code"] == "unknown_tool":
            return [Reply(error_response(
                call.request_id, INVALID_PARAMS, outcome["error"]["message"]))]
        result = tool_result(outcome, structured=call.revision.structured,
                             structured_text=call.text)
        return [Reply(response(call.request_id, self._complete(call.revision, result)))]

    def _drop(self, call: Call) -> list[Action]:
        """End a withdrawn call: nothing more runs and nothing is answered."""
        call.cancelled = True
        self._close_call(call)
        return [Drop(call.request_id)]

    def _close_call(self, call: Call) -> None:
        if call.flow is not None:
            call.flow.close()
        self._calls.pop(call.request_id, None)

    def _end_round(self, call: Call, requests: dict[str, Any]) -> list[Action]:
        """A stateless call needs the client's answers first: end this round with them."""
        assert call.state is not None
        call.state.asked = list(requests)
        call.state.call = call.state.call or call_digest(call.name, call.arguments)
        self._close_call(call)
        return [Reply(response(call.request_id, call.revision.input_required(
            requests, call.state.seal(self._state_key), server_info=SERVER_INFO
        )))]

    def _cancel(self, request_id: object) -> list[Action]:
        call = self._calls.get(request_id) if valid_id(request_id) else None
        if call is None:
            return []
        if call.stage == "running":
            call.cancelled = True  # dropped when its Run is over (the face may kill it)
            return []
        return self._drop(call)  # queued or asking: its question's answer is ignored

    # -- questions to the client ------------------------------------------------

    def _approve(self, call: Call, request: dict[str, Any]) -> list[Action]:
        """An Approve step of `call`'s flow: ask the user through the client."""
        if not (call.revision.elicitation and elicits_forms(call.capabilities)):
            return self._advance(call, NoApprover(NO_ELICITATION))
        message = approval_message(request)
        params = call.revision.elicitation_params(message, approval_choices(request))
        if call.state is not None:
            return self._approve_stateless(call, request, params)
        if not call.can_ask:
            return self._advance(call, NoApprover(NO_REQUESTS))
        call.stage = "asking"
        _, sent = self._ask(call, "elicitation/create", params, ELICITATION_TIMEOUT_S)
        return sent

    def _approve_stateless(
        self, call: Call, request: dict[str, Any], params: dict[str, Any]
    ) -> list[Action]:
        """An answer from this round's inputResponses, else end the round asking."""
        assert call.state is not None
        key = "corral-approve-" + call_digest(request["tool"], request)[:32]
        if key in call.state.approved:
            return self._advance(call, REPLAYED)  # decided (and audited) in an earlier round
        if key in call.state.asked and key in call.responses:
            answer = call.responses[key]
            approval = approval_of(answer if isinstance(answer, dict) else None)
            if approval.allow:
                call.state.approved.append(key)
            return self._advance(call, approval)
        return self._end_round(call, {key: {"method": "elicitation/create", "params": params}})

    def _ask(
        self, call: Call, method: str, params: dict[str, Any], timeout: float
    ) -> tuple[str, list[Action]]:
        """Send a request to the client on `call`'s behalf (after `close`, it counts
        as unanswered at once)."""
        question_id = f"corral-{next(self._request_ids)}"
        self._questions[question_id] = Question(method, [call.request_id])
        if self._ended:
            return question_id, self._answered(question_id, None)
        request = {"jsonrpc": "2.0", "id": question_id, "method": method, "params": params}
        return question_id, [Send(request, call.request_id, timeout)]

    def _answered(self, question_id: str, answer: dict[str, Any] | None) -> list[Action]:
        """The client's answer to a question (None: an error, or no answer)."""
        question = self._questions.pop(question_id, None)
        if question is None:
            return []
        if question.method == "roots/list":
            return self._roots_answered(question.calls, answer)
        actions: list[Action] = []
        for call in self._live(question.calls):
            call.stage = "running"  # stepped on at once
            actions += self._advance(call, approval_of(answer))
        return actions
