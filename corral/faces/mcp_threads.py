"""An McpSession driven by threads: what the stdio and HTTP faces share.

The session (mcp_core) only says what to do; this carries it out. One lock
keeps the session's state consistent across the threads that feed it (the
reader, the call threads, the question timers); a call's Submit steps run on a
call thread, outside the lock, and a call that asks the client holds no thread
while it waits: its next step runs when the answer arrives.

    driver = SessionDriver(session, deliver=..., spawn=...)
    runs = driver.handle(message)      # replies and questions go to deliver()
    for run in runs:
        driver.execute(run, wait)      # on a call thread: the call's steps, until
                                       # it is answered, asks or is cancelled
    driver.close()                     # input over: open questions count as "no"

- `deliver(action, own)`: a Reply, Send or Drop to carry out; `own` is the
  callback handle() was given for the message that caused it (HTTP answers
  a request on its own connection).
- `spawn(run)`: run another call's step on a call thread (a Run that an answer
  or a timeout released, or a second call a roots answer let start).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from corral.calls.waiting import WaitPolicy
from corral.faces.mcp_actions import Action, Run, Send
from corral.faces.mcp_core import McpSession

Own = Callable[[Action], None]


def _nobody(_action: Action) -> None:
    pass


class SessionDriver:
    """Carries out an McpSession's actions (see the module docstring)."""

    def __init__(
        self, session: McpSession, *, deliver: Callable[[Action, Own], None],
        spawn: Callable[[Run], None],
    ) -> None:
        self.session = session
        self._deliver = deliver
        self._spawn = spawn
        self._lock = threading.Lock()
        self._timers: dict[str, threading.Timer] = {}  # questions out, by id

    def handle(self, message: object, own: Own = _nobody, *, can_ask: bool = True) -> list[Run]:
        """Hand the session one message; its replies and questions are delivered,
        and the Runs it releases are returned for the caller to execute."""
        with self._lock:
            actions = self.session.handle(message, can_ask=can_ask)
            # the client's answer to a question: its timer has nothing left to do
            # (any other id, however malformed, names no question of ours)
            if (isinstance(message, dict) and "method" not in message
                    and isinstance(message.get("id"), str)):
                timer = self._timers.pop(message["id"], None)
                if timer is not None:
                    timer.cancel()
        return self._carry(actions, own)

    def execute(self, run: Run, wait: WaitPolicy) -> None:
        """Carry out `run` and the Submit steps of its call that follow, on this
        thread; the Runs of other calls it releases are spawned."""
        while True:
            with self._lock:
                skip = self.session.cancelled(run.call)
            answer: Any = None
            if not skip:
                try:
                    answer = run.sandbox.submit(run.request, wait)
                except Exception as exc:  # reported to the client as an io_error result
                    answer = exc
            with self._lock:
                actions = self.session.submitted(run.call, answer)
            mine = None
            for released in self._carry(actions):
                if mine is None and released.call == run.call:
                    mine = released
                else:
                    self._spawn(released)
            if mine is None:
                return
            run = mine

    def close(self) -> None:
        """The input is over: open questions count as unanswered (what follows is
        carried out), and no timer is left running."""
        with self._lock:
            actions = self.session.close()
            timers = list(self._timers.values())
            self._timers.clear()
        for timer in timers:
            timer.cancel()
        for run in self._carry(actions):
            self._spawn(run)

    def _timed_out(self, question_id: str) -> None:
        with self._lock:
            self._timers.pop(question_id, None)
            actions = self.session.timed_out(question_id)
        for run in self._carry(actions):
            self._spawn(run)

    def _carry(self, actions: list[Action], own: Own = _nobody) -> list[Run]:
        runs = []
        for action in actions:
            if isinstance(action, Run):
                runs.append(action)
                continue
            if isinstance(action, Send) and action.timeout is not None:
                self._arm(action.message["id"], action.timeout)
            self._deliver(action, own)
        return runs

    def _arm(self, question_id: str, timeout: float) -> None:
        # The timeout lives here, not in the session: it only says what a late
        # question means (timed_out), and a Timer's thread exists only while one
        # is out (an approval or a roots/list, seldom many at once).
        timer = threading.Timer(timeout, self._timed_out, (question_id,))
        timer.daemon = True
        with self._lock:
            self._timers[question_id] = timer
        timer.start()
