"""Table sizes per 1,000 runs, extrapolated per million, and what retention takes to delete them.

    .venv/bin/python bench/bench_sizes.py [--runs 1000]

Uses LEDGER_DATABASE_URL when set (on an empty ledger: the sizes are the tables' whole sizes),
else a throwaway embedded Postgres, migrated (bench/common.py). It writes `--runs` finished runs
shaped like a realistic one:

- 200 events: per node (20) `step.started`, four `step.progress` and `step.completed`; 77 `log`
  lines of ~80 characters; two `status` changes; the terminal event (appended through `RunLog`,
  in four batches, as a reporter flushes them),
- 50 sheet rows and 20 node observations (small JSON inputs and outputs), one run mapping.

Then `VACUUM ANALYZE`, and per table: rows, heap (with TOAST) and index bytes. Last, every run is
made 31 days old and deleted by retention (`Watchdog.sweep_runs`, batches of 100) while timed.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import timedelta
from typing import Any

import psycopg
from common import bench_database, print_footer, print_table

from ledger.db import Database
from ledger.runlog.retention import DEFAULT_RETENTION_BATCH_SIZE
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog

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


async def write_runs(url: str, runs: int) -> None:
    async with Database(url, min_size=1, max_size=WRITERS) as db:
        runlog = RunLog(db)
        queue = iter(range(runs))

        async def writer() -> None:
            for i in queue:
                await write_run(db, runlog, f"size-{i:07d}")

        await asyncio.gather(*(writer() for _ in range(WRITERS)))


def measure(url: str) -> dict[str, tuple[int, int, int]]:
    """Per table: rows, heap + TOAST bytes, index bytes."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        sizes = {}
        for table in TABLES:
            rel = f"ledger.{table}"
            row = conn.execute(
                f"SELECT (SELECT count(*) FROM {rel}),"
                " pg_table_size(%s::regclass), pg_indexes_size(%s::regclass)",
                (rel, rel),
            ).fetchone()
            assert row is not None
            sizes[table] = (int(row[0]), int(row[1]), int(row[2]))
        return sizes


async def delete_all(url: str) -> tuple[int, float]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE ledger.runs SET completed_at = completed_at - interval '31 days'"
            " WHERE run_id LIKE 'size-%'"
        )
    async with Database(url, min_size=1, max_size=2) as db:
        dog = Watchdog(db, retention=timedelta(days=30), retention_pass_cap=None)
        started = time.perf_counter()
        deleted = await dog.sweep_runs()
        return deleted, time.perf_counter() - started


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
        deleted, seconds = asyncio.run(delete_all(bench.url))
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
    batches = -(-deleted // DEFAULT_RETENTION_BATCH_SIZE)
    per_batch_ms = 1000 * seconds / max(batches, 1)
    print(
        f"\nretention deleted {deleted} runs in {seconds:.2f} s "
        f"({batches} batches of {DEFAULT_RETENTION_BATCH_SIZE}: {per_batch_ms:.0f} ms each)"
    )
    print_footer(started, bench.where)


if __name__ == "__main__":
    main()
