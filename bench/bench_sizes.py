"""Table sizes per 1,000 runs, extrapolated per million, and what retention takes to delete them.

    .venv/bin/python bench/bench_sizes.py [--runs 1000]

Uses LEDGER_DATABASE_URL when set (on an empty ledger: the sizes are the tables' whole sizes),
else a throwaway embedded Postgres, migrated (bench/common.py). It writes `--runs` finished runs
shaped like a realistic one:

- 200 events: per node (20) `step.started`, four `step.progress` and `step.completed`; 77 `log`
  lines of ~80 characters; two `status` changes; the terminal event (appended through `RunLog`,
  in four batches, as a reporter flushes them),
- 50 sheet rows and 20 node observations (small JSON inputs and outputs), one run mapping.

Then `VACUUM ANALYZE`, and per table: rows, heap (with TOAST) and index bytes (the event log's
summed over its partitions). The runs are made on two days 45 and 43 days ago (half each: each
day is its own partition of the event log). Last, retention deletes them, timed, with the WAL it
writes (`pg_current_wal_insert_lsn()` before and after), both ways: the first day by dropping its
partition, then its runs' rows (sheet rows, observations and mappings cascading) one by one; the
second day by the per-run delete alone, every event deleted row by row.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from common import bench_database, print_footer, print_table

from ledger.clock import ManualClock
from ledger.db import Database
from ledger.runlog import partitions
from ledger.runlog.retention import DEFAULT_RETENTION_BATCH_SIZE, delete_expired_runs
from ledger.runlog.store import RunLog

NODES = 20
SHEET_ROWS = 50
WRITERS = 4
TABLES = ("runs", "run_events", "sheet_rows", "node_observations", "run_mappings")


def run_events(run_id: str) -> list[dict[str, Any]]:
    """199 events of one run (the terminal event is the 200th), in the order a run emits them."""
    events: list[dict[str, Any]] = [{"type": "status", "status": "running"}]
    logs = iter(range(77))
    for n in range(NODES):
        node = {"node_id": f"node-{n:02d}", "step": f"enrich_{n:02d}", "attempt": 0}
        events.append({"type": "step.started", **node, "rows_total": 500})
        for done in (100, 200, 300, 400):
            events.append({"type": "step.progress", **node, "rows_done": done, "rows_total": 500})
        events.append({"type": "step.completed", **node, "rows_done": 500, "duration_ms": 4210})
        for _ in range(4 if n < 17 else 3):
            i = next(logs, None)
            if i is not None:
                line = f"{run_id} node-{n:02d}: fetched batch {i} of 77 from https://api.example.com/items"
                events.append({"type": "log", "line": line})
    events.append({"type": "status", "status": "finalizing"})
    return events


async def write_run(db: Database, runlog: RunLog, run_id: str) -> None:
    await runlog.open_run(run_id, play_name="enrich-companies")
    events = run_events(run_id)
    for start in range(0, len(events), 50):
        await runlog.append(run_id, events[start : start + 50])
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO ledger.sheet_rows (run_id, table_namespace, row_key, status)"
            " SELECT %s, 'companies', 'row-' || lpad(i::text, 6, '0'), 'completed'"
            " FROM generate_series(1, %s) AS i",
            (run_id, SHEET_ROWS),
        )
        await conn.execute(
            "INSERT INTO ledger.node_observations (run_id, node_id, attempt, invocation_seq,"
            " invocation_id, status, inputs, outputs, started_at, settled_at)"
            " SELECT %s, 'node-' || lpad(i::text, 2, '0'), 0, 0, gen_random_uuid()::text, 'completed',"
            " jsonb_build_object('table', 'companies', 'rows', 500, 'model', 'gpt-x', 'limit', 50),"
            " jsonb_build_object('rows_done', 500, 'errors', 0, 'tokens', 182340),"
            " now() - interval '5 minutes', now()"
            " FROM generate_series(0, %s - 1) AS i",
            (run_id, NODES),
        )
        await conn.execute(
            "INSERT INTO ledger.run_mappings"
            " (run_id, pool, instance_id, state, version, claimed_at, started_at, created_at, expires_at)"
            " VALUES (%s, 'default', gen_random_uuid()::text, 'started', 'v2026.12.01', now(), now(),"
            " now(), now() + interval '1 day')",
            (run_id,),
        )
    await runlog.set_terminal(
        run_id, "completed", total_rows=SHEET_ROWS, duration_ms=312_000, result={"rows": SHEET_ROWS}
    )


def days() -> tuple[datetime, datetime]:
    """The two days the runs are made on: long past any retention."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=45), today - timedelta(days=43)


async def write_runs(url: str, runs: int) -> None:
    async with Database(url, min_size=1, max_size=WRITERS) as db:
        runlogs = [RunLog(db, clock=ManualClock(day + timedelta(hours=12))) for day in days()]
        queue = iter(range(runs))

        async def writer() -> None:
            for i in queue:
                await write_run(db, runlogs[i % 2], f"size-{i:07d}")

        await asyncio.gather(*(writer() for _ in range(WRITERS)))


def measure(url: str) -> dict[str, tuple[int, int, int]]:
    """Per table: rows, heap + TOAST bytes, index bytes."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        sizes = {}
        for table in TABLES:
            rel = f"ledger.{table}"
            # A partitioned table's bytes are its partitions'.
            row = conn.execute(
                f"SELECT (SELECT count(*) FROM {rel}),"
                " COALESCE((SELECT sum(pg_table_size(relid)) FROM pg_partition_tree(%(rel)s::regclass)),"
                "   pg_table_size(%(rel)s::regclass)),"
                " COALESCE((SELECT sum(pg_indexes_size(relid)) FROM pg_partition_tree(%(rel)s::regclass)),"
                "   pg_indexes_size(%(rel)s::regclass))",
                {"rel": rel},
            ).fetchone()
            assert row is not None
            sizes[table] = (int(row[0]), int(row[1]), int(row[2]))
        return sizes


def wal(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").fetchone()
    assert row is not None
    return int(row[0])


async def delete_all(url: str) -> dict[str, tuple[int, float, int]]:
    """Per way (partition drop, per-run delete): runs deleted, seconds, WAL bytes."""
    results = {}
    async with Database(url, min_size=1, max_size=2) as db:
        for way, day in zip(("partition drop", "per-run delete"), days(), strict=True):
            wal_before, started = wal(url), time.perf_counter()
            if way == "partition drop":
                async with db.connection() as conn:
                    found = [p for p in await partitions.list_partitions(conn) if p.from_at == day]
                await partitions.drop_partition(db, found[0])
            deleted = 0
            while True:
                async with db.transaction() as conn:
                    n = await delete_expired_runs(
                        conn, datetime.now(UTC), day + timedelta(days=1), limit=DEFAULT_RETENTION_BATCH_SIZE
                    )
                deleted += n
                if n < DEFAULT_RETENTION_BATCH_SIZE:
                    break
            results[way] = (deleted, time.perf_counter() - started, wal(url) - wal_before)
    return results


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    started = time.perf_counter()
    with bench_database("ledger-bench-sizes-") as bench:
        asyncio.run(write_runs(bench.url, args.runs))
        sizes = measure(bench.url)
        deletes = asyncio.run(delete_all(bench.url))
    scale = 1000 / args.runs
    rows = []
    total = [0, 0]
    for table, (count, heap, index) in sizes.items():
        total[0] += heap
        total[1] += index
        per_k = (heap + index) * scale
        rows.append(
            [
                table,
                f"{count * scale:,.0f}",
                mib(heap * scale),
                mib(index * scale),
                mib(per_k),
                gib(per_k * 1000),
            ]
        )
    all_k = (total[0] + total[1]) * scale
    rows.append(["all", "", mib(total[0] * scale), mib(total[1] * scale), mib(all_k), gib(all_k * 1000)])
    print(f"{args.runs} runs of 200 events, {NODES} nodes, {SHEET_ROWS} sheet rows; per 1,000 runs:\n")
    print_table(["table", "rows", "heap+toast", "indexes", "total", "per million runs"], rows, align="right")
    print()
    for way, (deleted, seconds, wal_bytes) in deletes.items():
        batches = -(-deleted // DEFAULT_RETENTION_BATCH_SIZE)
        per_run = wal_bytes / max(deleted, 1) / 1024
        print(
            f"retention, {way}: {deleted} runs in {seconds:.2f} s ({batches} batches of"
            f" {DEFAULT_RETENTION_BATCH_SIZE}), WAL {mib(wal_bytes)} ({per_run:.1f} KiB per run)"
        )
    print_footer(started, bench.where)


if __name__ == "__main__":
    main()
