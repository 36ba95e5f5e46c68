"""A Python client for the ledger's HTTP API: `LedgerClient` (blocking) and `AsyncLedgerClient`.

```python
from ledger.client import LedgerClient

with LedgerClient("http://127.0.0.1:8787", token) as ledger:  # or LedgerClient.from_env()
    ledger.open_run("run-1", play_name="enrich")
    ledger.append_events("run-1", [{"type": "log", "line": "starting"}])
    page = ledger.list_events("run-1", after=-1, timeout_ms=5000)  # long-poll
    for event in ledger.tail("run-1"):  # SSE until the terminal event, resuming after drops
        print(event["seq"], event["type"])
```

`AsyncLedgerClient` has the same methods, awaited (`tail` and `iter_events` are async iterators).

Design notes:

- **One description per operation.** Each operation is a function of its arguments returning a
  `_Call`: method, path (segments quoted), query, JSON body, and how to read the answer. Both
  clients inherit them (the `_operation` descriptor binds each to the client's `_perform`), so the
  blocking and the async face cannot drift apart; only sending differs. The multi-request
  readers (`iter_events`, `tail`) keep their rules in `_EventPager` and `_TailState`, which do no
  I/O; each face only runs the loop.
- **Errors are the library's.** `_error_for` is the one reader of the service's `{"error": ...}`
  answers: 400/422 `InvalidInput` (its `field` parsed from the message), 401/403 `Unauthorized`,
  404 `NotFound`, 409 `StaleAttempt`/`RunTerminal`/`Conflict` by the answer's `code`, 410
  `CursorExpired` (with `first_seq`), 413 `PayloadTooLarge` (with the limit the answer names);
  408/429/502/503/504 and a connection that fails are `LedgerUnavailable` (with the `Retry-After`
  seconds and the status). Each carries a note naming the HTTP status and the request. The
  reporter's HTTP transport (`reporter.transports.http`) is a thin adapter over this client, so
  the worker side reads the same errors.
- **Retries are safe.** `LedgerUnavailable` is retried (`RetryPolicy`: backoff with jitter, a
  `Retry-After` is the minimum wait, attempts and total time capped; `RetryPolicy.until(s)` caps
  only the time, and its `on_first_failure` hears of a call's first failure at once, which the
  `ledger` commands print as one line before they keep trying until `--deadline`). Reads are idempotent, and
  every write carries an `Idempotency-Key` (the caller's, else one made per call and kept across
  its retries; a status upload's is `<producer_attempt>:<upload_seq>:<key_scope>`), so a retried
  write whose first answer was lost is answered from the service's store instead of being
  applied twice. The one write without a key (minting a token) is sent again only when the
  service surely did not handle it.
- **The tail resumes.** `tail` reads `GET /v1/runs/{id}/events/stream`; when the connection
  drops (or the service answers 503) before the terminal event it reconnects with
  `Last-Event-ID` = the last seq it yielded, so nothing is lost or repeated; a 204 on reconnect
  means the run finished with nothing newer. It gives up after `max_reconnects` failures in a row
  (with a `RetryPolicy.until` policy: once the next wait would end past its deadline, counted
  from the first failure in a row).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Generic, ParamSpec, Self, TypeVar, overload
from urllib.parse import quote

import httpx
from httpx_sse import ServerSentEvent, SSEError, aconnect_sse, connect_sse
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_any,
    wait_random_exponential,
)

from ledger import __version__
from ledger.errors import (
    ConfigError,
    Conflict,
    CursorExpired,
    InvalidInput,
    LedgerError,
    LedgerUnavailable,
    NotFound,
    PayloadTooLarge,
    RunTerminal,
    StaleAttempt,
    Unauthorized,
)
from ledger.validate import encode_body, is_int

if TYPE_CHECKING:
    # Only typing: the result types are the service's wire shapes, checked by mypy, not at run time.
    from ledger import shapes

__all__ = [
    "DEFAULT_URL",
    "URL_VAR",
    "AsyncLedgerClient",
    "LedgerClient",
    "RetryPolicy",
    "segment",
    "service_url",
]

URL_VAR: Final = "LEDGER_URL"
DEFAULT_URL: Final = "http://127.0.0.1:8787"
# Statuses that mean "not now" rather than "not this request": a proxy's or the service's outage,
# the service timing out the request's body (408) or shedding load (429).
_UNAVAILABLE_STATUS: Final = frozenset({408, 429, 502, 503, 504})
# Statuses that say the service did not handle the request at all: safe to send again even when
# sending it twice could create something twice.
_UNHANDLED_STATUS: Final = frozenset({408, 429})
# Methods whose request may be sent again as it is (HTTP defines them as idempotent).
_IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "PUT", "DELETE"})
# The SSE stream sends a comment every 15 s (by default) while idle; a read waits longer than that.
_STREAM_READ_TIMEOUT_S: Final = 60.0

_T = TypeVar("_T")
_P = ParamSpec("_P")
_Params = Mapping[str, str | int | float]


def service_url(environ: Mapping[str, str] | None = None) -> str:
    """`LEDGER_URL` without its trailing slash, else the local default.

    A value that cannot name the service is a configuration error (`ConfigError`), told at once:
    retried as if the service were down, `127.0.0.1:8787` (no scheme) would spend the whole
    deadline on a mistake, and `…/v1` would reach the service under paths it does not serve.
    """
    env = os.environ if environ is None else environ
    raw = env.get(URL_VAR, "").strip()
    if not raw:
        return DEFAULT_URL
    problem = _url_problem(raw)
    if problem is not None:
        raise ConfigError(
            f"{URL_VAR}={raw!r} {problem}: give the service's scheme, host and port, e.g. {DEFAULT_URL}"
        )
    return raw.rstrip("/")


def _url_problem(raw: str) -> str | None:
    """Why `raw` cannot be the service's base URL, or None when it can."""
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError):
        return "is not a URL"
    if url.scheme not in ("http", "https"):
        # `localhost:8787` parses as the scheme "localhost": the same mistake as no scheme.
        return "does not start with http:// or https://"
    if not url.host:
        return "names no host"
    if url.port is not None and not 0 < url.port < 65536:
        return f"names the port {url.port}, which no service can listen on"
    if url.path not in ("", "/"):
        return f"has a path ({url.path}); the ledger's paths (/v1/…) are added to it"
    if url.query or url.fragment:
        return "has a query or fragment"
    return None


def segment(value: str) -> str:
    """`value` escaped as one URL path segment (an id may hold `/`, `?` or `%`). A segment that is
    `.` or `..` is escaped too (`%2E`): a URL client removes it as it stands."""
    if value in (".", ".."):
        return "%2E" * len(value)
    return quote(value, safe="")


def _new_key() -> str:
    return uuid.uuid4().hex


# -- one operation, described once ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Call(Generic[_T]):
    """One request and how to read its answer, independent of how it is sent."""

    method: str
    path: str
    parse: Callable[[httpx.Response], _T]
    params: _Params | None = None
    body: Any = None
    idempotency_key: str | None = None
    # How long the service may hold the answer on purpose (a long-poll): added to the read timeout.
    wait_s: float = 0.0
    # The run the request is about, for the errors that name it.
    run_id: str = ""
    # Error statuses whose body is the answer (e.g. /readyz's 503), not an error.
    answers: frozenset[int] = frozenset()
    retry: bool = True
    # How to read an answer that came after a retry (an earlier delivery may have been applied).
    redelivered: Callable[[_T], _T] | None = None

    @property
    def replayable(self) -> bool:
        """Whether sending the request twice does what sending it once does: a read, an idempotent
        method, or a write with an `Idempotency-Key` the service answers a repeat from."""
        return self.method in _IDEMPOTENT_METHODS or self.idempotency_key is not None


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise LedgerUnavailable(
            f"the service answered {response.request.method} {response.request.url.path} with "
            f"something that is not JSON (HTTP {response.status_code})"
        ) from None


def _whole(response: httpx.Response) -> Any:
    return _body(response)


def _field(name: str) -> Callable[[httpx.Response], Any]:
    def read(response: httpx.Response) -> Any:
        body = _body(response)
        if not isinstance(body, dict) or name not in body:
            raise LedgerUnavailable(
                f"the service answered {response.request.method} {response.request.url.path} "
                f"without {name!r} (HTTP {response.status_code})",
                status=response.status_code,
            )
        return body[name]

    return read


def _text(response: httpx.Response) -> str:
    return response.text


def _without_none(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def _run_path(run_id: str, tail: str = "") -> str:
    return f"/v1/runs/{segment(run_id)}{tail}"


def _pool_path(pool: str, tail: str) -> str:
    return f"/v1/pools/{segment(pool)}{tail}"


def _write(
    method: str,
    path: str,
    body: Any,
    parse: Callable[[httpx.Response], _T],
    key: str | None,
    run_id: str = "",
) -> _Call[_T]:
    return _Call(
        method=method, path=path, parse=parse, body=body, idempotency_key=key or _new_key(), run_id=run_id
    )


class _operation(Generic[_P, _T]):
    """An API operation described by `build` (arguments → `_Call`), bound to the client it is read
    from: on a `LedgerClient` it returns the result, on an `AsyncLedgerClient` an awaitable of it."""

    def __init__(self, build: Callable[_P, _Call[_T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        self.__name__ = build.__name__

    @overload
    def __get__(self, client: None, owner: type[Any]) -> _operation[_P, _T]: ...
    @overload
    def __get__(self, client: LedgerClient, owner: type[Any]) -> Callable[_P, _T]: ...
    @overload
    def __get__(
        self, client: AsyncLedgerClient, owner: type[Any]
    ) -> Callable[_P, Coroutine[Any, Any, _T]]: ...
    def __get__(self, client: LedgerClient | AsyncLedgerClient | None, owner: type[Any]) -> Any:
        if client is None:
            return self
        build, perform = self.build, client._perform

        def bound(*args: _P.args, **kwargs: _P.kwargs) -> Any:
            return perform(build(*args, **kwargs))

        bound.__name__ = self.__name__
        bound.__doc__ = self.__doc__
        return bound


class _Operations:
    """The HTTP API, one operation each; the clients below only send."""

    # -- runs --------------------------------------------------------------------------------------

    @_operation
    def open_run(
        run_id: str, play_name: str | None = None, *, idempotency_key: str | None = None
    ) -> _Call[shapes.Run]:
        """Open a run (the same again answers the run as it is)."""
        body = _without_none(run_id=run_id, play_name=play_name)
        return _write("POST", "/v1/runs", body, _whole, idempotency_key, run_id)

    @_operation
    def list_runs(limit: int = 50, before: str | None = None) -> _Call[list[shapes.RunSummary]]:
        """The newest runs with their step and row totals, newest first (1 to 1,000); after the
        cursor `before` (a page's `next_before`, see `runs_page`) when given."""
        return _Call(
            method="GET",
            path="/v1/runs",
            parse=_field("runs"),
            params=_without_none(limit=limit, before=before),
        )

    @_operation
    def runs_page(
        limit: int = 50,
        before: str | None = None,
        *,
        status: str | None = None,
        play: str | None = None,
        since_ms: int | None = None,
    ) -> _Call[shapes.RunList]:
        """A page of the run list, `{runs, next_before}`: pass `next_before` as `before` (with the
        same filters) for the page after it (None once a page comes back short). `status`, `play`
        and `since_ms` (epoch ms) keep only the runs that match."""
        params = _without_none(limit=limit, before=before, status=status, play=play, since=since_ms)
        return _Call(method="GET", path="/v1/runs", parse=_whole, params=params)

    @_operation
    def get_run(run_id: str) -> _Call[shapes.Run]:
        """The run: status, last seq, terminal state, live node progress, resume position."""
        return _Call(method="GET", path=_run_path(run_id), parse=_whole, run_id=run_id)

    @_operation
    def recent_log_lines(run_id: str, limit: int = 1000) -> _Call[list[str]]:
        """The text of the run's last `limit` log lines, oldest first."""
        return _Call(
            method="GET",
            path=_run_path(run_id, "/logs"),
            parse=_field("lines"),
            params={"tail": limit},
            run_id=run_id,
        )

    @_operation
    def append_events(
        run_id: str, events: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> _Call[list[shapes.Event]]:
        """Append events `{type, ...fields}` in one transaction; the answer has their seq and ts."""
        body = {"events": list(events)}
        return _write("POST", _run_path(run_id, "/events"), body, _field("events"), idempotency_key, run_id)

    @_operation
    def set_terminal(
        run_id: str,
        status: shapes.TerminalStatus,
        *,
        result: Any = None,
        error: str | None = None,
        total_rows: int | None = None,
        duration_ms: int | None = None,
        play_name: str | None = None,
        idempotency_key: str | None = None,
    ) -> _Call[shapes.TerminalStateBody]:
        """End the run (the first terminal state wins; another is `RunTerminal`)."""
        body = _without_none(
            status=status,
            result=result,
            error=error,
            total_rows=total_rows,
            duration_ms=duration_ms,
            play_name=play_name,
        )
        return _write("PUT", _run_path(run_id, "/terminal"), body, _whole, idempotency_key, run_id)

    @_operation
    def cancel_run(
        run_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> _Call[shapes.TerminalStateBody]:
        """Cancel a live run with `reason` as its terminal error (an admin token or the run's own);
        a run that already ended otherwise is `RunTerminal`, one already cancelled is returned."""
        body = _without_none(reason=reason)
        return _write("POST", _run_path(run_id, "/cancel"), body, _whole, idempotency_key, run_id)

    @_operation
    def get_terminal(run_id: str) -> _Call[shapes.TerminalStateBody | None]:
        """The terminal state, or None while the run is live."""
        return _Call(method="GET", path=_run_path(run_id, "/terminal"), parse=_field("state"), run_id=run_id)

    @_operation
    def list_events(
        run_id: str, after: int | str = -1, *, timeout_ms: int = 0, limit: int | None = None
    ) -> _Call[shapes.EventPage]:
        """Events after the cursor (a seq, -1 or "now"), waiting up to `timeout_ms` (at most 30 s)
        when there are none yet: a long-poll."""
        params = _without_none(after=str(after), timeout_ms=timeout_ms, limit=limit)
        wait_s = max(0, timeout_ms) / 1000
        return _Call(
            method="GET",
            path=_run_path(run_id, "/events"),
            parse=_whole,
            params=params,
            wait_s=wait_s,
            run_id=run_id,
        )

    # -- run mappings ------------------------------------------------------------------------------

    @_operation
    def map_run(
        run_id: str,
        instance_id: str,
        version: str,
        *,
        started: bool = False,
        idempotency_key: str | None = None,
    ) -> _Call[bool]:
        """Map the run to an instance; False when that instance is blocked from the run."""
        body = {"instance_id": instance_id, "version": version, "started": started}
        return _write("PUT", _run_path(run_id, "/mapping"), body, _field("mapped"), idempotency_key, run_id)

    @_operation
    def block_run(
        run_id: str, instance_id: str, version: str, *, idempotency_key: str | None = None
    ) -> _Call[shapes.BlockResult]:
        """Block an instance from the run, unless the run already started on it."""
        body = {"instance_id": instance_id, "version": version}
        return _write("POST", _run_path(run_id, "/mapping/block"), body, _whole, idempotency_key, run_id)

    @_operation
    def resolve_run(run_id: str, version: str) -> _Call[shapes.ResolvedMapping]:
        """The instance serving the run for that version (nulls when none)."""
        path = _run_path(run_id, "/mapping")
        return _Call(method="GET", path=path, parse=_whole, params={"version": version}, run_id=run_id)

    # -- ingestion ---------------------------------------------------------------------------------

    @_operation
    def upload_status(
        run_id: str,
        upload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        key_scope: str | None = None,
    ) -> _Call[shapes.UploadResult]:
        """Apply a reporter status upload (delivering it twice changes nothing the second time).

        Its key is `<producer_attempt>:<upload_seq>:<key_scope>`: the upload's place, then a part
        of the caller's own, random per call unless given (a reporter keeps one, so an upload it
        sends again carries the key of its first delivery; two reporters of one attempt never
        share one). The run is in the path, which scopes the key. An answer that came after a
        retry says ``redelivered: True``: a ``duplicate`` in it may be this very upload's."""
        if idempotency_key is None and upload.get("upload_seq") is not None:
            scope = key_scope or _new_key()
            idempotency_key = f"{upload.get('producer_attempt', '')}:{upload['upload_seq']}:{scope}"
        key = idempotency_key or _new_key()
        path = _run_path(run_id, "/status")
        return _Call(
            method="POST",
            path=path,
            parse=_whole,
            body=dict(upload),
            idempotency_key=key,
            run_id=run_id,
            redelivered=_redelivered,
        )

    @_operation
    def record_sheet_rows(
        run_id: str, rows: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> _Call[int]:
        """Record sheet row outcomes `{table_namespace, row_key, status}`; how many were stored."""
        body = {"rows": list(rows)}
        return _write("POST", _run_path(run_id, "/sheets"), body, _field("recorded"), idempotency_key, run_id)

    @_operation
    def sheet_outcomes(run_id: str) -> _Call[list[shapes.SheetOutcome]]:
        """Per table namespace: completed, failed and total rows."""
        return _Call(method="GET", path=_run_path(run_id, "/sheets"), parse=_field("outcomes"), run_id=run_id)

    @_operation
    def record_observations(
        run_id: str, observations: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> _Call[int]:
        """Record durable node observations (the newest per invocation wins); how many were stored."""
        body = {"observations": list(observations)}
        path = _run_path(run_id, "/observations")
        return _write("POST", path, body, _field("recorded"), idempotency_key, run_id)

    @_operation
    def list_observations(run_id: str) -> _Call[list[shapes.Observation]]:
        """The run's node observations."""
        return _Call(
            method="GET", path=_run_path(run_id, "/observations"), parse=_field("observations"), run_id=run_id
        )

    # -- warm pool ---------------------------------------------------------------------------------

    @_operation
    def add_entries(
        pool: str,
        version: str,
        ids: Sequence[str],
        *,
        ttl_ms: float | None = None,
        ready: bool | None = None,
        ready_at: float | None = None,
        idempotency_key: str | None = None,
    ) -> _Call[int]:
        """Add or refresh entries of a version; how many."""
        body = _without_none(version=version, ids=list(ids), ttl_ms=ttl_ms, ready=ready, ready_at=ready_at)
        return _write("POST", _pool_path(pool, "/entries"), body, _field("added"), idempotency_key)

    @_operation
    def list_entries(pool: str, version: str) -> _Call[list[shapes.PoolEntryBody]]:
        """The live entries of a version."""
        return _Call(
            method="GET",
            path=_pool_path(pool, "/entries"),
            parse=_field("entries"),
            params={"version": version},
        )

    @_operation
    def clear_pool(pool: str) -> _Call[int]:
        """Delete every entry of the pool (all versions); how many."""
        return _Call(method="DELETE", path=_pool_path(pool, "/entries"), parse=_field("deleted"))

    @_operation
    def claim(
        pool: str,
        version: str,
        run_id: str,
        *,
        min_ready_age_ms: float | None = None,
        idempotency_key: str | None = None,
    ) -> _Call[shapes.ClaimResult]:
        """Claim the newest available entry for the run (the same run gets the same entry)."""
        body = _without_none(version=version, run_id=run_id, min_ready_age_ms=min_ready_age_ms)
        return _write("POST", _pool_path(pool, "/claim"), body, _whole, idempotency_key, run_id)

    @_operation
    def counts(
        pool: str, version: str, *, min_ready_age_ms: float | None = None
    ) -> _Call[shapes.PoolCountsBody]:
        """Available and warming entries of a version."""
        params = _without_none(version=version, min_ready_age_ms=min_ready_age_ms)
        return _Call(method="GET", path=_pool_path(pool, "/counts"), parse=_whole, params=params)

    @_operation
    def promote(
        pool: str, version: str, ids: Sequence[str], *, idempotency_key: str | None = None
    ) -> _Call[int]:
        """Mark entries ready now; how many."""
        body = {"version": version, "ids": list(ids)}
        return _write("POST", _pool_path(pool, "/promote"), body, _field("promoted"), idempotency_key)

    @_operation
    def mark_ready(pool: str, version: str, id: str, *, idempotency_key: str | None = None) -> _Call[bool]:
        """Mark one entry ready (an earlier ready_at is kept); False when it is absent or expired."""
        body = {"version": version, "id": id}
        return _write("POST", _pool_path(pool, "/ready"), body, _field("ready"), idempotency_key)

    @_operation
    def delete_entries(
        pool: str, version: str, ids: Sequence[str], *, idempotency_key: str | None = None
    ) -> _Call[int]:
        """Delete entries of a version; how many."""
        body = {"version": version, "ids": list(ids)}
        return _write("POST", _pool_path(pool, "/delete"), body, _field("deleted"), idempotency_key)

    # -- operations --------------------------------------------------------------------------------

    @_operation
    def healthz() -> _Call[shapes.Health]:
        """Liveness: the process is up."""
        return _Call(method="GET", path="/healthz", parse=_whole)

    @_operation
    def readyz() -> _Call[shapes.Readiness | shapes.NotReady]:
        """Readiness: the database answers and the listener is connected (the 503 answer too)."""
        return _Call(method="GET", path="/readyz", parse=_whole, answers=frozenset({503}), retry=False)

    @_operation
    def limits() -> _Call[shapes.Limits]:
        """The service's request limits (`max_body_bytes`, ...)."""
        return _Call(method="GET", path="/v1/limits", parse=_whole)

    @_operation
    def metrics() -> _Call[str]:
        """The Prometheus metrics, as text."""
        return _Call(method="GET", path="/metrics", parse=_text)

    # -- tokens ------------------------------------------------------------------------------------

    @_operation
    def mint_token(
        scope: str, *, run_id: str | None = None, max_attempt: int | None = None, ttl_s: int | None = None
    ) -> _Call[dict[str, Any]]:
        """A read or run token (admin only): `{token, scope, run_id, max_attempt, expires_at, kid}`.
        Sent without an Idempotency-Key (minting writes nothing, a second request mints a second
        token), so it is sent again only when the service surely did not handle it: the
        connection was never made, or the answer was 408 or 429."""
        body = _without_none(scope=scope, run_id=run_id, max_attempt=max_attempt, ttl_s=ttl_s)
        return _Call(method="POST", path="/v1/tokens", parse=_whole, body=body)


# -- answers and errors ---------------------------------------------------------------------------


def _parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _error_text(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    """The answer's `error` text and its whole body (`shapes.ErrorBody`), else its first line."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"]:
        return body["error"], body
    lines = response.text.strip().splitlines()
    return (lines[0][:200] if lines else response.reason_phrase or "no answer"), {}


def _int_or(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _error_for(response: httpx.Response, call: _Call[Any]) -> Exception:
    """The library's exception for an error answer (the service writes `{"error": ..., ...}`)."""
    status = response.status_code
    message, body = _error_text(response)
    error: Exception
    if status in (400, 422):
        field, sep, problem = message.partition(": ")
        error = InvalidInput(field, problem) if sep else InvalidInput("request", message)
    elif status in (401, 403):
        code = body.get("code")
        error = Unauthorized(message, status=status, code=code if isinstance(code, str) else None)
    elif status == 404:
        error = NotFound(message)
    elif status == 409 and body.get("code") == "stale_attempt":
        error = StaleAttempt(call.run_id, None, _int_or(body.get("producer_attempt"), 0), message)
    elif status == 409 and body.get("code") == "terminal":
        terminal = body.get("terminal")
        error = RunTerminal(message, call.run_id, terminal if isinstance(terminal, dict) else {})
    elif status == 409:
        error = Conflict(message)
    elif status == 410:
        error = CursorExpired(call.run_id, None, _int_or(body.get("first_seq"), 0), message)
    elif status == 413:
        limit = body.get("max_body_bytes")
        error = PayloadTooLarge(message, limit if is_int(limit) and limit > 0 else None)
    elif status in _UNAVAILABLE_STATUS:
        retry_after = _parse_retry_after(response.headers.get("Retry-After"))
        error = LedgerUnavailable(message, retry_after, status=status)
    else:
        # A 500 is the service's bug; nothing the caller can fix by changing the request.
        error = LedgerError(message)
    error.add_note(f"HTTP {status} from {call.method} {response.request.url.path}")
    return error


def _unreachable(base_url: str, exc: httpx.TransportError) -> LedgerUnavailable:
    return LedgerUnavailable(f"cannot reach the ledger service at {base_url} ({type(exc).__name__}: {exc})")


def _result(call: _Call[_T], response: httpx.Response) -> _T:
    """The parsed answer, or the library's exception for an error status."""
    if response.is_error and response.status_code not in call.answers:
        raise _error_for(response, call)
    return call.parse(response)


def _redelivered(answer: Any) -> Any:
    return {**answer, "redelivered": True} if isinstance(answer, dict) else answer


def _handled(error: BaseException) -> bool:
    """False when the service surely did not handle the request that failed with `error`: the
    connection was never made, or it answered 408/429 before doing anything."""
    if isinstance(error, LedgerUnavailable) and error.status in _UNHANDLED_STATUS:
        return False
    return not isinstance(error.__cause__, httpx.ConnectError | httpx.ConnectTimeout)


def _build_request(
    http: httpx.Client | httpx.AsyncClient, call: _Call[Any], timeout_s: float
) -> httpx.Request:
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


# -- retries --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Which failures are retried and for how long: `LedgerUnavailable` (a 408/429/502/503/504 or
    a connection that fails), with exponential backoff and full jitter, never sooner than the
    service's `Retry-After`; at most `max_attempts` tries (None: no count) within `max_total_s`
    (the deadline: no wait starts that would end past it). One attempt: no retry. A request that
    could create something twice (a write without an `Idempotency-Key`, see `_Call.replayable`)
    is sent again only after a failure that proves the service did not handle it (`_handled`).

    `on_first_failure` hears of a call's first failure at once, before its retries: a person
    waiting on a command learns that the service is unreachable now, not at the deadline. The
    deadline is measured on `clock` (tests give one that moves only when they say)."""

    max_attempts: int | None = 4
    max_total_s: float = 30.0
    initial_wait_s: float = 0.25
    max_wait_s: float = 5.0
    on_first_failure: Callable[[Exception], None] | None = None
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def until(cls, deadline_s: float, on_first_failure: Callable[[Exception], None] | None = None) -> Self:
        """Retries for as long as `deadline_s` allows, however many that is."""
        return cls(max_attempts=None, max_total_s=deadline_s, on_first_failure=on_first_failure)

    def first_failure(self, error: BaseException | None) -> None:
        """Tell `on_first_failure` of `error` (the first failure of a call or of a stream)."""
        if self.on_first_failure is not None and isinstance(error, Exception):
            self.on_first_failure(error)

    def _before_sleep(self, state: RetryCallState) -> None:
        if state.attempt_number == 1 and state.outcome is not None:
            self.first_failure(state.outcome.exception())

    def wait(self, state: RetryCallState) -> float:
        backoff = wait_random_exponential(multiplier=self.initial_wait_s, max=self.max_wait_s)(state)
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, LedgerUnavailable) and error.retry_after is not None:
            return max(backoff, error.retry_after)
        return backoff

    def _options(self, replayable: bool = True) -> dict[str, Any]:
        started = self.clock()

        def out_of_time(state: RetryCallState) -> bool:
            # No wait starts that would end past the deadline.
            return self.clock() - started + (state.upcoming_sleep or 0.0) >= self.max_total_s

        stops: list[Any] = [out_of_time]
        if self.max_attempts is not None:
            stops.append(stop_after_attempt(self.max_attempts))
        retry: Any = retry_if_exception_type(LedgerUnavailable)
        if not replayable:
            retry = retry & retry_if_exception(lambda error: not _handled(error))
        return {
            "retry": retry,
            "wait": self.wait,
            "stop": stop_any(*stops),
            "before_sleep": self._before_sleep,
            "reraise": True,
        }

    def retrying(self, call: _Call[Any], sleep: Callable[[float], None]) -> Retrying:
        """A fresh tenacity controller for one call."""
        return Retrying(sleep=sleep, **self._options(call.replayable))

    def async_retrying(self, call: _Call[Any], sleep: Callable[[float], Awaitable[None]]) -> AsyncRetrying:
        """A fresh tenacity controller for one call, for asyncio."""
        return AsyncRetrying(sleep=sleep, **self._options(call.replayable))

    async def run(
        self,
        operation: Callable[[], Awaitable[_T]],
        sleep: Callable[[float], Awaitable[None]],
        *,
        before_retry: Callable[[BaseException, float], None] | None = None,
    ) -> _T:
        """`operation()`, tried again after a `LedgerUnavailable` as this policy says: for work that
        spans requests (the reporter's final upload, which first resends the uploads whose outcome
        is unknown). `before_retry` hears of each failure and the wait before the next try."""
        options = self._options()
        if before_retry is not None:
            hook = before_retry

            def before_sleep(state: RetryCallState) -> None:
                self._before_sleep(state)
                error = state.outcome.exception() if state.outcome is not None else None
                if error is not None:
                    hook(error, state.upcoming_sleep)

            options["before_sleep"] = before_sleep
        async for attempt in AsyncRetrying(sleep=sleep, **options):
            with attempt:
                return await operation()
        raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


_DEFAULT_RETRY: Final = RetryPolicy()


# -- readers that span requests -------------------------------------------------------------------


class _EventPager:
    """Reads the events recorded so far page by page, without waiting (`iter_events`)."""

    def __init__(self, run_id: str, after: int | str, limit: int | None) -> None:
        self.run_id, self.cursor, self.limit = run_id, after, limit
        self.done = False

    def call(self) -> _Call[shapes.EventPage]:
        return _Operations.list_events.build(self.run_id, self.cursor, timeout_ms=0, limit=self.limit)

    def advance(self, page: shapes.EventPage) -> list[shapes.Event]:
        events = page["events"]
        if not events or events[-1]["seq"] >= page["latest_seq"]:
            self.done = True
        else:
            self.cursor = events[-1]["seq"]
        return events


class _TailState:
    """The rules of the resuming SSE tail, apart from its I/O (see the module notes)."""

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
        self.path = _run_path(run_id, "/events/stream")

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
            raise _error_for(response, _Call(method="GET", path=self.path, parse=_text, run_id=self.run_id))
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
        return _unreachable(self.base_url, problem) if isinstance(problem, httpx.TransportError) else problem


# What a broken or refused stream raises; the tail resumes after any of them.
_STREAM_FAULTS: Final = (httpx.TransportError, SSEError, LedgerUnavailable)


# -- the two faces --------------------------------------------------------------------------------


class _Client(_Operations):
    """What both faces share: where the service is, how long to wait, how to retry."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy = _DEFAULT_RETRY,
        max_reconnects: int = 5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s, self.retry, self.max_reconnects = timeout_s, retry, max_reconnects
        headers = {"User-Agent": f"run-ledger/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # The keyword arguments of the face's httpx client.
        self._http_options: dict[str, Any] = {"base_url": self.base_url, "headers": headers}

    def _tail_state(self, run_id: str, after: int | str) -> _TailState:
        # A policy that retries until a deadline holds the tail's reconnects to it as well.
        deadline_s = self.retry.max_total_s if self.retry.max_attempts is None else None
        return _TailState(self.base_url, run_id, after, self.max_reconnects, deadline_s)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Self:
        """A client for `LEDGER_URL` with the token client commands use: `LEDGER_TOKEN`, else the
        first of `LEDGER_API_TOKENS`, else the token file `ledger serve` stored in the data dir
        (`ConfigError` when there is none). `options` go to the constructor."""
        from ledger.auth import client_token
        from ledger.config import load_settings

        env = os.environ if environ is None else environ
        return cls(service_url(env), client_token(load_settings(dict(env)), env), **options)


class LedgerClient(_Client):
    """The ledger's HTTP API, blocking. Use it as a context manager, or `close()` it."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy = _DEFAULT_RETRY,
        max_reconnects: int = 5,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(base_url, token, timeout_s=timeout_s, retry=retry, max_reconnects=max_reconnects)
        self.http = httpx.Client(transport=transport, **self._http_options)
        self._sleep = sleep

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _send(self, call: _Call[_T]) -> _T:
        request = _build_request(self.http, call, self.timeout_s)
        try:
            response = self.http.send(request)
        except httpx.TransportError as exc:
            raise _unreachable(self.base_url, exc) from exc
        return _result(call, response)

    def _perform(self, call: _Call[_T]) -> _T:
        if not call.retry:
            return self._send(call)
        for attempt in self.retry.retrying(call, self._sleep):
            with attempt:
                answer = self._send(call)
                if attempt.retry_state.attempt_number > 1 and call.redelivered is not None:
                    return call.redelivered(answer)
                return answer
        raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover

    def iter_events(
        self, run_id: str, after: int | str = -1, *, limit: int | None = None
    ) -> Iterator[shapes.Event]:
        """The events recorded so far, page by page (no waiting)."""
        pager = _EventPager(run_id, after, limit)
        while not pager.done:
            yield from pager.advance(self._perform(pager.call()))

    def tail(self, run_id: str, after: int | str = -1) -> Iterator[shapes.Event]:
        """Events as they land (SSE), until the terminal one; resumes after a dropped connection."""
        state = self._tail_state(run_id, after)
        while True:
            try:
                with connect_sse(self.http, "GET", state.path, **state.request()) as source:
                    if source.response.is_error:
                        source.response.read()
                    if not state.opened(source.response):
                        return
                    for sse in source.iter_sse():
                        event = state.accept(sse)
                        if event is not None:
                            yield event
                        if state.done:
                            return
                problem: Exception = state.ended_early()
            except _STREAM_FAULTS as exc:
                problem = exc
            delay = state.failed(problem)
            if state.failures == 1:
                self.retry.first_failure(state.first_failure(problem))
            self._sleep(delay)


async def _async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


class AsyncLedgerClient(_Client):
    """The ledger's HTTP API for asyncio: the same methods as `LedgerClient`, awaited.
    Use it as an async context manager, or `await aclose()`."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy = _DEFAULT_RETRY,
        max_reconnects: int = 5,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = _async_sleep,
    ) -> None:
        super().__init__(base_url, token, timeout_s=timeout_s, retry=retry, max_reconnects=max_reconnects)
        self.http = httpx.AsyncClient(transport=transport, **self._http_options)
        self._sleep = sleep

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: _Call[_T]) -> _T:
        request = _build_request(self.http, call, self.timeout_s)
        try:
            response = await self.http.send(request)
        except httpx.TransportError as exc:
            raise _unreachable(self.base_url, exc) from exc
        return _result(call, response)

    async def _perform(self, call: _Call[_T]) -> _T:
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
        pager = _EventPager(run_id, after, limit)
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
            except _STREAM_FAULTS as exc:
                problem = exc
            delay = state.failed(problem)
            if state.failures == 1:
                self.retry.first_failure(state.first_failure(problem))
            await self._sleep(delay)
