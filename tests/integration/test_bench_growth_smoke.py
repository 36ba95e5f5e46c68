"""`python -m bench --growth --quick --json` on a database of its own: every path's latency curve.

Timings are never asserted (the machine is shared); the shape is: every path at every size of the
quick profile, a p50 and a p99 for each, a verdict from the known set, and the listing's plan read
off its index.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.bench_runs import database_of_its_own, quick_json

# The quick profile's sizes (bench/growth.py QUICK), per path.
EXPECTED = {
    "append, 1 event": [10, 100, 1_000],
    "pool claim": [100, 1_000],
    "ingestion, 10 nodes changed": [10, 100],
    "ingestion, every node changed": [10, 100],
    "run listing, first page of 50": [5_000, 20_000],
    "run listing, full page of 1,000": [5_000, 20_000],
    "run listing, page of 50 half-way down, by cursor": [5_000, 20_000],
}
VERDICTS = {"flat", "~log n", "> log n", "~linear", "superlinear"}


@pytest.fixture
def growth_database_url(pg_admin_url: str) -> Iterator[str]:
    # The bench leaves ten thousand runs behind.
    with database_of_its_own(pg_admin_url, "ledger_growth") as url:
        yield url


@pytest.mark.timeout(300)
def test_quick_growth_prints_every_path_at_every_size(growth_database_url: str) -> None:
    document = quick_json(growth_database_url, ["-m", "bench", "--growth"], timeout_s=240)
    curves = document["curves"]
    assert {curve["path"]: [p["size"] for p in curve["points"]] for curve in curves} == EXPECTED
    for curve in curves:
        assert curve["size_is"] and curve["verdict"] in VERDICTS, curve
        for p in curve["points"]:
            assert 0 < p["p50_ms"] <= p["p99_ms"], curve
    plan = "\n".join(document["listing_plan"])
    assert "ix_runs_newest_first" in plan and "Execution Time" in plan, plan
