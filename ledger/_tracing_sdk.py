"""The OpenTelemetry side of `ledger.tracing`: imported only once tracing is switched on.

The SDK is built from the standard variables, as its own auto-configuration would: the resource from
`OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (our process's name when neither names the service),
the sampler from `OTEL_TRACES_SAMPLER` (read by the provider), batching from `OTEL_BSP_*`, and the
exporters named in `OTEL_TRACES_EXPORTER` (`otlp`, the default, over HTTP/protobuf to
`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`; `console`, JSON on stdout). The maintained instrumentations
do the propagation: httpx injects `traceparent`, the ASGI middleware extracts it, psycopg spans each
statement.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ledger.tracing import Attribute

__all__ = [
    "annotate",
    "configure",
    "flush",
    "instrument_app",
    "joined",
    "span",
]

_tracer: trace.Tracer | None = None
_provider: TracerProvider | None = None
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

            exporters.append(OTLPSpanExporter())
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
        provider.add_span_processor(BatchSpanProcessor(each))
    trace.set_tracer_provider(provider)
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider)
    _provider = provider
    _tracer = provider.get_tracer("ledger")


def flush() -> None:
    if _provider is not None:
        _provider.force_flush()


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


def span(name: str, attributes: Mapping[str, Attribute | None]) -> AbstractContextManager[Any]:
    assert _tracer is not None
    return _tracer.start_as_current_span(name, attributes=_clean(attributes))


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
