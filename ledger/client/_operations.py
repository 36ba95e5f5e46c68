"""The operation catalogue: each API operation described once, as data, for both faces to send.

An operation is a function of its arguments returning a `Call`: method, path (segments quoted),
query, JSON body, the `Idempotency-Key`, and how to read the answer. `Operations` holds them all;
the `operation` descriptor binds each to the client it is read from (its `_perform`), so the
blocking and the async face cannot drift apart: only sending differs. Nothing here does I/O.
`EventPager` keeps the rules of a read that spans pages (`iter_events`), also without I/O.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx

from ledger.errors import ConfigError, LedgerUnavailable

if TYPE_CHECKING:
    # Only typing: the result types are the service's wire shapes, checked by mypy, not at run time.
    from ledger import shapes
    from ledger.client._async_client import AsyncLedgerClient
    from ledger.client._sync_client import LedgerClient

__all__ = [
    "DEFAULT_URL",
    "URL_VAR",
    "Call",
    "EventPager",
    "Operations",
    "StatusDelivery",
    "as_text",
    "operation",
    "run_path",
    "segment",
    "service_url",
]

URL_VAR: Final = "LEDGER_URL"
DEFAULT_URL: Final = "http://127.0.0.1:8787"
# Methods whose request may be sent again as it is (HTTP defines them as idempotent).
_IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "PUT", "DELETE"})

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
class Call(Generic[_T]):
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


def as_text(response: httpx.Response) -> str:
    return response.text


def _without_none(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def run_path(run_id: str, tail: str = "") -> str:
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
) -> Call[_T]:
    return Call(
        method=method, path=path, parse=parse, body=body, idempotency_key=key or _new_key(), run_id=run_id
    )


class operation(Generic[_P, _T]):
    """An API operation described by `build` (arguments → `Call`), bound to the client it is read
    from: on a `LedgerClient` it returns the result, on an `AsyncLedgerClient` an awaitable of it."""

    def __init__(self, build: Callable[_P, Call[_T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        self.__name__ = build.__name__

    @overload
    def __get__(self, client: None, owner: type[Any]) -> operation[_P, _T]: ...
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


class Operations:
    """The HTTP API, one operation each; the clients below only send."""

    # -- runs --------------------------------------------------------------------------------------

    @operation
    def open_run(
        run_id: str, play_name: str | None = None, *, idempotency_key: str | None = None
    ) -> Call[shapes.Run]:
        """Open a run (the same again answers the run as it is)."""
        body = _without_none(run_id=run_id, play_name=play_name)
        return _write("POST", "/v1/runs", body, _whole, idempotency_key, run_id)

    @operation
    def list_runs(limit: int = 50, before: str | None = None) -> Call[list[shapes.RunSummary]]:
        """The newest runs with their step and row totals, newest first (1 to 1,000); after the
        cursor `before` (a page's `next_before`, see `runs_page`) when given."""
        return Call(
            method="GET",
            path="/v1/runs",
            parse=_field("runs"),
            params=_without_none(limit=limit, before=before),
        )

    @operation
    def runs_page(
        limit: int = 50,
        before: str | None = None,
        *,
        status: str | None = None,
        play: str | None = None,
        since_ms: int | None = None,
    ) -> Call[shapes.RunList]:
        """A page of the run list, `{runs, next_before}`: pass `next_before` as `before` (with the
        same filters) for the page after it (None once a page comes back short). `status`, `play`
        and `since_ms` (epoch ms) keep only the runs that match."""
        params = _without_none(limit=limit, before=before, status=status, play=play, since=since_ms)
        return Call(method="GET", path="/v1/runs", parse=_whole, params=params)

    @operation
    def get_run(run_id: str) -> Call[shapes.Run]:
        """The run: status, last seq, terminal state, live node progress, resume position."""
        return Call(method="GET", path=run_path(run_id), parse=_whole, run_id=run_id)

    @operation
    def recent_log_lines(run_id: str, limit: int = 1000) -> Call[list[str]]:
        """The text of the run's last `limit` log lines, oldest first."""
        return Call(
            method="GET",
            path=run_path(run_id, "/logs"),
            parse=_field("lines"),
            params={"tail": limit},
            run_id=run_id,
        )

    @operation
    def append_events(
        run_id: str, events: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> Call[list[shapes.Event]]:
        """Append events `{type, ...fields}` in one transaction; the answer has their seq and ts."""
        body = {"events": list(events)}
        return _write("POST", run_path(run_id, "/events"), body, _field("events"), idempotency_key, run_id)

    @operation
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
    ) -> Call[shapes.TerminalStateBody]:
        """End the run (the first terminal state wins; another is `RunTerminal`)."""
        body = _without_none(
            status=status,
            result=result,
            error=error,
            total_rows=total_rows,
            duration_ms=duration_ms,
            play_name=play_name,
        )
        return _write("PUT", run_path(run_id, "/terminal"), body, _whole, idempotency_key, run_id)

    @operation
    def cancel_run(
        run_id: str, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> Call[shapes.TerminalStateBody]:
        """Cancel a live run with `reason` as its terminal error (an admin token or the run's own);
        a run that already ended otherwise is `RunTerminal`, one already cancelled is returned."""
        body = _without_none(reason=reason)
        return _write("POST", run_path(run_id, "/cancel"), body, _whole, idempotency_key, run_id)

    @operation
    def get_terminal(run_id: str) -> Call[shapes.TerminalStateBody | None]:
        """The terminal state, or None while the run is live."""
        return Call(method="GET", path=run_path(run_id, "/terminal"), parse=_field("state"), run_id=run_id)

    @operation
    def list_events(
        run_id: str, after: int | str = -1, *, timeout_ms: int = 0, limit: int | None = None
    ) -> Call[shapes.EventPage]:
        """Events after the cursor (a seq, -1 or "now"), waiting up to `timeout_ms` (at most 30 s)
        when there are none yet: a long-poll."""
        params = _without_none(after=str(after), timeout_ms=timeout_ms, limit=limit)
        wait_s = max(0, timeout_ms) / 1000
        return Call(
            method="GET",
            path=run_path(run_id, "/events"),
            parse=_whole,
            params=params,
            wait_s=wait_s,
            run_id=run_id,
        )

    # -- run mappings ------------------------------------------------------------------------------

    @operation
    def map_run(
        run_id: str,
        instance_id: str,
        version: str,
        *,
        started: bool = False,
        idempotency_key: str | None = None,
    ) -> Call[bool]:
        """Map the run to an instance; False when that instance is blocked from the run."""
        body = {"instance_id": instance_id, "version": version, "started": started}
        return _write("PUT", run_path(run_id, "/mapping"), body, _field("mapped"), idempotency_key, run_id)

    @operation
    def block_run(
        run_id: str, instance_id: str, version: str, *, idempotency_key: str | None = None
    ) -> Call[shapes.BlockResult]:
        """Block an instance from the run, unless the run already started on it."""
        body = {"instance_id": instance_id, "version": version}
        return _write("POST", run_path(run_id, "/mapping/block"), body, _whole, idempotency_key, run_id)

    @operation
    def resolve_run(run_id: str, version: str) -> Call[shapes.ResolvedMapping]:
        """The instance serving the run for that version (nulls when none)."""
        path = run_path(run_id, "/mapping")
        return Call(method="GET", path=path, parse=_whole, params={"version": version}, run_id=run_id)

    # -- ingestion ---------------------------------------------------------------------------------

    @operation
    def upload_status(
        run_id: str,
        upload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        key_scope: str | None = None,
    ) -> Call[shapes.UploadResult]:
        """Apply a reporter status upload (delivering it twice changes nothing the second time).

        Its key is `<producer_attempt>:<upload_seq>:<key_scope>`: the upload's place, then a part
        of the caller's own, random per call unless given (a reporter keeps one, so an upload it
        sends again carries the key of its first delivery; two reporters of one attempt never
        share one). The run is in the path, which scopes the key. `deliver_status` says as well
        whether the client sent it more than once."""
        return _status_call(run_id, upload, idempotency_key, key_scope, _whole)

    @operation
    def deliver_status(
        run_id: str,
        upload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        key_scope: str | None = None,
    ) -> Call[StatusDelivery]:
        """`upload_status`, its answer in a `StatusDelivery`: `redelivered` when the client sent
        the upload more than once (a retry after a lost answer), so that a ``duplicate`` in the
        answer may be this very upload's."""
        call = _status_call(run_id, upload, idempotency_key, key_scope, _delivery)
        return dataclasses.replace(call, redelivered=_redelivered)

    @operation
    def record_sheet_rows(
        run_id: str, rows: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> Call[int]:
        """Record sheet row outcomes `{table_namespace, row_key, status}`; how many were stored."""
        body = {"rows": list(rows)}
        return _write("POST", run_path(run_id, "/sheets"), body, _field("recorded"), idempotency_key, run_id)

    @operation
    def sheet_outcomes(run_id: str) -> Call[list[shapes.SheetOutcome]]:
        """Per table namespace: completed, failed and total rows."""
        return Call(method="GET", path=run_path(run_id, "/sheets"), parse=_field("outcomes"), run_id=run_id)

    @operation
    def record_observations(
        run_id: str, observations: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> Call[int]:
        """Record durable node observations (the newest per invocation wins); how many were stored."""
        body = {"observations": list(observations)}
        path = run_path(run_id, "/observations")
        return _write("POST", path, body, _field("recorded"), idempotency_key, run_id)

    @operation
    def list_observations(run_id: str) -> Call[list[shapes.Observation]]:
        """The run's node observations."""
        return Call(
            method="GET", path=run_path(run_id, "/observations"), parse=_field("observations"), run_id=run_id
        )

    # -- warm pool ---------------------------------------------------------------------------------

    @operation
    def add_entries(
        pool: str,
        version: str,
        ids: Sequence[str],
        *,
        ttl_ms: float | None = None,
        ready: bool | None = None,
        ready_at: float | None = None,
        idempotency_key: str | None = None,
    ) -> Call[int]:
        """Add or refresh entries of a version; how many."""
        body = _without_none(version=version, ids=list(ids), ttl_ms=ttl_ms, ready=ready, ready_at=ready_at)
        return _write("POST", _pool_path(pool, "/entries"), body, _field("added"), idempotency_key)

    @operation
    def list_entries(pool: str, version: str) -> Call[list[shapes.PoolEntryBody]]:
        """The live entries of a version."""
        return Call(
            method="GET",
            path=_pool_path(pool, "/entries"),
            parse=_field("entries"),
            params={"version": version},
        )

    @operation
    def clear_pool(pool: str) -> Call[int]:
        """Delete every entry of the pool (all versions); how many."""
        return Call(method="DELETE", path=_pool_path(pool, "/entries"), parse=_field("deleted"))

    @operation
    def claim(
        pool: str,
        version: str,
        run_id: str,
        *,
        min_ready_age_ms: float | None = None,
        idempotency_key: str | None = None,
    ) -> Call[shapes.ClaimResult]:
        """Claim the newest available entry for the run (the same run gets the same entry)."""
        body = _without_none(version=version, run_id=run_id, min_ready_age_ms=min_ready_age_ms)
        return _write("POST", _pool_path(pool, "/claim"), body, _whole, idempotency_key, run_id)

    @operation
    def counts(
        pool: str, version: str, *, min_ready_age_ms: float | None = None
    ) -> Call[shapes.PoolCountsBody]:
        """Available and warming entries of a version."""
        params = _without_none(version=version, min_ready_age_ms=min_ready_age_ms)
        return Call(method="GET", path=_pool_path(pool, "/counts"), parse=_whole, params=params)

    @operation
    def promote(
        pool: str, version: str, ids: Sequence[str], *, idempotency_key: str | None = None
    ) -> Call[int]:
        """Mark entries ready now; how many."""
        body = {"version": version, "ids": list(ids)}
        return _write("POST", _pool_path(pool, "/promote"), body, _field("promoted"), idempotency_key)

    @operation
    def mark_ready(pool: str, version: str, id: str, *, idempotency_key: str | None = None) -> Call[bool]:
        """Mark one entry ready (an earlier ready_at is kept); False when it is absent or expired."""
        body = {"version": version, "id": id}
        return _write("POST", _pool_path(pool, "/ready"), body, _field("ready"), idempotency_key)

    @operation
    def delete_entries(
        pool: str, version: str, ids: Sequence[str], *, idempotency_key: str | None = None
    ) -> Call[int]:
        """Delete entries of a version; how many."""
        body = {"version": version, "ids": list(ids)}
        return _write("POST", _pool_path(pool, "/delete"), body, _field("deleted"), idempotency_key)

    # -- operations --------------------------------------------------------------------------------

    @operation
    def healthz() -> Call[shapes.Health]:
        """Liveness: the process is up."""
        return Call(method="GET", path="/healthz", parse=_whole)

    @operation
    def readyz() -> Call[shapes.Readiness | shapes.NotReady]:
        """Readiness: the database answers and the listener is connected (the 503 answer too)."""
        return Call(method="GET", path="/readyz", parse=_whole, answers=frozenset({503}), retry=False)

    @operation
    def limits() -> Call[shapes.Limits]:
        """The service's request limits (`max_body_bytes`, ...)."""
        return Call(method="GET", path="/v1/limits", parse=_whole)

    @operation
    def metrics() -> Call[str]:
        """The Prometheus metrics, as text."""
        return Call(method="GET", path="/metrics", parse=as_text)

    # -- tokens ------------------------------------------------------------------------------------

    @operation
    def mint_token(
        scope: str, *, run_id: str | None = None, max_attempt: int | None = None, ttl_s: int | None = None
    ) -> Call[dict[str, Any]]:
        """A read or run token (admin only): `{token, scope, run_id, max_attempt, expires_at, kid}`.
        Sent without an Idempotency-Key (minting writes nothing, a second request mints a second
        token), so it is sent again only when the service surely did not handle it: the
        connection was never made, or the answer was 408 or 429."""
        body = _without_none(scope=scope, run_id=run_id, max_attempt=max_attempt, ttl_s=ttl_s)
        return Call(method="POST", path="/v1/tokens", parse=_whole, body=body)


@dataclass(frozen=True)
class StatusDelivery:
    """A status upload's answer as the service wrote it, and whether the client sent the upload
    more than once to get it (`deliver_status`)."""

    answer: shapes.UploadResult
    redelivered: bool = False


def _delivery(response: httpx.Response) -> StatusDelivery:
    return StatusDelivery(_body(response))


def _redelivered(delivery: StatusDelivery) -> StatusDelivery:
    return dataclasses.replace(delivery, redelivered=True)


def _status_call(
    run_id: str,
    upload: Mapping[str, Any],
    idempotency_key: str | None,
    key_scope: str | None,
    parse: Callable[[httpx.Response], _T],
) -> Call[_T]:
    if idempotency_key is None and upload.get("upload_seq") is not None:
        scope = key_scope or _new_key()
        idempotency_key = f"{upload.get('producer_attempt', '')}:{upload['upload_seq']}:{scope}"
    return Call(
        method="POST",
        path=run_path(run_id, "/status"),
        parse=parse,
        body=dict(upload),
        idempotency_key=idempotency_key or _new_key(),
        run_id=run_id,
    )


# -- readers that span requests -------------------------------------------------------------------


class EventPager:
    """Reads the events recorded so far page by page, without waiting (`iter_events`)."""

    def __init__(self, run_id: str, after: int | str, limit: int | None) -> None:
        self.run_id, self.cursor, self.limit = run_id, after, limit
        self.done = False

    def call(self) -> Call[shapes.EventPage]:
        return Operations.list_events.build(self.run_id, self.cursor, timeout_ms=0, limit=self.limit)

    def advance(self, page: shapes.EventPage) -> list[shapes.Event]:
        events = page["events"]
        if not events or events[-1]["seq"] >= page["latest_seq"]:
            self.done = True
        else:
            self.cursor = events[-1]["seq"]
        return events
