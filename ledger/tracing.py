"""Optional OpenTelemetry tracing: one trace from a worker's upload through the service to Postgres.

Tracing is off unless the standard variables ask for it (`OTEL_TRACES_EXPORTER` other than `none`,
or an `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and
`OTEL_SDK_DISABLED=true` wins over both. It needs the `otel` extra
(`pip install 'run-ledger[otel]'`).

This module is the only one the rest of the code calls, and it imports nothing of OpenTelemetry: until
`setup` has switched tracing on, `span` is a shared null context and `annotate` returns at its first
line, so the hot paths pay one global read. `setup` imports `ledger._tracing_sdk`, which builds the SDK
from the same variables and instruments what carries a trace across processes: httpx (the reporter's
uploads and `ledger.client` send `traceparent`), the ASGI app (the service continues the trace) and
psycopg (each statement a child of the request that ran it). The spans our code adds are what those
instrumentations cannot know: the run, the attempt and upload, what was appended, the write gate's
wait, the claim's pool, each long-poll or SSE wait.

The service's own upkeep (the watchdog's and retention's ticks, the listener's probes, the
connection pool's background work) is not traced unless `LEDGER_TRACE_UPKEEP=1`: an idle service
would otherwise export a root span a second. Health probes and `/metrics` never are.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "UPKEEP_VAR",
    "Attribute",
    "active",
    "annotate",
    "dropped_spans",
    "instrument_app",
    "joined_from_environment",
    "requested",
    "setup",
    "span",
    "upkeep",
]

UPKEEP_VAR = "LEDGER_TRACE_UPKEEP"

Attribute = str | bool | int | float

_OFF: AbstractContextManager[None] = nullcontext()
# The SDK side once `setup` switched tracing on; None means every call here is a no-op.
_sdk: ModuleType | None = None
_trace_upkeep = False


def requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard OpenTelemetry variables ask for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    exporters.discard("")
    if exporters:
        return exporters != {"none"}
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def setup(service_name: str, *, exporter: Any = None) -> bool:
    """Switch tracing on for this process if the environment asks for it (or `exporter`, an SDK
    `SpanExporter`, is given: tests); True when it is on. Without the `otel` extra, one line on
    stderr says so and tracing stays off. Idempotent: the first call's provider stays."""
    global _sdk, _trace_upkeep
    if _sdk is not None:
        return True
    if exporter is None and not requested():
        return False
    try:
        from ledger import _tracing_sdk
    except ImportError as exc:
        print(
            f"tracing is off: OTEL_* asks for it but OpenTelemetry is not installed ({exc.name}): "
            "pip install 'run-ledger[otel]'",
            file=sys.stderr,
        )
        return False
    _tracing_sdk.configure(service_name, exporter)
    _trace_upkeep = os.environ.get(UPKEEP_VAR, "").strip().lower() in ("1", "true", "yes", "on")
    _sdk = _tracing_sdk
    return True


def active() -> bool:
    return _sdk is not None


def instrument_app(app: FastAPI) -> None:
    """Continue incoming traces in the service's requests (outermost, so every answer is spanned)."""
    if _sdk is not None:
        _sdk.instrument_app(app)


def span(name: str, **attributes: Attribute | None) -> AbstractContextManager[Any]:
    """A span of our own, a child of the current one (a null context while tracing is off)."""
    if _sdk is None:
        return _OFF
    opened: AbstractContextManager[Any] = _sdk.span(name, attributes)
    return opened


def dropped_spans() -> float:
    """Spans dropped because the export queue was full (0 while tracing is off)."""
    return float(_sdk.dropped_spans()) if _sdk is not None else 0.0


def upkeep() -> AbstractContextManager[None]:
    """Within it, nothing is traced unless `LEDGER_TRACE_UPKEEP` asks: for the service's own
    periodic work. A task started inside keeps it (it copies the context it was created in)."""
    if _sdk is None or _trace_upkeep:
        return _OFF
    untraced: AbstractContextManager[None] = _sdk.untraced()
    return untraced


def annotate(**attributes: Attribute | None) -> None:
    """Add attributes (None values skipped) to the current span: the request's, or ours."""
    if _sdk is not None:
        _sdk.annotate(attributes)


@contextmanager
def joined_from_environment(environ: Mapping[str, str] = os.environ) -> Iterator[None]:
    """Within it, spans join the trace the worker passed in `TRACEPARENT` (and `TRACESTATE`), the
    way a process hands its trace to a child it starts; without one, they start a trace of their own."""
    if _sdk is None or not environ.get("TRACEPARENT"):
        yield
        return
    with _sdk.joined({"traceparent": environ["TRACEPARENT"], "tracestate": environ.get("TRACESTATE", "")}):
        yield
