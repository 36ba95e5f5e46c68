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
        "StaleAttemptError",
        "StaticPipeline",
        "Status",
        "StepState",
        "Transport",
        "TransportError",
        "UploadRejected",
        "interval_for_total_rows",
        "static_node_id",
    ]
    for name in reporter.__all__:
        assert getattr(reporter, name) is not None


def test_importing_the_reporter_loads_only_the_shared_checks_of_the_ledger() -> None:
    # The reporter checks uploads with the ledger's own dependency-free rules and spans its uploads
    # through the tracing facade (which imports nothing until tracing is on), and nothing more.
    code = (
        "import sys, reporter, reporter.testing, reporter.transports.direct;"
        "roots = ('ledger', 'fastapi', 'psycopg', 'uvicorn', 'sqlalchemy');"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in roots);"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ledger,ledger.tracing,ledger.validate"
