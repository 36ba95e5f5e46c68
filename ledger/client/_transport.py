"""What both faces share below the operations: where the service is, the request each `Call`
becomes, and the options of the face's httpx client (which is the seam: a test passes
`httpx.MockTransport`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Self

import httpx

from ledger import __version__
from ledger.client._operations import Call, Operations, service_url
from ledger.client._policy import DEFAULT_RETRY, RetryPolicy
from ledger.client._sse import TailState
from ledger.validate import encode_body

__all__ = ["ClientBase", "build_request"]


def build_request(http: httpx.Client | httpx.AsyncClient, call: Call[Any], timeout_s: float) -> httpx.Request:
    headers = {"Idempotency-Key": call.idempotency_key} if call.idempotency_key else {}
    content = None
    if call.body is not None:
        # Exactly the bytes `encode_body` makes: what a caller measured against the body limit.
        content = encode_body(call.body)
        headers["Content-Type"] = "application/json"
    timeout = httpx.Timeout(timeout_s, read=timeout_s + call.wait_s)
    return http.build_request(
        call.method, call.path, params=call.params, content=content, headers=headers, timeout=timeout
    )


# -- the two faces --------------------------------------------------------------------------------


class ClientBase(Operations):
    """What both faces share: where the service is, how long to wait, how to retry."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        max_reconnects: int = 5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s, self.retry, self.max_reconnects = timeout_s, retry, max_reconnects
        headers = {"User-Agent": f"run-ledger/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # The keyword arguments of the face's httpx client.
        self.http_options: dict[str, Any] = {"base_url": self.base_url, "headers": headers}

    def _tail_state(self, run_id: str, after: int | str) -> TailState:
        # A policy that retries until a deadline holds the tail's reconnects to it as well.
        deadline_s = self.retry.seconds_left() if self.retry.max_attempts is None else None
        return TailState(self.base_url, run_id, after, self.max_reconnects, deadline_s, self.retry.clock)

    @contextmanager
    def deadline(self, seconds: float | None) -> Iterator[None]:
        """Within the block, every call (of any task) that fails with `LedgerUnavailable` is tried
        again until `seconds` from now, however many tries that is (None: until it succeeds or is
        refused), and no wait starts that would end past it: a caller's deadline passed down to
        the one retry policy, instead of a loop of the caller's around it. Blocks nest; the
        policy is the client's own again after the block."""
        policy = self.retry
        self.retry = policy.within(seconds)
        try:
            yield
        finally:
            self.retry = policy

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Self:
        """A client for `LEDGER_URL` with the token client commands use: `LEDGER_TOKEN`, else the
        first of `LEDGER_API_TOKENS`, else the token file `ledger serve` stored in the data dir
        (`ConfigError` when there is none). `options` go to the constructor."""
        from ledger.auth import client_token
        from ledger.config import load_settings

        env = os.environ if environ is None else environ
        return cls(service_url(env), client_token(load_settings(dict(env)), env), **options)
