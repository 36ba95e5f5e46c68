"""The resuming SSE tail's state machine, apart from its I/O.

`tail` reads `GET /v1/runs/{id}/events/stream`; when the connection drops (or the service answers
503) before the terminal event it reconnects with `Last-Event-ID` = the last seq it yielded, so
nothing is lost or repeated; a 204 on reconnect means the run finished with nothing newer. It
gives up after `max_reconnects` failures in a row, or, under a deadline (a `RetryPolicy.until`
policy), once the next wait would end past it, counted from the first failure in a row. Only an
event resets the count, so a service that keeps hanging up is given up on.

`TailState` holds those rules; each face runs the loop (connect, read, wait) around it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import httpx
from httpx_sse import ServerSentEvent, SSEError

from ledger.client._errors import error_for, unreachable
from ledger.client._operations import Call, as_text, run_path
from ledger.errors import LedgerUnavailable

if TYPE_CHECKING:
    from ledger import shapes

__all__ = ["STREAM_FAULTS", "TailState"]

# The SSE stream sends a comment every 15 s (by default) while idle; a read waits longer than that.
_STREAM_READ_TIMEOUT_S: Final = 60.0


class TailState:
    """The rules of the resuming SSE tail, apart from its I/O (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        run_id: str,
        after: int | str,
        max_reconnects: int,
        deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url, self.run_id, self.after = base_url, run_id, after
        self.max_reconnects, self.deadline_s, self.clock = max_reconnects, deadline_s, clock
        self.last_seq: int | None = None
        self.failures = 0
        self.failing_since = 0.0
        self.done = False
        self.path = run_path(run_id, "/events/stream")

    def request(self) -> dict[str, Any]:
        """`connect_sse` keyword arguments for the next (re)connection."""
        if self.last_seq is None:
            params, headers = {"after": str(self.after)}, {}
        else:
            params, headers = {}, {"Last-Event-ID": str(self.last_seq)}
        timeout = httpx.Timeout(_STREAM_READ_TIMEOUT_S, connect=10.0)
        return {"params": params, "headers": headers, "timeout": timeout}

    def opened(self, response: httpx.Response) -> bool:
        """False when there is nothing to read (a 204: the run finished); raises for an error answer
        (its body read), which for a 503 is a failure to reconnect after."""
        if response.status_code == 204:
            self.done = True
            return False
        if response.is_error:
            raise error_for(response, Call(method="GET", path=self.path, parse=as_text, run_id=self.run_id))
        return True

    def accept(self, sse: ServerSentEvent) -> shapes.Event | None:
        """The event a message carries (None for an empty one); the terminal event ends the tail."""
        if not sse.data:
            return None
        event: shapes.Event = json.loads(sse.data)
        self.failures = 0
        if sse.id:
            self.last_seq = int(sse.id)
        elif isinstance(event.get("seq"), int):
            self.last_seq = event["seq"]
        if event.get("type") == "terminal":
            self.done = True
        return event

    def ended_early(self) -> Exception:
        return LedgerUnavailable("the event stream ended before the run finished")

    def failed(self, problem: BaseException) -> float:
        """Seconds to wait before resuming; `LedgerUnavailable` once reconnecting is given up.
        Only an event resets the count, so a service that keeps hanging up is given up on."""
        self.failures += 1
        now = self.clock()
        if self.failures == 1:
            self.failing_since = now
        delay = min(0.2 * 2.0 ** (self.failures - 1), 5.0)
        if isinstance(problem, LedgerUnavailable) and problem.retry_after is not None:
            delay = max(delay, problem.retry_after)
        if self.deadline_s is None:
            over = self.failures > self.max_reconnects
        else:
            over = now + delay - self.failing_since > self.deadline_s
        if over:
            raise LedgerUnavailable(
                f"lost the event stream of run {self.run_id} at {self.base_url} after "
                f"{self.failures - 1} reconnects ({type(problem).__name__}: {problem})"
            ) from None
        return delay

    def first_failure(self, problem: BaseException) -> LedgerUnavailable | BaseException:
        """`problem` as the error a person reads (a refused connection names the service's URL)."""
        return unreachable(self.base_url, problem) if isinstance(problem, httpx.TransportError) else problem


# What a broken or refused stream raises; the tail resumes after any of them.
STREAM_FAULTS: Final = (httpx.TransportError, SSEError, LedgerUnavailable)
