"""`AsyncLedgerClient`: the ledger's HTTP API for asyncio, and the source of the blocking face.

`_sync_client.py` (`LedgerClient`) is written from this module by `tools/async_to_sync.py`: every
`async` and `await` dropped, names mapped by the tool's table (`AsyncLedgerClient` → `LedgerClient`,
`aclose` → `close`, `asyncio.sleep` → `time.sleep`, ...). CI fails when the committed file differs
from what the tool writes: change this module, then run the tool. What the faces share lives in
the other modules, free of I/O; this one only sends, waits and loops.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

import httpx
from httpx_sse import aconnect_sse

from ledger.client._errors import parse_answer, unreachable
from ledger.client._operations import Call, EventPager
from ledger.client._policy import DEFAULT_RETRY, AsyncSleep, RetryPolicy
from ledger.client._sse import STREAM_FAULTS
from ledger.client._transport import ClientBase, build_request

if TYPE_CHECKING:
    from ledger import shapes

__all__ = ["AsyncLedgerClient"]

_T = TypeVar("_T")


class AsyncLedgerClient(ClientBase):
    """The ledger's HTTP API, awaited. Use it as an async context manager, or `await aclose()`."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        max_reconnects: int = 5,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: AsyncSleep = asyncio.sleep,
    ) -> None:
        super().__init__(base_url, token, timeout_s=timeout_s, retry=retry, max_reconnects=max_reconnects)
        self.http = httpx.AsyncClient(transport=transport, **self.http_options)
        self._sleep = sleep

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call[_T]) -> _T:
        request = build_request(self.http, call, self.timeout_s)
        try:
            response = await self.http.send(request)
        except httpx.TransportError as exc:
            raise unreachable(self.base_url, exc) from exc
        return parse_answer(call, response)

    async def _perform(self, call: Call[_T]) -> _T:
        if not call.retry:
            return await self._send(call)
        async for attempt in self.retry.async_retrying(call, self._sleep):
            with attempt:
                answer = await self._send(call)
                if attempt.retry_state.attempt_number > 1 and call.redelivered is not None:
                    return call.redelivered(answer)
                return answer
        raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover

    async def iter_events(
        self, run_id: str, after: int | str = -1, *, limit: int | None = None
    ) -> AsyncIterator[shapes.Event]:
        """The events recorded so far, page by page (no waiting)."""
        pager = EventPager(run_id, after, limit)
        while not pager.done:
            for event in pager.advance(await self._perform(pager.call())):
                yield event

    async def tail(self, run_id: str, after: int | str = -1) -> AsyncIterator[shapes.Event]:
        """Events as they land (SSE), until the terminal one; resumes after a dropped connection."""
        state = self._tail_state(run_id, after)
        while True:
            try:
                async with aconnect_sse(self.http, "GET", state.path, **state.request()) as source:
                    if source.response.is_error:
                        await source.response.aread()
                    if not state.opened(source.response):
                        return
                    async for sse in source.aiter_sse():
                        event = state.accept(sse)
                        if event is not None:
                            yield event
                        if state.done:
                            return
                problem: Exception = state.ended_early()
            except STREAM_FAULTS as exc:
                problem = exc
            delay = state.failed(problem)
            if state.failures == 1:
                self.retry.first_failure(state.first_failure(problem))
            await self._sleep(delay)
