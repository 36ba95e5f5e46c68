"""A trace collector that is down or hangs costs the ledger nothing it waits on, and an idle service
exports nothing: the service and `ledger report` exporting to a local socket that accepts and never
reads (loopback only), and to a receiver that records what an idle service sends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.conftest import ACCEPTANCE_ENV, Server, new_id, start_server, stop_server
from tests.acceptance.tracing.otlp_receiver import Receiver, blackhole, receiving

GRACE_S = float(ACCEPTANCE_ENV["LEDGER_SHUTDOWN_GRACE_S"])
# What tracing may add at most by its own bounds: one export (1 s) and the exit's wait (0.5 s),
# with a wide margin for a loaded machine. A collector that hangs used to add 8-10 s.
EXPORT_BOUNDS_S = 1.0 + 0.5
MARGIN_S = 5.0
ARRIVAL_TIMEOUT_S = 30.0
ERROR = 2


@pytest.fixture(scope="module")
def hole() -> Iterator[str]:
    with blackhole() as endpoint:
        yield endpoint


def otel(endpoint: str) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


def test_serve_stops_within_its_grace_with_the_collector_hanging(
    database_url: str, hole: str, tmp_path: Path
) -> None:
    server = start_server(database_url, tmp_path, **otel(hole))
    try:
        with server.client() as http:
            run_id = new_id("dead-collector")
            assert http.post("/v1/runs", json={"run_id": run_id}).status_code == 200
            for n in range(20):
                answer = http.post(
                    f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": f"{n}"}]}
                )
                assert answer.status_code == 200
        server.process.send_signal(signal.SIGTERM)
        # The SDK's own exit waited 30 s for a collector that never answers.
        assert server.process.wait(GRACE_S + MARGIN_S) == 0
    finally:
        stop_server(server)


def _report(server: Server, cwd: Path, extra_env: dict[str, str]) -> float:
    lines = [{"type": "log", "line": "hello"}, {"type": "result", "status": "completed"}]
    env = {**os.environ, "LEDGER_URL": server.url, "LEDGER_TOKEN": server.token, **extra_env}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "report", "--run-id", new_id("report-dead-collector")],
        input="\n".join(json.dumps(line) for line in lines) + "\n",
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return time.monotonic() - started


def test_ledger_report_adds_no_more_than_its_export_bounds_with_the_collector_hanging(
    server: Server, hole: str, tmp_path: Path
) -> None:
    untraced = _report(server, tmp_path, {"OTEL_SDK_DISABLED": "true"})
    traced = _report(server, tmp_path, otel(hole))
    assert traced - untraced < EXPORT_BOUNDS_S + MARGIN_S, (traced, untraced)


@pytest.fixture(scope="module")
def idle_receiver() -> Iterator[Receiver]:
    with receiving() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def busy_upkeep_server(
    database_url: str, idle_receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    # The watchdog passes every 50 ms and fails a run after 1 s: its loop visibly runs.
    server = start_server(
        database_url,
        tmp_path_factory.mktemp("idle-traced"),
        **otel(idle_receiver.endpoint),
        LEDGER_WATCHDOG_INTERVAL_S="0.05",
        LEDGER_WATCHDOG_STALL_S="1",
    )
    yield server
    stop_server(server)


def test_upkeep_and_health_probes_are_not_traced_and_expected_404s_are_not_errors(
    busy_upkeep_server: Server, idle_receiver: Receiver
) -> None:
    server = busy_upkeep_server
    trace_id = os.urandom(16).hex()
    with server.client() as http:
        quiet = new_id("quiet")
        assert http.post("/v1/runs", json={"run_id": quiet}).status_code == 200
        deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
        while http.get(f"/v1/runs/{quiet}").json().get("status") != "failed":
            assert time.monotonic() < deadline, "the watchdog never failed the quiet run"
            assert http.get("/healthz").status_code == 200 and http.get("/readyz").status_code == 200
            time.sleep(0.05)
        # A reader polling a run that does not exist yet: the answer it expects, not a fault.
        missing = http.get(
            f"/v1/runs/{new_id('not-yet')}/events",
            params={"after": 0, "timeout_ms": 0},
            headers={"traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-01"},
        )
        assert missing.status_code == 404
    deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
    while not any(s.trace_id == trace_id and s.name.startswith("GET ") for s in idle_receiver.all()):
        assert time.monotonic() < deadline, "the traced request's spans never arrived"
        time.sleep(0.05)
    spans = idle_receiver.all()
    # Every trace starts at a request the test made: none at the watchdog's or the listener's
    # statements, none at a health probe.
    roots = [s for s in spans if not s.parent_id]
    assert roots and all(s.name.split(" ")[0] in ("GET", "POST") for s in roots), [
        (s.name, s.attributes) for s in roots if not s.name.startswith(("GET", "POST"))
    ]
    assert not [s for s in spans if "/healthz" in s.name or "/readyz" in s.name]
    of_404 = [s for s in spans if s.trace_id == trace_id]
    assert [s.name for s in of_404 if s.status == ERROR] == []
    assert "events long-poll wait" in [s.name for s in of_404]
