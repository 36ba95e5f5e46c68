"""The HTTP transport: the ledger service's HTTP API through httpx, retried by one policy.

`RetryPolicy` is the single named retry policy (tenacity underneath): connection errors, timeouts
and 408/429/502/503/504 are retried with exponential backoff and full jitter, a ``Retry-After``
header is honoured as the *minimum* wait, attempts and total time are capped (the run gives up
before the next wait would pass the time cap). Every other answer is final: a 409 is read by its
``code`` — ``stale_attempt`` raises `StaleAttemptError`, ``terminal`` raises `RunTerminalError`
(the reporter stops at once either way) — and other 4xx/5xx raise `UploadRejected`. Tests build a
policy with their own ``sleep`` so they never wait.

The token may be a run token (minted per run by the coordinator, ``POST /v1/tokens``): it covers
everything the reporter does for its own run and attempt. Without one given, ``LEDGER_TOKEN`` is used.

Uploads go to ``POST {base}/v1/runs/{run_id}/status`` with ``Authorization: Bearer <token>`` and
``Idempotency-Key: <producer_attempt>:<upload_seq>:<transport id>`` — the same key on every retry of
one upload, so a retry that the ledger already applied is recognised. The transport id is random
per transport, so two reporters of one attempt (each with its own transport) never send the same
key for different bodies; the run is in the path, which scopes the key. The body is sent as
`ledger.validate.encode_body` makes it, the bytes the uploader measured against the service's
limit; `body_limit` reads that limit (``GET {base}/v1/limits``), and a 413 raises `BodyTooLarge`
with the limit its answer names.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from ledger import tracing
from ledger.validate import encode_body, is_int
from reporter.transports.protocol import (
    BodyTooLarge,
    RunTerminalError,
    StaleAttemptError,
    TransportError,
    UploadRejected,
    terminal_message,
)

RETRYABLE_STATUS = frozenset({408, 429, 502, 503, 504})


class RetryableHttpError(TransportError):
    """A transient answer (408/429/502/503/504); `retry_after` is the server's minimum wait."""

    def __init__(self, status_code: int, retry_after: float | None) -> None:
        super().__init__(f"ledger answered {status_code}")
        self.status_code = status_code
        self.retry_after = retry_after


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, RetryableHttpError | httpx.TransportError)


@dataclass(frozen=True)
class RetryPolicy:
    """Which failures are retried, how long to wait, when to give up."""

    max_attempts: int = 6
    max_total_s: float = 60.0
    initial_wait_s: float = 0.5
    max_wait_s: float = 10.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    # Hears of a request's first retried failure at once (a command prints it, then keeps trying).
    on_first_failure: Callable[[BaseException], None] | None = None

    def _before_sleep(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        if state.attempt_number == 1 and error is not None and self.on_first_failure is not None:
            self.on_first_failure(error)

    def _wait(self, state: RetryCallState) -> float:
        backoff = wait_random_exponential(multiplier=self.initial_wait_s, max=self.max_wait_s)(state)
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        if isinstance(error, RetryableHttpError) and error.retry_after is not None:
            return max(backoff, error.retry_after)
        return backoff

    def retrying(self) -> AsyncRetrying:
        """A fresh tenacity controller for one logical request."""
        return AsyncRetrying(
            retry=retry_if_exception(is_retryable),
            wait=self._wait,
            stop=stop_after_attempt(self.max_attempts) | stop_before_delay(self.max_total_s),
            sleep=self.sleep,
            before_sleep=self._before_sleep,
            reraise=True,
        )


DEFAULT_RETRY_POLICY = RetryPolicy()
_T = TypeVar("_T")

# The bearer token a worker is given (a run token for its run, or an admin token).
TOKEN_VAR = "LEDGER_TOKEN"


def _error_body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _listed(answer: Any, key: str, kind: type[_T]) -> list[_T]:
    """The items of type `kind` in the answer's list `key`: finalize reconciles from whatever the
    answer holds, so a malformed answer reads as nothing rather than failing the run."""
    listed = answer.get(key) if isinstance(answer, dict) else None
    return [item for item in listed if isinstance(item, kind)] if isinstance(listed, list) else []


def _check(response: httpx.Response, run_id: str) -> None:
    if response.status_code < 400:
        return
    if response.status_code in RETRYABLE_STATUS:
        raise RetryableHttpError(response.status_code, parse_retry_after(response.headers.get("Retry-After")))
    body = _error_body(response)
    error = body.get("error")
    message = error if isinstance(error, str) else response.text[:500]
    if response.status_code == 409 and body.get("code") == "stale_attempt":
        raise StaleAttemptError(message)
    if response.status_code == 413:
        limit = body.get("max_body_bytes")
        raise BodyTooLarge(message, limit if is_int(limit) and limit > 0 else None)
    if response.status_code == 409 and body.get("code") == "terminal":
        terminal = body.get("terminal")
        terminal = terminal if isinstance(terminal, dict) else {}
        raise RunTerminalError(terminal_message(run_id, terminal) if terminal else message, terminal)
    raise UploadRejected(response.status_code, message)


class HttpTransport:
    """`Transport` over the ledger's HTTP API."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        timeout_s: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry_policy = retry_policy
        if token is None:
            token = os.environ.get(TOKEN_VAR, "").strip() or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._owns_client = client is None
        self.client = client or httpx.AsyncClient(timeout=timeout_s)
        self._headers = headers
        self.key_id = uuid.uuid4().hex

    async def aclose(self) -> None:
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> HttpTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _url(self, run_id: str, tail: str) -> str:
        return f"{self.base_url}/v1/runs/{quote(run_id, safe='')}/{tail}"

    async def _send(self, method: str, url: str, run_id: str, **kwargs: Any) -> Any:
        try:
            async for attempt in self.retry_policy.retrying():
                with attempt:
                    response = await self.client.request(method, url, **kwargs)
                    _check(response, run_id)
                    answer = response.json() if response.content else {}
                    if attempt.retry_state.attempt_number > 1 and isinstance(answer, dict):
                        # An earlier delivery of this very request may have been applied.
                        answer["redelivered"] = True
                    return answer
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach the ledger at {self.base_url}: {exc}") from exc
        except ValueError as exc:
            raise TransportError(f"the ledger answered with invalid JSON: {exc}") from exc
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        run_id = str(payload["run_id"])
        key = f"{payload.get('producer_attempt', '')}:{payload.get('upload_seq', '')}:{self.key_id}"
        headers = {**self._headers, "Idempotency-Key": key, "Content-Type": "application/json"}
        url = self._url(run_id, "status")
        with tracing.span(
            "reporter upload",
            run_id=run_id,
            producer_attempt=payload.get("producer_attempt"),
            upload_seq=payload.get("upload_seq"),
        ):
            answer = await self._send("POST", url, run_id, content=encode_body(payload), headers=headers)
            if not isinstance(answer, dict):
                return {}
            tracing.annotate(duplicate=answer.get("duplicate"))
            return answer

    async def body_limit(self) -> int | None:
        """The service's request body limit (``GET /v1/limits``); None when it does not say (a
        service without the endpoint)."""
        try:
            answer = await self._send("GET", f"{self.base_url}/v1/limits", "", headers=self._headers)
        except UploadRejected:
            return None
        limit = answer.get("max_body_bytes") if isinstance(answer, dict) else None
        return limit if is_int(limit) and limit > 0 else None

    async def _read(self, run_id: str, tail: str) -> Any:
        try:
            return await self._send("GET", self._url(run_id, tail), run_id, headers=self._headers)
        except UploadRejected as exc:
            if exc.status_code == 404:
                return {}  # the ledger has nothing recorded for the run: nothing to reconcile from
            raise

    async def run_state(self, run_id: str) -> dict[str, Any] | None:
        url = f"{self.base_url}/v1/runs/{quote(run_id, safe='')}"
        try:
            answer = await self._send("GET", url, run_id, headers=self._headers)
        except UploadRejected as exc:
            if exc.status_code == 404:
                return None
            raise
        return answer if isinstance(answer, dict) else None

    async def recent_log_lines(self, run_id: str, limit: int) -> list[str]:
        return _listed(await self._read(run_id, f"logs?tail={limit}"), "lines", str)

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        return _listed(await self._read(run_id, "sheets"), "outcomes", dict)

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        return _listed(await self._read(run_id, "observations"), "observations", dict)
