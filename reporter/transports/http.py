"""The HTTP transport: a thin adapter of `ledger.client.AsyncLedgerClient` to the `Transport` seam.

Everything about talking HTTP is the client's: the retry policy (`ledger.client.RetryPolicy`, here
with `DEFAULT_RETRY_POLICY`'s longer budget, and within a `deadline` block the reporter's
deadline instead), the `Retry-After` reading, the mapping of answers to
the library's errors (`ledger.errors`) and the upload's `Idempotency-Key`
(``<producer_attempt>:<upload_seq>:<key_id>``, the same on every retry and every resend of one
upload; `key_id` is random per transport, so two reporters of one attempt never send one key for
different bodies). What the adapter adds is the reporter's view of the answers:

- each upload is spanned (``reporter upload``) and sent as the bytes the uploader measured;
- `body_limit` reads the service's limit (None when the service does not say);
- the reads of the terminal truth take a run the ledger does not know as "nothing recorded" and
  keep only the items of the expected type (finalize reconciles from whatever the answer holds).

The token may be a run token (minted per run by the coordinator, ``POST /v1/tokens``): it covers
everything the reporter does for its own run and attempt. Without one given, ``LEDGER_TOKEN`` is used.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Final, TypeVar

import httpx

from ledger import tracing
from ledger.client import AsyncLedgerClient, RetryPolicy
from ledger.errors import LedgerError, NotFound
from ledger.validate import is_int

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "HttpTransport",
]

# The reporter outlasts longer outages per request than a command does: its uploads carry the run.
DEFAULT_RETRY_POLICY: Final = RetryPolicy(
    max_attempts=6, max_total_s=60.0, initial_wait_s=0.5, max_wait_s=10.0
)
# The bearer token a worker is given (a run token for its run, or an admin token).
_TOKEN_VAR: Final = "LEDGER_TOKEN"
_T = TypeVar("_T")


def _only(items: object, kind: type[_T]) -> list[_T]:
    return [item for item in items if isinstance(item, kind)] if isinstance(items, list) else []


class HttpTransport:
    """`Transport` over the ledger's HTTP API (`AsyncLedgerClient`)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if token is None:
            token = os.environ.get(_TOKEN_VAR, "").strip() or None
        self.client = AsyncLedgerClient(
            base_url, token, timeout_s=timeout_s, retry=retry_policy, transport=transport, sleep=sleep
        )
        self.base_url = self.client.base_url
        self.retry_policy = retry_policy
        self.key_id = uuid.uuid4().hex

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> HttpTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        run_id = str(payload["run_id"])
        with tracing.span(
            "reporter upload",
            run_id=run_id,
            producer_attempt=payload.get("producer_attempt"),
            upload_seq=payload.get("upload_seq"),
        ):
            delivery = await self.client.deliver_status(run_id, payload, key_scope=self.key_id)
            answer: Any = delivery.answer
            if not isinstance(answer, dict):
                return {}
            tracing.annotate(duplicate=answer.get("duplicate"))
            # The seam's word for an answer that came after a retry (`Transport.upload`).
            return {**answer, "redelivered": True} if delivery.redelivered else dict(answer)

    def deadline(self, seconds: float | None) -> AbstractContextManager[None]:
        """The client's own deadline block: its one policy retries each request until then."""
        return self.client.deadline(seconds)

    async def body_limit(self) -> int | None:
        """The service's request body limit (``GET /v1/limits``); None when it does not say (a
        service without the endpoint)."""
        try:
            answer: Any = await self.client.limits()
        except LedgerError:
            return None
        limit = answer.get("max_body_bytes") if isinstance(answer, dict) else None
        return limit if is_int(limit) and limit > 0 else None

    async def run_state(self, run_id: str) -> dict[str, Any] | None:
        try:
            answer: Any = await self.client.get_run(run_id)
        except NotFound:
            return None
        return answer if isinstance(answer, dict) else None

    async def recent_log_lines(self, run_id: str, limit: int) -> list[str]:
        try:
            return _only(await self.client.recent_log_lines(run_id, limit), str)
        except NotFound:
            return []  # the ledger has nothing recorded for the run: nothing to reconcile from

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        try:
            return _only(await self.client.sheet_outcomes(run_id), dict)
        except NotFound:
            return []

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        try:
            return _only(await self.client.list_observations(run_id), dict)
        except NotFound:
            return []
