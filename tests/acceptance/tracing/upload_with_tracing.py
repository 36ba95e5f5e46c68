"""One status upload through `HttpTransport`, traced with the SDK's in-memory exporter: run in a process
of its own (tracing is switched on once per process), it prints the spans it recorded as JSON lines.

    python -m tests.acceptance.tracing.upload_with_tracing URL TOKEN RUN_ID
"""

from __future__ import annotations

import asyncio
import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ledger import tracing
from reporter.transports.http import HttpTransport
from tests.acceptance.test_ingest_api import upload


async def main(url: str, token: str, run_id: str) -> None:
    async with HttpTransport(url, token) as transport:
        await transport.upload(upload(run_id, 1))


if __name__ == "__main__":
    exporter = InMemorySpanExporter()
    assert tracing.setup("test-worker", exporter=exporter)
    asyncio.run(main(*sys.argv[1:4]))
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.force_flush()
    for span in exporter.get_finished_spans():
        context = span.get_span_context()
        print(
            json.dumps(
                {
                    "name": span.name,
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "parent_id": f"{span.parent.span_id:016x}" if span.parent else "",
                    "attributes": dict(span.attributes or {}),
                }
            )
        )
