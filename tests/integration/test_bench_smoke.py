"""`python -m bench --quick --json` on a database of its own: every measure beside its baseline.

Timings are never asserted (the machine is shared); the shape is: every measure the README's table
shows is there, with a positive figure for ours and for the baseline, and a ratio that reads
"how close to raw" the same way for rates and latencies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from ledger.testing import clone_database, drop_database, ensure_template

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = (
    "append, 1 run",
    "append, 8 runs",
    "append, 1 run, 1,000 events/call",
    "pool claim, 1 claimer",
    "pool claim, 8 claimers",
    "commit → wake, 1 waiter on one run, p50",
    "commit → wake, 1 waiter on one run, p99",
    "commit → wake, 100 waiters on one run, p50",
    "commit → wake, 100 waiters on one run, p99",
    "ingestion: late duplicate of a 1,000-node upload",
    "ingestion: 50-node upload, every node changed",
    "HTTP append, 8 clients (one event per request)",
    "HTTP append, 8 clients, bare asyncio client",
    "HTTP: 100 long-polls woken by one append, p50",
    "HTTP: 100 long-polls woken by one append, p99",
    "HTTP: 50-node upload, every node changed, 4 clients",
    "reporter: map.progress event",
    "reporter: log line (no match)",
    "reporter: log line (tool batch)",
)


@pytest.fixture
def bench_database_url(pg_admin_url: str) -> Iterator[str]:
    # A database of its own: the bench leaves runs and pool entries behind that other tests on
    # this worker's database would see.
    name = f"ledger_bench_{os.getpid()}"
    yield clone_database(pg_admin_url, ensure_template(pg_admin_url), name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        drop_database(conn, name)


@pytest.mark.timeout(600)
def test_quick_bench_prints_every_measure_beside_its_baseline(bench_database_url: str) -> None:
    env = {**os.environ, "LEDGER_DATABASE_URL": bench_database_url}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["profile"] == "quick"
    assert document["where"] == "LEDGER_DATABASE_URL"
    rows = document["measures"]
    assert [row["measure"] for row in rows] == list(EXPECTED)
    for row in rows:
        assert row["kind"] in ("rate", "latency"), row
        assert row["ours"] > 0 and row["baseline"] > 0, row
        assert row["unit"] and row["baseline_is"], row
        closeness = row["ours"] / row["baseline"] if row["kind"] == "rate" else row["baseline"] / row["ours"]
        assert row["ratio"] > 0
        assert row["ratio"] == pytest.approx(closeness, rel=1e-3, abs=1e-4), row
        assert (row["unit"] in ("ms", "µs/event")) == (row["kind"] == "latency"), row
