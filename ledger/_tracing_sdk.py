"""The OpenTelemetry side of `ledger.tracing`: imported only once tracing is switched on.

The SDK is built from the standard variables, as its own auto-configuration would: the resource from
`OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (our process's name when neither names the service),
the sampler from `OTEL_TRACES_SAMPLER` (read by the provider), batching from `OTEL_BSP_*`, and the
exporters named in `OTEL_TRACES_EXPORTER` (`otlp`, the default, over HTTP/protobuf to
`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`; `console`, JSON on stdout). The maintained instrumentations
do the propagation: httpx injects `traceparent`, the ASGI middleware extracts it, psycopg spans each
statement.

A collector that is down, or accepts and never reads, must not slow the ledger: spans wait in a
bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048) that a background thread exports, one that finds
the queue full is dropped and counted (`dropped_spans`) without a log line each, an export gives
up after `_EXPORT_TIMEOUT_S` (unless `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` says otherwise), and
the process's exit waits at most `SHUTDOWN_S` for what is still queued.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.instrumentation.utils import is_instrumentation_enabled, suppress_instrumentation
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Status, StatusCode
from starlette.types import ASGIApp, Receive, Scope, Send

from ledger.errors import LedgerError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ledger.tracing import Attribute

__all__ = [
    "SHUTDOWN_S",
    "BoundedBatchSpanProcessor",
    "annotate",
    "configure",
    "dropped_spans",
    "flush",
    "instrument_app",
    "joined",
    "span",
    "untraced",
]

_tracer: trace.Tracer | None = None
_provider: TracerProvider | None = None
# One export (a batch, its retries included) against a collector that does not answer.
_EXPORT_TIMEOUT_S = 1.0
# How long the process's exit (and `flush`) waits for queued spans to leave.
SHUTDOWN_S = 0.5
_TIMEOUT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
# Liveness and scraping would be a span each, every few seconds, for nothing a trace needs.
_EXCLUDED_URLS = "/healthz,/readyz,/metrics"


def _exporters(environ: Mapping[str, str]) -> list[SpanExporter]:
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    exporters: list[SpanExporter] = []
    for name in names:
        if name in ("", "none"):
            continue
        if name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            timeout = (
                None if any(environ.get(var, "").strip() for var in _TIMEOUT_VARS) else _EXPORT_TIMEOUT_S
            )
            exporters.append(OTLPSpanExporter(timeout=timeout))
        else:
            print(
                f"OTEL_TRACES_EXPORTER: {name!r} is not an exporter here (otlp, console, none)",
                file=sys.stderr,
            )
    return exporters


def _resource(service_name: str, environ: Mapping[str, str]) -> Resource:
    named = environ.get("OTEL_SERVICE_NAME", "").strip() or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    # `Resource.create` reads both variables; what is passed here would override them.
    return Resource.create({} if named else {SERVICE_NAME: service_name})


def configure(service_name: str, exporter: SpanExporter | None) -> None:
    global _tracer, _provider
    provider = TracerProvider(resource=_resource(service_name, os.environ))
    for each in [exporter] if exporter is not None else _exporters(os.environ):
        provider.add_span_processor(BoundedBatchSpanProcessor(each))
    trace.set_tracer_provider(provider)
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider)
    _provider = provider
    _tracer = provider.get_tracer("ledger")


def flush() -> None:
    """Export what is queued, waiting at most `SHUTDOWN_S`."""
    if _provider is not None:
        _provider.force_flush(int(SHUTDOWN_S * 1000))


def dropped_spans() -> int:
    """Spans dropped because the export queue was full (a collector too slow, or gone)."""
    return sum(p.dropped for p in _processors)


_processors: list[BoundedBatchSpanProcessor] = []


class BoundedBatchSpanProcessor(BatchSpanProcessor):
    """The SDK's batch processor, with an exit that waits `SHUTDOWN_S` (the SDK's waits 30 s for a
    collector that never answers) and a full queue that drops a span with a count, not a warning
    line per span (which, under load, cost the requests more than the export itself)."""

    def __init__(self, exporter: SpanExporter) -> None:
        super().__init__(exporter)
        self.dropped = 0
        self._queue_size = self._batch_processor._max_queue_size
        _processors.append(self)

    def on_end(self, span: ReadableSpan) -> None:
        if len(self._batch_processor._queue) >= self._queue_size:
            self.dropped += 1
            return
        super().on_end(span)

    def shutdown(self) -> None:
        self._batch_processor.shutdown(timeout_millis=int(SHUTDOWN_S * 1000))

    def force_flush(self, timeout_millis: int | None = None) -> bool:
        # The SDK's flush exports everything, however long that takes: bounded from here, on a
        # thread of its own that the process's exit does not wait for.
        limit_s = SHUTDOWN_S if timeout_millis is None else timeout_millis / 1000
        done = threading.Event()

        def flush_all() -> None:
            super(BoundedBatchSpanProcessor, self).force_flush()
            done.set()

        threading.Thread(target=flush_all, name="ledger-trace-flush", daemon=True).start()
        return done.wait(limit_s)


def instrument_app(app: FastAPI) -> None:
    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=_provider,
        excluded_urls=_EXCLUDED_URLS,
        # A span per ASGI message would give an SSE tail one per frame; the waits are spanned instead.
        exclude_spans=["receive", "send"],
    )
    # Each request starts from an empty context, so one without `traceparent` starts a trace of its
    # own. The server's task for a request inherits the context its connection's read callback was
    # registered in, and uvicorn re-registers it (resuming a paused read) from inside the previous
    # request on that connection: without this, that request's span became the next one's parent.
    build = app.build_middleware_stack

    def build_fresh() -> ASGIApp:
        return _FreshContext(build())

    app.build_middleware_stack = build_fresh  # type: ignore[method-assign]


class _FreshContext:
    """Run the request in an empty context (see `instrument_app`). It keeps the wrapped app as `.app`,
    where FastAPI looks for this instrumentation (and then adds no request span of its own)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = context.attach(Context())
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)


def _clean(attributes: Mapping[str, Attribute | None]) -> dict[str, Attribute]:
    return {f"ledger.{key}": value for key, value in attributes.items() if value is not None}


@contextmanager
def span(name: str, attributes: Mapping[str, Attribute | None]) -> Iterator[Any]:
    """A span of ours. A refusal (`LedgerError`: a run not created yet, a bad cursor) is the answer
    the caller asked for, not a fault: the span keeps its status and says what was refused; any
    other error marks it failed. Inside `untraced`, nothing."""
    assert _tracer is not None
    if not is_instrumentation_enabled():
        yield trace.INVALID_SPAN
        return
    with _tracer.start_as_current_span(
        name, attributes=_clean(attributes), record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except LedgerError as exc:
            current.set_attribute("ledger.refused", type(exc).__name__)
            raise
        except Exception as exc:
            current.record_exception(exc)
            current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise


def untraced() -> AbstractContextManager[None]:
    """Nothing inside is traced: our spans, the instrumented statements and HTTP calls."""
    return suppress_instrumentation()


def annotate(attributes: Mapping[str, Attribute | None]) -> None:
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(_clean(attributes))


@contextmanager
def joined(carrier: Mapping[str, str]) -> Iterator[None]:
    token = context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)
