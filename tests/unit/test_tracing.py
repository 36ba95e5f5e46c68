"""`ledger.tracing`: when the OTEL_* variables switch traces on, and that without them nothing the
`otel` extra brings is imported (the hot paths pay nothing). The OpenTelemetry API itself is not the
extra's: recent FastAPI releases depend on it and import it, so the blocker below refuses only the
SDK, the exporters and the instrumentations."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ledger import tracing

ON = True
OFF = False


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, OFF),
        ({"OTEL_TRACES_EXPORTER": "console"}, ON),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ON),
        ({"OTEL_TRACES_EXPORTER": "none"}, OFF),
        ({"OTEL_TRACES_EXPORTER": " None , "}, OFF),
        ({"OTEL_TRACES_EXPORTER": "none,console"}, ON),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ON),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ON),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, OFF),
        # An explicit `none` wins over an endpoint left in the environment.
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, OFF),
        # The SDK's own off switch wins over everything.
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, OFF),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, OFF),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "console"}, ON),
    ],
)
def test_traces_are_on_only_when_the_standard_variables_ask(environ: dict[str, str], expected: bool) -> None:
    assert tracing.requested(environ) is expected


# Imports the service and the reporter, builds the app and uses the facade as the hot paths do, with
# every import of what the extra installs refused; prints what of it was imported.
_BLOCKED = textwrap.dedent(
    """
    import importlib.abc, sys

    EXTRA = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.instrumentation")

    class NoOpenTelemetry(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.startswith(EXTRA):
                raise ImportError(f"blocked: {name}", name=name)
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    from ledger import tracing
    from ledger.service.app import create_app
    from ledger.service.settings import load_service_settings
    import reporter.transports.http

    create_app(load_service_settings(), "postgresql://127.0.0.1:1/none", ["token"])
    with tracing.span("a span", run_id="r"):
        tracing.annotate(events_appended=1)
    print("active", tracing.active())
    print("imported", sorted(m for m in sys.modules if m.startswith(EXTRA)))
    """
)


def _run_blocked(**environ: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("OTEL_", "TRACE"))}
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED],
        env={**clean, **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_the_variables_nothing_of_opentelemetry_is_imported() -> None:
    done = _run_blocked()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["active False", "imported []"]
    assert "tracing" not in done.stderr


def test_without_the_extra_the_variables_give_one_line_and_the_service_runs_untraced() -> None:
    done = _run_blocked(OTEL_TRACES_EXPORTER="console")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["active False", "imported []"]
    said = [line for line in done.stderr.splitlines() if "tracing" in line]
    assert len(said) == 1
    assert said[0].startswith(
        "tracing is off: OTEL_* asks for it but OpenTelemetry is not installed (opentelemetry"
    )
    assert said[0].endswith("): pip install 'run-ledger[otel]'")


# A process where something else (another library, a host application) has installed a tracer
# provider, while the service was not asked to trace: it must still send no span.
_FOREIGN_PROVIDER = textwrap.dedent(
    """
    import asyncio, httpx
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from ledger.service.app import create_app
    from ledger.service.settings import load_service_settings

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    app = create_app(load_service_settings(), "postgresql://127.0.0.1:1/none", ["token"])

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ledger") as http:
            return [(await http.get(path)).status_code for path in ("/healthz", "/v1/runs/r", "/nowhere")]

    print("answers", asyncio.run(ask()))
    print("spans", [span.name for span in exporter.get_finished_spans()])
    """
)


def test_a_tracer_provider_installed_by_someone_else_does_not_make_the_service_trace() -> None:
    pytest.importorskip("opentelemetry.sdk")
    clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("OTEL_", "TRACE"))}
    done = subprocess.run(
        [sys.executable, "-c", _FOREIGN_PROVIDER], env=clean, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answers, spans = done.stdout.splitlines()
    assert answers == "answers [200, 401, 404]"
    assert spans == "spans []"


def test_a_collector_that_never_answers_costs_a_bounded_exit_and_dropped_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In process, without switching this process's tracing on: the processor the service uses,
    # in front of an exporter stuck as one posting to a collector that never reads.
    pytest.importorskip("opentelemetry.sdk")
    import threading

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from ledger._tracing_sdk import SHUTDOWN_S, BoundedBatchSpanProcessor

    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    release = threading.Event()
    exporting = threading.Event()

    class Stuck(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            exporting.set()
            release.wait()
            return SpanExportResult.SUCCESS

    processor = BoundedBatchSpanProcessor(Stuck())
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    try:
        for _ in range(4):
            with tracer.start_as_current_span("fills the queue"):
                pass
        assert exporting.wait(30), "the batch never reached the exporter"
        for _ in range(50):
            with tracer.start_as_current_span("finds it full, or not"):
                pass
        # The exporter holds one batch; the queue takes 4 more; the rest is dropped, counted.
        assert processor.dropped == 50 - 4
        stopping = threading.Thread(target=processor.shutdown)
        stopping.start()
        # The exit waits `SHUTDOWN_S` for the stuck export, not the SDK's 30 s (wide margin).
        stopping.join(SHUTDOWN_S + 10)
        assert not stopping.is_alive()
    finally:
        release.set()
