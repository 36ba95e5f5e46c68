"""Prometheus metrics of one service process, on a registry of its own (not the global one).

Request counts and latencies are labelled by route template (`/v1/runs/{run_id}`), never by the
raw path. Listener reconnects, waiters and watchdog failures belong to library objects: they are
read from them at scrape time through callables (`bind_sources`), so nothing has to push them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE",
    "ServiceMetrics",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_Reading = Callable[[], float]


class _LiveSources(Collector):
    """Values owned by the listener and the watchdog, read when scraped."""

    def __init__(self) -> None:
        self.listener_reconnects: _Reading | None = None
        self.waiters: _Reading | None = None
        self.listener_connected: _Reading | None = None
        self.watchdog_failures: _Reading | None = None
        self.event_reads: _Reading | None = None
        self.trace_spans_dropped: _Reading | None = None

    def collect(self) -> Iterator[Metric]:
        if self.listener_reconnects is not None:
            yield CounterMetricFamily(
                "ledger_listener_reconnects",
                "Times the LISTEN connection was re-established.",
                value=self.listener_reconnects(),
            )
        if self.listener_connected is not None:
            yield GaugeMetricFamily(
                "ledger_listener_connected",
                "1 while the LISTEN connection is up.",
                value=self.listener_connected(),
            )
        if self.waiters is not None:
            yield GaugeMetricFamily(
                "ledger_waiters", "Long-poll and SSE readers waiting for a wake-up.", value=self.waiters()
            )
        if self.event_reads is not None:
            # Beside `ledger_waiters`: readers woken together share one read, so this grows by
            # wake-ups, not by readers.
            yield CounterMetricFamily(
                "ledger_event_reads",
                "Reads of the event log made for long-polls, SSE tails and event lists.",
                value=self.event_reads(),
            )
        if self.watchdog_failures is not None:
            yield CounterMetricFamily(
                "ledger_watchdog_failures",
                "Stalled runs this process's watchdog failed.",
                value=self.watchdog_failures(),
            )
        if self.trace_spans_dropped is not None:
            yield CounterMetricFamily(
                "ledger_trace_spans_dropped",
                "Spans dropped because the export queue was full (the trace collector slow or gone).",
                value=self.trace_spans_dropped(),
            )


class ServiceMetrics:
    """The service's metrics; `render()` is the `/metrics` body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ledger_http_requests",
            "HTTP requests served, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ledger_http_request_duration_seconds",
            "Time to serve a request (a stream counts until it ends), by method and route template.",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.events_appended = Counter(
            "ledger_events_appended",
            "Events appended through this process's append and status-upload endpoints.",
            registry=self.registry,
        )
        self.uploads = Counter(
            "ledger_status_uploads",
            "Status uploads received, by outcome (applied or duplicate).",
            ["outcome"],
            registry=self.registry,
        )
        self.idempotency = Counter(
            "ledger_idempotency_requests",
            "POST/PUT requests with an Idempotency-Key, by outcome (stored, replayed, mismatch, "
            "not_stored, unavailable).",
            ["outcome"],
            registry=self.registry,
        )
        self.live = _LiveSources()
        self.registry.register(self.live)
        # The labelled series of each (method, route template, status): `labels()` builds and
        # looks them up under a lock on every call, a cost worth skipping on every request. The
        # keys are bounded (route templates, not paths), so this stays small.
        self._request_series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        series = self._request_series.get(key)
        if series is None:
            series = (self.requests.labels(method, route, str(status)), self.latency.labels(method, route))
            self._request_series[key] = series
        series[0].inc()
        series[1].observe(seconds)

    def bind_sources(
        self,
        *,
        listener_reconnects: _Reading | None = None,
        listener_connected: _Reading | None = None,
        waiters: _Reading | None = None,
        watchdog_failures: _Reading | None = None,
        event_reads: _Reading | None = None,
        trace_spans_dropped: _Reading | None = None,
    ) -> None:
        self.live.listener_reconnects = listener_reconnects
        self.live.listener_connected = listener_connected
        self.live.waiters = waiters
        self.live.watchdog_failures = watchdog_failures
        self.live.event_reads = event_reads
        self.live.trace_spans_dropped = trace_spans_dropped

    def render(self) -> bytes:
        return generate_latest(self.registry)
