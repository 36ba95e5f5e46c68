"""Traces across processes: a worker's upload, the service that serves it and its statements, one trace.

The service runs as `ledger serve` with the standard OTEL_* variables pointing at a small OTLP/HTTP
receiver in the test; the worker's side is a process of its own (tracing is switched on once per
process) that records with the SDK's in-memory exporter, or `ledger report` exporting to the same
receiver. Spans are joined by trace id and parent span id, as a collector would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import ROOT, Server, new_id, start_server, stop_server
from tests.acceptance.tracing.otlp_receiver import Receiver, Span, receiving
from tests.acceptance.tracing.waterfall import demo_trace

# Spans reach the receiver within a batch delay; the tests wait for them up to this long.
ARRIVAL_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with receiving() as endpoint:
        yield endpoint


def _otel_env(receiver: Receiver) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


@pytest.fixture(scope="module")
def traced_server(
    database_url: str, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    server = start_server(database_url, tmp_path_factory.mktemp("traced"), **_otel_env(receiver))
    yield server
    stop_server(server)


def _wait_for(receiver: Receiver, trace_id: str, *, until: Any) -> list[Span]:
    deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
    while True:
        spans = receiver.of_trace(trace_id)
        if until(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.05)


def _descends(span: Span, ancestor: Span, spans: list[Span]) -> bool:
    by_id = {each.span_id: each for each in spans}
    parent = by_id.get(span.parent_id)
    while parent is not None:
        if parent.span_id == ancestor.span_id:
            return True
        parent = by_id.get(parent.parent_id)
    return False


def _server_span(spans: list[Span], route: str) -> Span | None:
    return next((s for s in spans if s.service == "run-ledger" and s.name == f"POST {route}"), None)


def test_an_upload_through_http_transport_is_one_trace_from_reporter_to_postgres(
    traced_server: Server, receiver: Receiver
) -> None:
    run_id = new_id("traced")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.acceptance.tracing.upload_with_tracing",
            traced_server.url,
            traced_server.token,
            run_id,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    worker = [json.loads(line) for line in done.stdout.splitlines()]
    upload = next(s for s in worker if s["name"] == "reporter upload")
    assert upload["attributes"] == {
        "ledger.run_id": run_id,
        "ledger.producer_attempt": 1,
        "ledger.upload_seq": 1,
        "ledger.duplicate": False,
    }
    # The HTTP client span is the upload's child and the service's parent: it sent `traceparent`.
    sent = next(s for s in worker if s["parent_id"] == upload["span_id"])
    assert sent["trace_id"] == upload["trace_id"]

    route = "/v1/runs/{run_id}/status"
    spans = _wait_for(
        receiver,
        upload["trace_id"],
        until=lambda spans: (
            (served := _server_span(spans, route)) is not None
            and any(_descends(s, served, spans) and "db.system" in str(s.attributes) for s in spans)
        ),
    )
    served = _server_span(spans, route)
    assert served is not None, [s.name for s in spans]
    assert served.parent_id == sent["span_id"]
    assert served.attributes["ledger.run_id"] == run_id
    assert served.attributes["ledger.producer_attempt"] == 1
    assert served.attributes["ledger.upload_seq"] == 1
    assert served.attributes["ledger.duplicate"] is False
    assert served.attributes["ledger.events_appended"] >= 2  # the upload's two live log lines at least
    statements = [
        s for s in spans if _descends(s, served, spans) and any(k.startswith("db.") for k in s.attributes)
    ]
    assert statements, [(s.name, s.attributes) for s in spans]


def test_ledger_report_joins_the_workers_trace_from_traceparent(
    traced_server: Server, receiver: Receiver, tmp_path: Path
) -> None:
    run_id = new_id("traced-report")
    trace_id, parent_id = os.urandom(16).hex(), os.urandom(8).hex()
    lines = [{"type": "log", "line": "hello"}, {"type": "result", "status": "completed"}]
    env = {
        **os.environ,
        **_otel_env(receiver),
        "LEDGER_URL": traced_server.url,
        "LEDGER_TOKEN": traced_server.token,
        "TRACEPARENT": f"00-{trace_id}-{parent_id}-01",
    }
    done = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "report", "--run-id", run_id],
        input="\n".join(json.dumps(line) for line in lines) + "\n",
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    spans = _wait_for(
        receiver,
        trace_id,
        until=lambda spans: any(
            s.attributes.get("ledger.duplicate") is False and s.service == "run-ledger" for s in spans
        ),
    )
    report = next(s for s in spans if s.name == "ledger report")
    assert report.service == "ledger-report"
    assert report.parent_id == parent_id
    assert report.attributes["ledger.run_id"] == run_id
    uploads = [s for s in spans if s.name == "reporter upload"]
    assert uploads and all(_descends(s, report, spans) for s in uploads)
    served = [s for s in spans if s.service == "run-ledger" and s.attributes.get("ledger.run_id") == run_id]
    assert served and all(_descends(s, report, spans) for s in served)


def test_a_long_poll_wait_is_a_span_of_its_own(traced_server: Server, receiver: Receiver) -> None:
    run_id = new_id("traced-wait")
    trace_id = os.urandom(16).hex()
    traceparent = f"00-{trace_id}-{os.urandom(8).hex()}-01"
    with traced_server.client() as http:
        assert http.post("/v1/runs", json={"run_id": run_id}).status_code == 200
        appended = http.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "x"}]})
        assert appended.status_code == 200, appended.text
        answer = http.get(
            f"/v1/runs/{run_id}/events",
            params={"after": 1, "timeout_ms": 50},
            headers={"traceparent": traceparent},
        )
    assert answer.status_code == 200
    spans = _wait_for(
        receiver, trace_id, until=lambda spans: any(s.name == "events long-poll wait" for s in spans)
    )
    wait = next(s for s in spans if s.name == "events long-poll wait")
    served = next(s for s in spans if s.name == "GET /v1/runs/{run_id}/events")
    assert wait.parent_id == served.span_id
    assert wait.attributes == {"ledger.run_id": run_id, "ledger.after": "1", "ledger.timeout_ms": 50}


def test_ledger_demo_is_one_trace_each_request_under_the_call_that_sent_it(tmp_path: Path) -> None:
    # The demo serves and reports in one process on the plain asyncio loop, where a request's task
    # inherits the context its connection's reads were last resumed in: the previous request's.
    spans = demo_trace(["--rows", "1000"], tmp_path)
    by_id = {span.span_id: span for span in spans}
    served = [span for span in spans if "/v1/" in span.name]
    assert served
    for span in served:
        caller = by_id[span.parent_id]
        assert caller.name in ("POST", "GET"), (span.name, caller.name)
    # And each call the worker made is served in this trace, not adopted by another request's.
    calls = [span for span in spans if span.name in ("POST", "GET")]
    assert calls and {span.span_id for span in calls} == {span.parent_id for span in served}
    uploads = [span for span in spans if span.name == "reporter upload"]
    assert uploads and all(by_id[span.parent_id].name == "ledger demo run" for span in uploads)
