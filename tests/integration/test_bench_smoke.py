"""`python -m bench --quick --json` on a database of its own: every measure beside its baseline.

Timings are never asserted (the machine is shared); the shape is: every measure the README's table
shows is there, with a positive figure for ours and for the baseline, and a ratio that reads
"how close to raw" the same way for rates and latencies.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.bench_runs import database_of_its_own, quick_json

EXPECTED = (
    "append, 1 run",
    "append, 8 runs",
    "append, 1 run, 1,000 events/call",
    "append, 1 run, 1,000 events/call, vs an append that trims",
    "pool claim, 1 claimer",
    "pool claim, 8 claimers",
    "commit → wake, 1 waiter on one run, p50",
    "commit → wake, 1 waiter on one run, p99",
    "commit → wake, 100 waiters on one run, p50",
    "commit → wake, 100 waiters on one run, p99",
    "commit → wake, 100 followers on one run (callbacks), p50",
    "commit → wake, 100 followers on one run (callbacks), p99",
    "ingestion: late duplicate of a 1,000-node upload",
    "ingestion: progress tick, 1 of 50 nodes changed",
    "ingestion: 50-node upload, every node changed",
    "HTTP append, 8 clients (one event per request)",
    "HTTP append, 8 clients, bare asyncio client",
    "HTTP: 100 long-polls woken by one append, p50",
    "HTTP: 100 long-polls woken by one append, p99",
    "HTTP: 100 SSE tails woken by one append, p50",
    "HTTP: 100 SSE tails woken by one append, p99",
    "HTTP: 50-node upload, every node changed, 4 clients",
    "reporter: map.progress event",
    "reporter: log line (no match)",
    "reporter: log line (tool batch)",
)


@pytest.fixture
def bench_database_url(pg_admin_url: str) -> Iterator[str]:
    with database_of_its_own(pg_admin_url, "ledger_bench") as url:
        yield url


@pytest.mark.timeout(600)
def test_quick_bench_prints_every_measure_beside_its_baseline(bench_database_url: str) -> None:
    document = quick_json(bench_database_url, ["-m", "bench"], timeout_s=540)
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
