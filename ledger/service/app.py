"""The ASGI application: `create_app` wires settings, middleware, error mapping and the routers.

Why FastAPI: request bodies are declared once as pydantic models, which gives both validation
(mapped to our `{"error": "field: problem"}` answers) and the OpenAPI schema the contract promises,
on Starlette's plain-ASGI core (streaming responses for SSE, lifespan for start/stop).

The lifespan opens this process's connection pool, starts its single LISTEN connection and the
watchdog, and on shutdown releases waiting readers first (`Drain`), then stops them in reverse.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.metadata import version
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute
from fastapi.utils import generate_unique_id
from starlette.types import Scope

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
from ledger.service.run_gate import RunWriteGate
from ledger.service.security import install_security, require_token
from ledger.service.settings import ServiceSettings
from ledger.service.state import Services
from ledger.service.ui import router as ui_router
from ledger.tokens import Keyring, generate_key, parse_keyring

__all__ = [
    "IDEMPOTENCY_KEY_PARAMETER",
    "create_app",
]

_log = logging.getLogger("ledger.service")


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

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
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
            watchdog = (
                Watchdog(
                    db,
                    runlog,
                    stall_after_s=settings.watchdog_stall_s,
                    interval_s=settings.watchdog_interval_s,
                    retention=settings.run_retention,
                )
                if settings.watchdog
                else None
            )
            if watchdog is not None:
                watchdog.start()
                stack.push_async_callback(watchdog.stop)
            # Pushed last, so it runs first on the way out: waiting readers return before anything
            # they use closes (the server normally started the drain already, see `server.py`).
            stack.callback(svc.drain.start)
            metrics.bind_sources(
                listener_reconnects=lambda: listener.reconnects,
                listener_connected=lambda: float(listener.connected),
                waiters=lambda: listener.waiter_count,
                watchdog_failures=(lambda: watchdog.failed_total) if watchdog is not None else None,
                event_reads=lambda: runlog.reads,
                trace_spans_dropped=tracing.dropped_spans if tracing.active() else None,
            )
            app.state.services = svc
            _log.info("service ready", extra={"pool_size": settings.db_pool_size})
            yield
            _log.info("service stopping: releasing waiters, stopping the watchdog and the listener")
        _log.info("service stopped")

    app = FastAPI(
        title="Run Ledger",
        version=version("run-ledger"),
        summary="Warm pool, run ledger and status ingestion over HTTP/JSON.",
        lifespan=lifespan,
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
        generate_unique_id_function=_operation_id,
    )
    install_security(app, tuple(tokens), keyring or parse_keyring(generate_key()))
    app.state.metrics = metrics
    install_error_handlers(app)
    for router in (
        routes_health.router,
        routes_runs.router,
        routes_events.router,
        routes_ingest.router,
        routes_pool.router,
        routes_tokens.router,
        routes_streams.router,
        ui_router,
    ):
        app.include_router(router)
    _document_middleware_contract(app)
    if not settings.public_docs:

        @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_token)])
        async def openapi() -> dict[str, Any]:
            return app.openapi()

    # Added last = outermost. Innermost, valid appends are served without FastAPI's per-request
    # work, inside everything below (the route's answers to the rest are unchanged).
    app.add_middleware(AppendRoute)
    # Idempotency-Key handling sees a body already bounded and checked; the context (run id,
    # metrics) also covers the 413 and 422 answers of the others.
    app.add_middleware(IdempotencyMiddleware, database=_database, metrics=metrics)
    # Outside Idempotency-Key handling, which takes a pooled connection for the whole request.
    app.add_middleware(RunWriteGate, wait_s=settings.db_lock_timeout_s)
    # Stream payloads are bytes: the UTF-8 and depth checks are not theirs (JSON mode has its own).
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        check=body_problem,
        unchecked_paths=(routes_streams.PREFIX,),
    )
    app.add_middleware(RunPathMiddleware)
    app.add_middleware(RequestContextMiddleware, metrics=metrics)
    # Outermost: the protocol's security headers on every stream answer, errors included.
    app.add_middleware(routes_streams.StreamHeadersMiddleware)
    # Around all of it, when the OTEL_* variables ask for traces: a request continues its caller's.
    tracing.instrument_app(app)
    return app


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


def _operation_id(route: APIRoute) -> str:
    # The handlers are private to their modules (`_get_run`); the operation ids clients name their
    # methods after stay those of the operation (`get_run_v1_runs__run_id__get`).
    return generate_unique_id(route).removeprefix("_")


def _database(scope: Scope) -> Database | None:
    """The service's database for a request, once the lifespan has started it."""
    svc = getattr(scope["app"].state, "services", None)
    return svc.db if isinstance(svc, Services) else None
