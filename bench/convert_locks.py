"""What converting a filled event log to partitions holds, and for how long, beside live appends.

    .venv/bin/python bench/convert_locks.py [--events 3000000] [--batch 10000]

Not part of CI. On a throwaway embedded Postgres (or the server of LEDGER_DATABASE_URL, in a
database of its own that it drops after), it migrates to 0008, fills the event log with
`--events` events in SQL (100 per run, a run in 100 still running), then, while one client
appends to a running run in a loop (the append function, one event per call, as a service still
running the previous release would), runs the upgrade to head and `ledger db convert`'s copy. It
reports how long each step took and what it holds, and the appends' latency during each: the
longest append is how long a live service waited.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import psycopg

from ledger import migrate
from ledger.runlog import conversion
from ledger.testing import create_empty_database, drop_database, with_database

FILL_RUNS = """
INSERT INTO ledger.runs (run_id, status, created_at, updated_at, last_seq, terminal_status, completed_at)
SELECT 'conv-' || lpad(g::text, 8, '0'),
       CASE WHEN mod(g, 100) = 0 THEN 'running' ELSE 'completed' END,
       now() - interval '90 days' + g * interval '1 minute', now(), 100,
       CASE WHEN mod(g, 100) = 0 THEN NULL ELSE 'completed' END,
       CASE WHEN mod(g, 100) = 0 THEN NULL ELSE now() END
FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""

FILL_EVENTS = """
INSERT INTO ledger.run_events (run_id, seq, type, payload)
SELECT 'conv-' || lpad(g::text, 8, '0'), s, 'log',
       jsonb_build_object('line', 'conversion bench: fetched batch ' || s || ' from https://api.example.com/items')
FROM generate_series(%(first)s::int, %(last)s::int) AS g CROSS JOIN generate_series(1, 100) AS s
"""

APPEND = """
SELECT * FROM ledger.append_events_v3('conv-00000100', '[["log", {"line": "live"}]]'::jsonb, NULL, 0, NULL,
                                      'ledger_bench', false, NULL)
"""


class Appender(threading.Thread):
    """Appends one event at a time, recording (start, latency) of each."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self.error_texts: set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                began = time.perf_counter()
                try:
                    conn.execute(APPEND).fetchall()
                except psycopg.Error as exc:
                    self.errors += 1
                    self.error_texts.add(f"{type(exc).__name__}: {exc}".splitlines()[0])
                self.samples.append((began, time.perf_counter() - began))
                time.sleep(0.005)

    def during(self, start: float, end: float) -> tuple[int, float, float]:
        """Appends started within [start, end): how many, p50 and max ms."""
        got = sorted(latency for began, latency in self.samples if start <= began < end)
        if not got:
            return 0, 0.0, 0.0
        return len(got), got[len(got) // 2] * 1000, got[-1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--batch", type=int, default=conversion.DEFAULT_BATCH)
    args = parser.parse_args()
    runs = max(100, args.events // 100)
    with common.bench_database("bench-convert-") as database:
        admin = with_database(database.url, "postgres")
        url = create_empty_database(admin, "ledger_convert_bench")
        try:
            migrate.upgrade(url, "0008")
            began = time.perf_counter()
            with psycopg.connect(url, autocommit=True) as conn:
                for first in range(1, runs + 1, 1000):
                    last = min(runs, first + 999)
                    conn.execute(FILL_RUNS, {"first": first, "last": last})
                    conn.execute(FILL_EVENTS, {"first": first, "last": last})
                conn.execute("VACUUM ANALYZE")
            print(f"filled {runs * 100:,} events in {runs:,} runs in {time.perf_counter() - began:.0f} s")
            appender = Appender(url)
            appender.start()
            time.sleep(1.0)
            t0 = time.perf_counter()
            migrate.upgrade(url)
            t1 = time.perf_counter()
            progress = conversion.convert(url, batch=args.batch)
            t2 = time.perf_counter()
            time.sleep(0.5)
            appender.stop.set()
            appender.join()
            rows = [
                (
                    "upgrade to head (rename aside, new table, functions, triggers)",
                    f"{(t1 - t0) * 1000:.0f} ms",
                    "ACCESS EXCLUSIVE on the old event log and run_overview;"
                    " SHARE ROW EXCLUSIVE on runs (triggers)",
                    *_appends(appender, t0, t1),
                ),
                (
                    f"convert: copy ({progress.batches} batches of {args.batch:,})",
                    f"{(t2 - t1 - progress.drop_s) * 1000:.0f} ms, longest batch"
                    f" {progress.longest_batch_s * 1000:.0f} ms",
                    "per batch: FOR SHARE on its runs' rows, ROW EXCLUSIVE on partitions",
                    *_appends(appender, t1, t2),
                ),
                (
                    f"convert: drop the old table's foreign key ({progress.drop_attempts} attempt(s))",
                    f"{progress.drop_s * 1000:.0f} ms",
                    "ACCESS EXCLUSIVE on runs (the key's triggers), lock_timeout 200 ms; then the table",
                    "",
                    "",
                ),
            ]
            common.print_table(("step", "took", "holds", "appends during", "append p50 / max"), rows)
            print(f"\n  appends: {len(appender.samples)} in all, {appender.errors} failed")
            for text in sorted(appender.error_texts):
                print(f"  failed: {text}")
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                drop_database(conn, "ledger_convert_bench")


def _appends(appender: Appender, start: float, end: float) -> tuple[str, str]:
    n, p50, worst = appender.during(start, end)
    return str(n), f"{p50:.1f} / {worst:.1f} ms"


if __name__ == "__main__":
    main()
