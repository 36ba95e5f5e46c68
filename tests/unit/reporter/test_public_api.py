"""The reporter's curated public surface, and its independence from the ledger's service."""

from __future__ import annotations

import subprocess
import sys

import reporter


def test_public_api_is_pinned() -> None:
    assert sorted(reporter.__all__) == [
        "DEFAULT_RETRY_POLICY",
        "DirectTransport",
        "HttpTransport",
        "LogMode",
        "NodeProgress",
        "ProgressReporter",
        "RetryPolicy",
        "SimulatedRun",
        "StaticPipeline",
        "Status",
        "StepState",
        "Transport",
        "interval_for_total_rows",
        "static_node_id",
    ]
    for name in reporter.__all__:
        assert getattr(reporter, name) is not None


def test_importing_the_reporter_loads_only_the_shared_core_of_the_ledger() -> None:
    # The reporter checks uploads with the ledger's own dependency-free rules, raises its errors,
    # talks HTTP through its client (which converts times with the ledger's clock) and spans its
    # uploads through the tracing facade (which imports nothing until tracing is on), and nothing
    # more: not the database stack. The client's own private modules are the client.
    code = (
        "import sys, reporter, reporter.testing, reporter.transports.http;"
        "roots = ('ledger', 'fastapi', 'psycopg', 'uvicorn', 'sqlalchemy');"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in roots"
        " and not m.startswith('ledger.client._'));"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (
        out.stdout.strip() == "ledger,ledger.client,ledger.clock,ledger.errors,ledger.tracing,ledger.validate"
    )
