"""The bench's append rows compare like with like: ours appends to runs new to each measurement, as
the pgbench baseline does (`baselines.append_rate`), so neither side starts a round with a run
already at its retention cap."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_runlog


def test_each_throughput_measurement_appends_to_runs_of_its_own(clean_database_url: str) -> None:
    for _ in range(2):
        assert asyncio.run(bench_runlog.throughput(clean_database_url, 2, 1, 0.05)) > 0
    with psycopg.connect(clean_database_url) as conn:
        rows = conn.execute(
            "SELECT run_id, last_seq FROM ledger.runs WHERE run_id LIKE 'py-2-1-%' ORDER BY run_id"
        ).fetchall()
    # Two measurements of two appenders each: four runs, each appended to by one measurement only.
    assert len(rows) == 4 and all(last_seq > 0 for _, last_seq in rows)
