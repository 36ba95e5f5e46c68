"""Fault injection at the reporter's seams: the `Transport` protocol and httpx's transport.

A `FaultPlan` hands out one fault per *status upload request* in the order the reporter makes
them (every retry is a request of its own), then ``ok`` forever, so every schedule ends and a
reporter that keeps retrying gets through. Reads (sheet outcomes, node observations, the run state
a resuming reporter reads) pass through untouched.

Faults:

* ``lost_before`` — the request never reaches the ledger (a connection error, nothing sent);
* ``lost_after``  — the ledger commits, the answer is lost (sent, then a connection error);
* ``duplicate``   — the same request is delivered twice (the second answer is returned: over
  HTTP the service's Idempotency-Key store must make it the first one; the direct wrapper marks
  it ``redelivered`` as the `Transport` protocol asks of a transport that delivered twice);
* ``503``         — the ledger answers 503 with ``Retry-After: 0`` without applying anything.

`DirectFaults` wraps `ledger.reporting.direct.DirectTransport` (the errors are
`ledger.errors.LedgerUnavailable`, a 503 one with the status and its `Retry-After`);
`HttpFaults` is an `httpx.AsyncBaseTransport` around a real `httpx.AsyncHTTPTransport`.
Both record every payload the ledger received, for the redelivery check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx

from ledger.client import RetryPolicy
from ledger.errors import LedgerUnavailable
from reporter.transports.protocol import DeadlineRetries, Transport


class FaultPlan:
    """The faults of one faulty run, consumed one per status upload request."""

    def __init__(self, faults: tuple[str, ...] = ()) -> None:
        self.faults = faults
        self.requests = 0
        self.injected: Counter[str] = Counter()
        self.received: list[dict[str, Any]] = []  # payloads the ledger got (in order)

    def next(self) -> str:
        fault = self.faults[self.requests] if self.requests < len(self.faults) else "ok"
        self.requests += 1
        if fault != "ok":
            self.injected[fault] += 1
        return fault


class DirectFaults:
    """A `Transport` around another one (the direct transport) that injects the plan's faults.

    Its faults are below its retries, as a real transport's are: within the reporter's deadline
    block an injected fault is tried again by the ledger's one policy (`DeadlineRetries`), and the
    inner transport's reads retry within the same block."""

    def __init__(
        self, inner: Transport, plan: FaultPlan, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ) -> None:
        self.inner = inner
        self.plan = plan
        # The harness passes its tiny sleep: a plan of twenty faults in a row backs off to the
        # policy's 5 s cap, which with real sleeps outlasts the reporter's deadline.
        self.retries = DeadlineRetries(RetryPolicy(max_attempts=1, initial_wait_s=0.001), sleep)

    @contextlib.contextmanager
    def deadline(self, seconds: float | None) -> Iterator[None]:
        with self.retries.deadline(seconds), self.inner.deadline(seconds):
            yield

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        answer, again = await self.retries.run(lambda: self.upload_once(payload))
        return {**answer, "redelivered": True} if again else answer

    async def upload_once(self, payload: dict[str, Any]) -> dict[str, Any]:
        fault = self.plan.next()
        if fault == "lost_before":
            raise LedgerUnavailable("injected: the request was lost before it reached the ledger")
        if fault == "503":
            raise LedgerUnavailable("injected: the ledger cannot serve now", 0.0, status=503)
        answer = await self.inner.upload(payload)
        self.plan.received.append(payload)
        if fault == "duplicate":
            # The transport delivered it twice, so (as the Transport protocol asks) it says so.
            answer = {**await self.inner.upload(payload), "redelivered": True}
            self.plan.received.append(payload)
        if fault == "lost_after":
            raise LedgerUnavailable("injected: the ledger committed, the answer was lost")
        return answer

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        return await self.inner.sheet_outcomes(run_id)

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        return await self.inner.node_observations(run_id)

    def __getattr__(self, name: str) -> Any:
        # Anything else the reporter may ask a transport for (e.g. the run state `resume` reads).
        return getattr(self.inner, name)


def is_status_upload(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith("/status")


class HttpFaults(httpx.AsyncBaseTransport):
    """An httpx transport that injects the plan's faults into status uploads."""

    def __init__(self, inner: httpx.AsyncBaseTransport, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan

    def _record(self, request: httpx.Request, response: httpx.Response) -> None:
        if 200 <= response.status_code < 300:
            self.plan.received.append(json.loads(request.content))

    async def _deliver(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        await response.aclose()
        self._record(request, response)
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not is_status_upload(request):
            return await self.inner.handle_async_request(request)
        fault = self.plan.next()
        if fault == "lost_before":
            raise httpx.ConnectError(
                "injected: the request was lost before it reached the ledger", request=request
            )
        if fault == "503":
            return httpx.Response(
                503, headers={"Retry-After": "0"}, json={"error": "injected: unavailable"}, request=request
            )
        response = await self._deliver(request)
        if fault == "duplicate":
            response = await self._deliver(request)
        if fault == "lost_after":
            raise httpx.ReadError("injected: the ledger committed, the answer was lost", request=request)
        return response  # already read: the client takes its cached body

    async def aclose(self) -> None:
        await self.inner.aclose()
