"""`python -m bench --load --quick --json --workers 1`: the mixed load's rows, every kind of client
served and no 5xx but 503 (the answer a client retries: 100 clients on a loaded 2-core machine
can exhaust the service's waits, which is an overload, not a fault). Timings are never asserted
(the machine is shared); the bench's own table reports every 503."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.bench_runs import database_of_its_own, quick_json


@pytest.fixture
def bench_database_url(pg_admin_url: str) -> Iterator[str]:
    with database_of_its_own(pg_admin_url, "ledger_bench_load") as url:
        yield url


@pytest.mark.timeout(300)
def test_quick_mixed_load_serves_every_kind_of_client_with_no_5xx_but_503(bench_database_url: str) -> None:
    document = quick_json(bench_database_url, ["-m", "bench", "--load", "--workers", "1"], timeout_s=240)
    rows = {row["kind"]: row for row in document["load"]}
    assert list(rows) == ["append", "upload", "long-poll", "SSE", "processes"]
    for kind in ("append", "upload", "long-poll", "SSE"):
        row = rows[kind]
        assert row["workers"] == 1
        assert row["count"] > 0, row
        assert row["5xx"] == row["503"] and row["other_errors"] == 0, row
        assert row["503"] < row["count"], row
        assert 0 < row["p50_ms"] <= row["p99_ms"], row
    # Readers follow the appenders' runs: every event they got was appended during the run.
    assert rows["long-poll"]["count"] <= rows["append"]["count"] * 25
    processes = rows["processes"]
    assert processes["server_cpu_s"] > 0 and processes["client_cpu_s"] > 0
    assert processes["server_rss_mb_before"] > 0 and processes["server_rss_mb_after"] > 0
