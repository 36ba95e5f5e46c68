"""The ASGI application: `create_app` wires settings, middleware, error mapping and the routers.

Why FastAPI: request bodies are declared once as pydantic models, which gives both validation
(mapped to our `{"error": "field: problem"}` answers) and the OpenAPI schema the contract promises,
on Starlette's plain-ASGI core (streaming responses for SSE, lifespan for start/stop).

The lifespan (`lifespan`) opens this process's connection pool, starts its single LISTEN
connection and the watchdog, and on shutdown releases waiting readers first (`Drain`), then stops
them in reverse. The middleware wrap the routers in one declared order, `MIDDLEWARE_ORDER`
(outermost first), which says why each stands where it does. Operation ids are FastAPI's own,
made from the route handlers' names (`get_run` is `get_run_v1_runs__run_id__get`): a handler's
name is part of the API.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from importlib.metadata import version
from typing import Any, Final

from fastapi import Depends, FastAPI
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Scope

from ledger import tracing
from ledger.db import Database
from ledger.pool.store import WarmPool
from ledger.runlog.listener import Listener
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog
from ledger.service import (
    routes_events,
    routes_health,
    routes_ingest,
    routes_pool,
    routes_runs,
    routes_streams,
    routes_tokens,
)
from ledger.service.append_route import AppendRoute
from ledger.service.errors import install_error_handlers
from ledger.service.idempotent import IdempotencyMiddleware
from ledger.service.jsontext import body_problem
from ledger.service.metrics import ServiceMetrics
from ledger.service.middleware import BodyLimitMiddleware, RequestContextMiddleware, RunPathMiddleware
from ledger.service.read_route import EventReadRoute
from ledger.service.run_gate import RunWriteGate
from ledger.service.security import install_security, require_token
from ledger.service.settings import ServiceSettings
from ledger.service.state import Services
from ledger.service.ui import router as ui_router
from ledger.tokens import Keyring, generate_key, parse_keyring

__all__ = [
    "IDEMPOTENCY_KEY_PARAMETER",
    "MIDDLEWARE_ORDER",
    "ROUTERS",
    "create_app",
    "lifespan",
    "middleware",
]

_log = logging.getLogger("ledger.service")


# The middleware, outermost first; each one's place is what keeps it right:
MIDDLEWARE_ORDER: Final[tuple[Callable[..., ASGIApp], ...]] = (
    # Outermost: the protocol's security headers on every stream answer, errors included.
    routes_streams.StreamHeadersMiddleware,
    # The context (run id, metrics, access line) covers every answer below, the 413s and 422s of
    # the run path and body checks included.
    RequestContextMiddleware,
    RunPathMiddleware,
    # Stream payloads are bytes: the UTF-8 and depth checks are not theirs (JSON mode has its own).
    BodyLimitMiddleware,
    # Outside Idempotency-Key handling, which takes a pooled connection for the whole request: a
    # request waiting for its run's turn holds none.
    RunWriteGate,
    # Sees a body already bounded and checked; what it stores is the answer of everything inside.
    IdempotencyMiddleware,
    # Plain event reads (a long-poll, a tail) served without FastAPI's per-request work: one append
    # may wake a thousand of them. Reads pass the write gate and Idempotency-Key untouched.
    EventReadRoute,
    # Innermost: valid appends are served without FastAPI's per-request work, inside everything
    # above (so an append with an Idempotency-Key is stored and replayed like any request).
    AppendRoute,
)

# Every router, in the order their routes are matched.
ROUTERS: Final = (
    routes_health.router,
    routes_runs.router,
    routes_events.router,
    routes_ingest.router,
    routes_pool.router,
    routes_tokens.router,
    routes_streams.router,
    ui_router,
)


def create_app(
    settings: ServiceSettings,
    database_url: str,
    tokens: Sequence[str],
    keyring: Keyring | None = None,
    *,
    listen_url: str | None = None,
) -> FastAPI:
    """The service for one database; `tokens` are the admin tokens it accepts (at least one),
    `keyring` signs and verifies scoped tokens (without one, a random key: the tokens this
    process mints are good only here and only while it runs). The LISTEN connection goes to
    `listen_url` (default: `database_url`), which must be a session of its own, never a
    transaction-mode pooler."""
    if not tokens:
        raise ValueError("the service needs at least one API token")
    # Before the pool opens: the database instrumentation wraps how connections are made.
    tracing.setup("run-ledger")
    metrics = ServiceMetrics()
    app = FastAPI(
        title="Run Ledger",
        version=version("run-ledger"),
        summary="Warm pool, run ledger and status ingestion over HTTP/JSON.",
        lifespan=partial(
            lifespan, settings=settings, database_url=database_url, listen_url=listen_url, metrics=metrics
        ),
        middleware=middleware(settings, metrics),
        openapi_url="/openapi.json" if settings.public_docs else None,
        docs_url="/docs" if settings.public_docs else None,
        redoc_url=None,
        # A client that forgets Content-Type still gets its JSON read.
        strict_content_type=False,
        # `ledger.tracing` is the service's one switch for telemetry. FastAPI's own (0.16x) would
        # look up OpenTelemetry's global providers - environment reads - on every request: a tenth
        # of the server's CPU when one append wakes a thousand long-polls. (Older FastAPI keeps an
        # unknown keyword as `app.extra`.)
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    install_security(app, tuple(tokens), keyring or parse_keyring(generate_key()))
    app.state.metrics = metrics
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    _document_middleware_contract(app)
    if not settings.public_docs:
        _serve_openapi_to_tokens(app)
    # Around all of it, when the OTEL_* variables ask for traces: a request continues its caller's.
    tracing.instrument_app(app)
    return app


def middleware(settings: ServiceSettings, metrics: ServiceMetrics) -> list[Middleware]:
    """The service's middleware, in `MIDDLEWARE_ORDER` (outermost first), with their settings."""
    options: dict[Callable[..., ASGIApp], dict[str, Any]] = {
        routes_streams.StreamHeadersMiddleware: {},
        RequestContextMiddleware: {"metrics": metrics},
        RunPathMiddleware: {},
        BodyLimitMiddleware: {
            "max_bytes": settings.max_body_bytes,
            "check": body_problem,
            "unchecked_paths": (routes_streams.PREFIX,),
        },
        RunWriteGate: {"wait_s": settings.db_lock_timeout_s},
        IdempotencyMiddleware: {"database": _database, "metrics": metrics},
        EventReadRoute: {},
        AppendRoute: {},
    }
    return [Middleware(cls, **options[cls]) for cls in MIDDLEWARE_ORDER]


@asynccontextmanager
async def lifespan(
    app: FastAPI,
    *,
    settings: ServiceSettings,
    database_url: str,
    listen_url: str | None,
    metrics: ServiceMetrics,
) -> AsyncIterator[None]:
    """The service's life: its parts started in order, then stopped in reverse, waiting readers
    released first."""
    async with AsyncExitStack() as stack:
        app.state.services = await _start_services(stack, settings, database_url, listen_url, metrics)
        _log.info("service ready", extra={"pool_size": settings.db_pool_size})
        yield
        _log.info("service stopping: releasing waiters, stopping the watchdog and the listener")
    _log.info("service stopped")


async def _start_services(
    stack: AsyncExitStack,
    settings: ServiceSettings,
    database_url: str,
    listen_url: str | None,
    metrics: ServiceMetrics,
) -> Services:
    """The pool, the LISTEN connection and the watchdog, started, each one's stop on `stack`."""
    db = Database(
        database_url,
        min_size=1,
        max_size=settings.db_pool_size,
        timeout_s=settings.db_pool_timeout_s,
        lock_timeout_s=settings.db_lock_timeout_s,
        statement_timeout_s=settings.db_statement_timeout_s,
        transaction_pooling=settings.db_transaction_pooling,
    )
    await db.open()
    stack.push_async_callback(db.close)
    listener = Listener(listen_url or database_url)
    await listener.start()
    stack.push_async_callback(listener.stop)
    runlog = RunLog(db, listener=listener, max_events_per_run=settings.max_events_per_run)
    svc = Services(
        settings=settings, db=db, metrics=metrics, listener=listener, runlog=runlog, pool=WarmPool(db)
    )
    watchdog = None
    if settings.watchdog:
        watchdog = Watchdog(
            db,
            runlog,
            stall_after_s=settings.watchdog_stall_s,
            interval_s=settings.watchdog_interval_s,
            retention=settings.run_retention,
        )
        watchdog.start()
        stack.push_async_callback(watchdog.stop)
    # Pushed last, so it runs first on the way out: waiting readers return before anything they
    # use closes (the server normally started the drain already, see `server.py`).
    stack.callback(svc.drain.start)
    metrics.bind_sources(
        listener_reconnects=lambda: listener.reconnects,
        listener_connected=lambda: float(listener.connected),
        waiters=lambda: listener.waiter_count,
        watchdog_failures=(lambda: watchdog.failed_total) if watchdog is not None else None,
        event_reads=lambda: runlog.reads,
        trace_spans_dropped=tracing.dropped_spans if tracing.active() else None,
    )
    return svc


def _serve_openapi_to_tokens(app: FastAPI) -> None:
    """`/openapi.json` for a caller with a token, when the document is not public."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_token)])
    async def openapi() -> dict[str, Any]:
        return app.openapi()


IDEMPOTENCY_KEY_PARAMETER: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    # Bytes a header can carry (latin-1), no control characters, not blank.
    "schema": {
        "type": "string",
        "maxLength": 1024,
        "pattern": "^[\\x20-\\x7e\\x80-\\xff]*[\\x21-\\x7e\\x80-\\xff][\\x20-\\x7e\\x80-\\xff]*$",
    },
    "description": "Send the same key on every retry of one request: its answer is kept 24 hours (per "
    "token and path) and given again, with its protocol headers, nothing written twice. The token is "
    "checked first (a refused one gets its 401 or 403). Another body, or other headers that change "
    "the write (Content-Type, Stream-*, Producer-*), with the same key is 422.",
}
_UNAVAILABLE_RESPONSE: dict[str, Any] = {
    "description": "The database is unavailable (connection lost, pool exhausted, lock or statement "
    "timeout): retry after `Retry-After` seconds.",
    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
}


def _document_middleware_contract(app: FastAPI) -> None:
    """Add what the middleware does to the OpenAPI schema: the Idempotency-Key header of every POST
    and PUT, and the 503 answer of every endpoint that uses the database."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()  # caches it in app.openapi_schema, which is amended in place
            for path, item in schema["paths"].items():
                for method, operation in item.items():
                    if method in ("post", "put"):
                        operation.setdefault("parameters", []).append(dict(IDEMPOTENCY_KEY_PARAMETER))
                    if path.startswith("/v1/"):
                        operation.setdefault("responses", {}).setdefault("503", dict(_UNAVAILABLE_RESPONSE))
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]


def _database(scope: Scope) -> Database | None:
    """The service's database for a request, once the lifespan has started it."""
    svc = getattr(scope["app"].state, "services", None)
    return svc.db if isinstance(svc, Services) else None
