"""`python -m bench --growth --large --quick --json` on a database of its own: every stage measured.

The full profile (10 M events) is not for CI; the quick one fills 100,000 events. Timings are
never asserted (the machine is shared); the shape is: the three stages filled to their size,
each measure with a p50 and a p99, retention of a day both ways with the runs it deleted and the
WAL it wrote (not compared: a checkpoint in between changes either by whole pages).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.bench_runs import database_of_its_own, quick_json

MEASURES = {
    "append, 1 event",
    "a run's event page (100)",
    "run list, first page (50)",
    "stalled_runs",
    "watchdog pass",
}


@pytest.fixture
def large_database_url(pg_admin_url: str) -> Iterator[str]:
    with database_of_its_own(pg_admin_url, "ledger_growth_large") as url:
        yield url


@pytest.mark.timeout(300)
def test_quick_large_growth_measures_every_stage(large_database_url: str) -> None:
    document = quick_json(large_database_url, ["-m", "bench", "--growth", "--large"], timeout_s=240)
    stages = document["stages"]
    assert [s["target"] for s in stages] == [10_000, 30_000, 100_000]
    for stage in stages:
        assert stage["events"] >= stage["target"]
        assert set(stage["measures"]) == MEASURES
        for p50, p99 in stage["measures"].values():
            assert 0 < p50 <= p99, stage
        # A day is 10 runs in the quick profile, both ways.
        assert {way: r["runs"] for way, r in stage["retention"].items()} == {
            "partition drop": 10,
            "per-run delete": 10,
        }
        assert all(r["wal_bytes"] > 0 for r in stage["retention"].values()), stage["retention"]
        assert stage["sizes"]["events_table"] > 0
        assert stage["sizes"]["database"] > stage["sizes"]["events_table"]
        assert stage["pages"]["event page"] > 0 and stage["pages"]["run list"] > 0
        # One partition per day filled (a day is 1,000 events in the quick profile), and today's.
        assert stage["pages"]["partitions"] > stage["target"] // 1_000, stage["pages"]
