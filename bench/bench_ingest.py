"""Status-ingestion benchmark: uploads/s for `apply_status_upload` with a 1,000-node progress map.

    .venv/bin/python bench/bench_ingest.py [--seconds 3]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (server defaults: fsync on),
migrated (bench/common.py), then applies uploads to fresh runs for `--seconds` per scenario, one
client per run:

- all 1,000 nodes change counts every upload (1,000 step.progress events + the snapshot),
- 10 of 1,000 nodes change (the common case: the snapshot is still read and written whole),
- 1,000 new log lines per upload (a full tail, no node progress),
- a late duplicate of a 1,000-node upload (absorbed: validate, lock, compare, nothing written).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

from common import bench_database, print_footer, print_table

from ledger.db import Database
from ledger.ingest.store import apply_status_upload

NODES = 1000

Builder = Callable[[int], dict[str, Any]]


def progress(changed: int, nodes: int = NODES) -> Builder:
    """Uploads of a `nodes`-node progress map whose first `changed` nodes advance every upload."""

    def build(seq: int) -> dict[str, Any]:
        progress_map = {
            f"node-{n:04d}": {
                "started_at": 1,
                "total": 10_000,
                "completed": seq if n < changed else 0,
                "message": f"{seq if n < changed else 0:,} / 10,000 rows processed",
                "updated_at": seq,
            }
            for n in range(nodes)
        }
        return {"status": "running", "upload_seq": seq, "live_node_progress": progress_map}

    return build


def logs(seq: int) -> dict[str, Any]:
    lines = [f"[2026-01-01T00:00:00Z] upload {seq} line {i}" for i in range(1000)]
    return {"status": "running", "upload_seq": seq, "live_logs": lines, "live_log_total_count": seq * 1000}


def duplicate(seq: int) -> dict[str, Any]:
    # After the warm-up (upload 1) every upload is the same late retry of upload 1.
    return progress(10)(1)


async def scenario(
    db: Database, name: str, build: Builder, clients: int, seconds: float
) -> tuple[float, float]:
    """(uploads/s, events/s) over `seconds`, `clients` runs uploading at once, after a warm-up upload."""
    run_ids = [f"{name}-{clients}-{index}-{time.time_ns()}" for index in range(clients)]
    # The first upload of a run starts every node (2,000 events): steady state is what we measure.
    await asyncio.gather(*(apply_status_upload(db, run_id, build(1)) for run_id in run_ids))
    deadline = time.perf_counter() + seconds
    counts = [0] * clients
    events = [0] * clients

    async def client(index: int) -> None:
        seq = 1
        while time.perf_counter() < deadline:
            seq += 1
            answer = await apply_status_upload(db, run_ids[index], build(seq), max_events_per_run=10_000)
            counts[index] += 1
            events[index] += sum(answer["events_appended"].values())

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - started
    return sum(counts) / elapsed, sum(events) / elapsed


async def measure(url: str, seconds: float) -> list[tuple[str, str, str, str]]:
    rows = []
    async with Database(url, min_size=1, max_size=8) as db:
        for label, name, build in (
            ("1,000 nodes, all changed", "all", progress(NODES)),
            ("1,000 nodes, 10 changed", "few", progress(10)),
            ("1,000 new log lines", "logs", logs),
            ("late duplicate", "dup", duplicate),
        ):
            for clients in (1, 4):
                uploads, events = await scenario(db, name, build, clients, seconds)
                rows.append((label, str(clients), f"{uploads:,.0f}", f"{events:,.0f}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each scenario")
    args = parser.parse_args()
    with bench_database("bench-ingest-") as database:
        started = time.perf_counter()
        rows = asyncio.run(measure(database.url, args.seconds))
        print_table(("scenario", "clients", "uploads/s", "events/s"), rows)
        print_footer(started, database.where)


if __name__ == "__main__":
    main()
