"""The client commands' side of the HTTP service: requests, one-line errors, and a resuming event tail.

`ServiceClient` wraps a synchronous `httpx.Client` (a CLI has nothing to overlap). Every failure a
person can act on (service down, token refused, unknown run) becomes a `ServiceError` whose text is
one line; the commands turn it into a `click.ClickException`.

The tail reads `GET /v1/runs/{id}/events/stream` (SSE, `id` = seq). When the connection drops
before the terminal event it reconnects with `Last-Event-ID` = the last seq it yielded, so nothing
is lost or repeated; a 204 on reconnect means the run finished with nothing newer. Reconnects back
off (injectable `sleep`) and give up after `max_reconnects` failures in a row.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote

import httpx
from httpx_sse import SSEError, connect_sse

from ledger.auth import client_token
from ledger.config import Settings, load_settings

URL_VAR = "LEDGER_URL"
DEFAULT_URL = "http://127.0.0.1:8787"


class ServiceError(Exception):
    """A request to the service failed; the message is one line for a person."""


def service_url(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get(URL_VAR, "").strip() or DEFAULT_URL).rstrip("/")


def error_message(response: httpx.Response, base_url: str) -> str:
    """One line for an error answer: the service's `{"error": ...}` text, with a hint for a 401."""
    try:
        body = response.json()
        detail = body.get("error") if isinstance(body, dict) else None
    except (ValueError, UnicodeDecodeError):
        detail = None
    if not isinstance(detail, str) or not detail:
        detail = (
            response.text.strip().splitlines()[0][:200] if response.text.strip() else response.reason_phrase
        )
    if response.status_code == 401:
        return (
            f"the ledger service at {base_url} refused the API token ({detail}); "
            "set LEDGER_TOKEN to one of the service's LEDGER_API_TOKENS"
        )
    return f"{detail} (HTTP {response.status_code})"


class ServiceClient:
    """Requests to the ledger service with a bearer token; errors become `ServiceError`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        max_reconnects: int = 5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # Reads wait out the stream's 15 s keep-alive comments with room to spare.
        self._client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}"},
            transport=transport,
            timeout=httpx.Timeout(timeout, read=max(timeout, 60.0)),
        )
        self._sleep = sleep
        self.max_reconnects = max_reconnects

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreachable(self, exc: Exception) -> ServiceError:
        return ServiceError(
            f"cannot reach the ledger service at {self.base_url} ({type(exc).__name__}: {exc}); "
            f"is `ledger serve` running? (set {URL_VAR} to point elsewhere)"
        )

    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        """GET `path` and return its JSON body."""
        try:
            response = self._client.get(path, params=params)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise ServiceError(error_message(response, self.base_url))
        try:
            return response.json()
        except ValueError:
            raise ServiceError(f"the service answered {path} with something that is not JSON") from None

    def events(self, run_id: str, after: str = "-1") -> Iterator[dict[str, Any]]:
        """The events recorded so far, page by page (no waiting)."""
        cursor = after
        while True:
            page = self.get(f"/v1/runs/{segment(run_id)}/events", {"after": cursor, "timeout_ms": 0})
            events = page.get("events") or []
            yield from events
            if not events or events[-1]["seq"] >= (page.get("latest_seq") or 0):
                return
            cursor = str(events[-1]["seq"])

    def tail(self, run_id: str, after: str = "-1") -> Iterator[dict[str, Any]]:
        """Events as they land over SSE, until the terminal one; resumes after a dropped connection."""
        path = f"/v1/runs/{segment(run_id)}/events/stream"
        last_seq: int | None = None
        failures = 0
        while True:
            headers = {} if last_seq is None else {"Last-Event-ID": str(last_seq)}
            params = {"after": after} if last_seq is None else {}
            try:
                with connect_sse(self._client, "GET", path, params=params, headers=headers) as source:
                    response = source.response
                    if response.status_code == 204:
                        return
                    if response.status_code >= 400:
                        response.read()
                        raise ServiceError(error_message(response, self.base_url))
                    for sse in source.iter_sse():
                        if not sse.data:
                            continue
                        event = json.loads(sse.data)
                        failures = 0
                        if sse.id:
                            last_seq = int(sse.id)
                        elif isinstance(event.get("seq"), int):
                            last_seq = event["seq"]
                        yield event
                        if event.get("type") == "terminal":
                            return
                problem: Exception = ServiceError("the event stream ended before the run finished")
            except (httpx.TransportError, SSEError) as exc:
                problem = exc
            # The stream ended or broke before the terminal event: resume after the last seq seen.
            # Only an event resets the count, so a service that keeps hanging up is given up on.
            failures += 1
            if failures > self.max_reconnects:
                raise ServiceError(
                    f"lost the event stream of run {run_id} at {self.base_url} after "
                    f"{self.max_reconnects} reconnects ({type(problem).__name__}: {problem})"
                ) from None
            self._sleep(min(0.2 * 2 ** max(failures - 1, 0), 5.0))


def segment(value: str) -> str:
    """`value` escaped as one URL path segment (a run id may hold `/`)."""
    return quote(value, safe="")


def client_from_env(
    settings: Settings | None = None, environ: Mapping[str, str] | None = None
) -> ServiceClient:
    """A client for `LEDGER_URL` with the token the environment (or the token file) provides."""
    env = os.environ if environ is None else environ
    settings = settings or load_settings(dict(env))
    return ServiceClient(service_url(env), client_token(settings, env))
