"""The HTTP face's guard on connections: a cap on how many are open, a deadline
for each request's headers, and one for a client to take what is written to it.

uvicorn has none of them. Its keep-alive timer runs only between requests (the first
byte of the next one stops it), and `limit_concurrency` answers 503 only to a
request whose headers have arrived. So connections that never finish their
headers are held for ever: on a 2-core Linux VM, 300 of them against uvicorn
with limit_concurrency=50 and timeout_keep_alive=2, limited to 256 open files,
were all still open 10 s later, the server logged EMFILE on every accept and a
real request timed out.

Nor does it bound a client that stops reading: an answer it does not take stays
in the connection's buffer, and closing waits for the buffer to drain, for ever.

What this adds, as a subclass of the HTTP/1.1 protocol class uvicorn would use
(h11, or httptools when installed; uvicorn takes a class as `http=`):
- a connection waiting for a request's headers (a new one, or one kept alive
  after a response) is answered 408 and closed after `timeout_s`;
- a connection whose buffer stays full (its client is not reading) for
  `timeout_s` is aborted (asyncio tells the protocol when it fills and drains);
- past `max_connections`, a new connection closes the one that has waited
  longest for its headers (a request in progress is never cut off), or, when
  none is waiting, is answered 503 with Retry-After and closed.
So half-sent requests push out only each other, and a real request, whose
headers arrive at once, gets in.

Not covered here: a body that never arrives (the application's read has its own
deadline), a tenant's flood of complete requests (the application bounds each
tenant's requests in progress), and floods a single process cannot absorb
(bandwidth, connection attempts faster than it accepts): those are for a
firewall or a proxy in front.
"""

from __future__ import annotations

import asyncio
from typing import Any

RETRY_AFTER_S = 1


def _answer(status: str, message: str, *extra: str) -> bytes:
    body = (message + "\n").encode()
    head = [f"HTTP/1.1 {status}", "content-type: text/plain; charset=utf-8", *extra,
            "connection: close", f"content-length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


BUSY = _answer("503 Service Unavailable", "too many connections; try again shortly",
               f"retry-after: {RETRY_AFTER_S}")
TIMED_OUT = _answer("408 Request Timeout", "the request's headers did not arrive in time")


def guarded(base: type[Any], *, max_connections: int, timeout_s: float) -> type[Any]:
    """`base` (uvicorn's HTTP protocol class) with the cap and the two deadlines."""
    # Connections waiting for a request's headers, the longest waiting first, each
    # with its deadline. Touched on the event loop's thread only.
    waiting: dict[Any, asyncio.TimerHandle] = {}

    def wait(connection: Any) -> None:
        stop(connection)
        waiting[connection] = asyncio.get_running_loop().call_later(
            timeout_s, expire, connection)

    def stop(connection: Any) -> None:
        deadline = waiting.pop(connection, None)
        if deadline is not None:
            deadline.cancel()

    def expire(connection: Any) -> None:
        waiting.pop(connection, None)
        connection.transport.write(TIMED_OUT)
        connection.transport.close()

    class Guarded(base):
        _cycle: Any = None
        _stalled: asyncio.TimerHandle | None = None  # the deadline to drain a full buffer

        # uvicorn's protocols (h11 and httptools alike) set `cycle` to the request's
        # cycle as soon as its headers are in: the one place that says so for both.
        @property
        def cycle(self) -> Any:
            return self._cycle

        @cycle.setter
        def cycle(self, value: Any) -> None:
            self._cycle = value
            if value is not None:
                stop(self)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                if not waiting:
                    transport.write(BUSY)
                    transport.close()
                    return
                longest = next(iter(waiting))
                stop(longest)
                longest.transport.close()
            wait(self)

        def on_response_complete(self) -> None:
            if not self.transport.is_closing():
                wait(self)  # first: a pipelined request it goes on to read ends the wait
            super().on_response_complete()

        def pause_writing(self) -> None:
            super().pause_writing()
            self._stalled = asyncio.get_running_loop().call_later(
                timeout_s, self.transport.abort)

        def resume_writing(self) -> None:
            self._unstall()
            super().resume_writing()

        def _unstall(self) -> None:
            if self._stalled is not None:
                self._stalled.cancel()
                self._stalled = None

        def connection_lost(self, exc: Exception | None) -> None:
            stop(self)
            self._unstall()
            super().connection_lost(exc)

    return Guarded
