"""Growth past 10 million events: the costs that must stay flat as the event log fills up.

    .venv/bin/python -m bench --growth --large [--quick] [--json]

Not part of CI. Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (fsync on),
migrated. It fills the ledger in SQL (`generate_series`, one statement per day of runs: minutes,
not hours) with finished runs of 100 events each, created over consecutive UTC days (1,000 runs,
100,000 events a day, each day its own partition of the event log), up to each stage: 1 M, 3 M
and 10 M events (10,000 / 30,000 / 100,000 runs). `--quick` is a smoke-sized profile (10 k,
30 k, 100 k events). At each stage it measures:

- append p50/p99: `RunLog.append` of one event to running runs of today;
- a run's event page: `RunLog.list_events` (100 events) of a random filled run;
- the run list's first page: `overview.list_runs(50)`;
- `stalled_runs`: `SELECT count(*) FROM ledger.stalled_runs`;
- the watchdog's pass: `Watchdog.run_once()` (nothing stalled: the cost of looking);
- retention of one day's runs, both ways, with the WAL each writes (`pg_current_wal_insert_lsn()`
  before and after): the oldest day by dropping its partition (then its runs' rows, events
  gone, by the per-run delete), the next day by the per-run delete alone (each run's events
  deleted row by row); both days are filled again afterwards, so the stage keeps its size;
- pages: the buffer pages (hit or read) one event page and one run list page touch, from EXPLAIN
  (ANALYZE, BUFFERS), which no load on the machine changes, and the event log's partitions;
- sizes: table + index bytes of `runs` and of the event log (all partitions), and the disk the
  stage needs: the database (`pg_database_size`) and the WAL directory beside it;
- the machine's load average (1 minute) as the stage's measuring began and ended, and its fill time.

Disk: about 220 bytes per event with its index, so ~2.1 GB at 10 M events, plus the WAL
directory (max_wal_size, 1 GB by default): plan for 4 GB free in the temporary directory. The
fill takes about 15 s per million events; the whole run, 4 to 5 minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import psycopg

from ledger.db import Database
from ledger.runlog import overview, partitions
from ledger.runlog import retention as run_retention
from ledger.runlog.store import RunLog, read_page
from ledger.runlog.watchdog import Watchdog

EVENTS_PER_RUN = 100


class _Noting:
    """A connection that notes each statement it is given before running it."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.statements: list[tuple[str, dict[str, Any]]] = []

    async def execute(self, statement: str, params: dict[str, Any]) -> psycopg.AsyncCursor[Any]:
        self.statements.append((statement, params))
        return await self.conn.execute(statement, params)


@dataclass(frozen=True)
class Profile:
    name: str
    runs_per_day: int
    stages: tuple[int, ...]  # events in the ledger
    samples: int


LARGE = Profile("large", runs_per_day=1_000, stages=(1_000_000, 3_000_000, 10_000_000), samples=200)
SMOKE = Profile("quick", runs_per_day=10, stages=(10_000, 30_000, 100_000), samples=20)

FILL_DAY_RUNS = """
INSERT INTO ledger.runs (run_id, status, play_name, created_at, updated_at, last_seq,
                         terminal_status, completed_at)
SELECT 'grow-' || lpad(g::text, 8, '0'), 'completed', 'enrich-companies', t.created,
       t.created + interval '10 minutes', %(events)s, 'completed', t.created + interval '10 minutes'
FROM generate_series(%(first)s::int, %(last)s::int) AS g,
     LATERAL (
         SELECT %(day)s::timestamptz + (g - %(first)s) * (interval '1 day' / %(per_day)s) AS created
     ) AS t
"""

# In time order, as appends write them: runs that overlap interleave their events on the pages
# (without the order, the plan chosen decides whether a run's 100 events lie on 2 pages or 100).
FILL_DAY_EVENTS = """
INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, ts, payload)
SELECT r.run_id, s, r.created_at, 'log', r.created_at + s * interval '1 second',
       jsonb_build_object('line', 'growth bench: fetched batch ' || s || ' from https://api.example.com/items')
FROM ledger.runs r CROSS JOIN generate_series(1, %(events)s) AS s
WHERE r.created_at >= %(day)s AND r.created_at < %(day)s::timestamptz + interval '1 day'
ORDER BY r.created_at + s * interval '1 second', r.run_id
"""

SIZES = """
SELECT
    (SELECT sum(pg_table_size(relid)) FROM pg_partition_tree('ledger.run_events')) AS events_table,
    (SELECT sum(pg_indexes_size(relid)) FROM pg_partition_tree('ledger.run_events')) AS events_indexes,
    pg_table_size('ledger.runs') AS runs_table,
    pg_indexes_size('ledger.runs') AS runs_indexes,
    pg_database_size(current_database()) AS database,
    (SELECT sum(size) FROM pg_ls_waldir()) AS wal
"""


PARTITIONS = "SELECT count(*) AS n FROM pg_partition_tree('ledger.run_events') WHERE isleaf"


@dataclass
class Stage:
    target: int  # the stage: events filled
    events: int  # counted, with the appends measured so far
    runs: int
    measures: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (p50 ms, p99 ms)
    retention: dict[str, dict[str, float]] = field(default_factory=dict)  # way -> seconds, WAL bytes, rows
    sizes: dict[str, int] = field(default_factory=dict)
    pages: dict[str, int] = field(default_factory=dict)  # buffer pages per statement; partitions
    fill_s: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average as measuring began, ended


def load_average() -> float:
    """The machine's 1-minute load: the measures share 2 cores with other work, this says how much."""
    return round(os.getloadavg()[0], 2)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(call: Callable[[], Awaitable[Any]], samples: int) -> tuple[float, float]:
    await call()  # warm-up
    timings = []
    for _ in range(samples):
        began = time.perf_counter()
        await call()
        timings.append(time.perf_counter() - began)
    return percentile(timings, 0.5) * 1000, percentile(timings, 0.99) * 1000


class Growth:
    def __init__(self, url: str, profile: Profile, log: Callable[[str], None]) -> None:
        self.url = url
        self.profile = profile
        self.log = log
        self.first_day: datetime | None = None
        self.days = 0

    def day(self, index: int) -> datetime:
        assert self.first_day is not None
        return self.first_day + timedelta(days=index)

    async def sql(self, statement: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            conn.row_factory = psycopg.rows.dict_row  # type: ignore[assignment]
            cur = await conn.execute(statement, params or {})
            return list(await cur.fetchall()) if cur.description else []

    async def fill_day(self, index: int) -> None:
        per_day = self.profile.runs_per_day
        first = index * per_day + 1
        day = self.day(index)
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute("SELECT ledger.ensure_run_events_partition(%s)", (day,))
            last = first + per_day - 1
            await conn.execute(
                FILL_DAY_RUNS,
                {"first": first, "last": last, "day": day, "per_day": per_day, "events": EVENTS_PER_RUN},
            )
            await conn.execute(FILL_DAY_EVENTS, {"day": day, "events": EVENTS_PER_RUN})

    async def fill_to(self, events: int) -> float:
        began = time.perf_counter()
        target_days = events // (self.profile.runs_per_day * EVENTS_PER_RUN)
        while self.days < target_days:
            await self.fill_day(self.days)
            self.days += 1
            if self.days % 10 == 0:
                self.log(f"growth --large: {self.days} day(s) filled")
        await self.sql("VACUUM ANALYZE ledger.runs")
        await self.sql("ANALYZE ledger.run_events")
        return time.perf_counter() - began

    async def wal(self) -> int:
        rows = await self.sql("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint AS at")
        return int(rows[0]["at"])

    async def retention(self, db: Database) -> dict[str, dict[str, float]]:
        """Day 0 goes by partition drop, day 1 by the per-run delete; both are filled again."""
        results: dict[str, dict[str, float]] = {}
        batch = run_retention.DEFAULT_RETENTION_BATCH_SIZE
        for way, index in (("partition drop", 0), ("per-run delete", 1)):
            day = self.day(index)
            boundary = day + timedelta(days=1)
            wal_before, began = await self.wal(), time.perf_counter()
            if way == "partition drop":
                async with db.connection() as conn:
                    found = [p for p in await partitions.list_partitions(conn) if p.from_at == day]
                await partitions.drop_partition(db, found[0])
            dropped_s = time.perf_counter() - began
            deleted = 0
            while True:
                async with db.transaction() as conn:
                    n = await run_retention.delete_expired_runs(
                        conn, datetime.now(day.tzinfo), boundary, limit=batch
                    )
                deleted += n
                if n < batch:
                    break
            results[way] = {
                "seconds": time.perf_counter() - began,
                "drop_seconds": dropped_s,
                "wal_bytes": await self.wal() - wal_before,
                "runs": deleted,
            }
        for index in (0, 1):
            await self.fill_day(index)
        await self.sql("VACUUM ANALYZE ledger.runs")
        return results

    async def pages(self, db: Database, statement: str, params: dict[str, Any]) -> int:
        """Buffer pages (hit or read) one execution of `statement` touches."""
        async with db.connection() as conn:
            cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params)
            row = await cur.fetchone()
        assert row is not None
        top = row["QUERY PLAN"][0]["Plan"]
        return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])

    async def page_read_pages(self, db: Database, run_id: str, created_at: datetime) -> int:
        """Buffer pages a `read_page` of 100 events touches, as a `RunLog` that knows the run's
        `created_at` reads it: each statement the library sends, noted and then explained."""
        async with db.connection() as conn:
            noted = _Noting(conn)
            await read_page(noted, run_id, -1, 100, created_at=created_at)
        return sum([await self.pages(db, statement, params) for statement, params in noted.statements])

    async def measure(self, db: Database, stage: Stage) -> None:
        loaded = load_average()
        runlog = RunLog(db)
        samples = self.profile.samples
        hot = [f"hot-{stage.events}-{i}" for i in range(20)]
        for run_id in hot:
            await runlog.open_run(run_id, play_name="hot")
        turn = iter(range(10**9))
        stage.measures["append, 1 event"] = await timed(
            lambda: runlog.append(hot[next(turn) % len(hot)], [{"type": "log", "line": "one more"}]), samples
        )
        filled_runs = self.days * self.profile.runs_per_day
        rng = random.Random(stage.events)

        def some_run() -> str:
            return f"grow-{rng.randint(1, filled_runs):08d}"

        stage.measures["a run's event page (100)"] = await timed(
            lambda: runlog.list_events(some_run(), -1, 0, 100), samples
        )
        stage.measures["run list, first page (50)"] = await timed(lambda: overview.list_runs(db, 50), samples)
        # The median of a few runs: the pages a run's events span depend on the runs beside it.
        event_pages = []
        for _ in range(5):
            run_id = some_run()
            created = await self.sql("SELECT created_at FROM ledger.runs WHERE run_id = %(r)s", {"r": run_id})
            event_pages.append(await self.page_read_pages(db, run_id, created[0]["created_at"]))
        stage.pages["event page"] = sorted(event_pages)[2]
        stage.pages["run list"] = await self.pages(db, *overview.listing_statement(50, None))
        stage.pages["partitions"] = int((await self.sql(PARTITIONS))[0]["n"])

        async def stalled() -> None:
            async with db.connection() as conn:
                await conn.execute("SELECT count(*) FROM ledger.stalled_runs")

        stage.measures["stalled_runs"] = await timed(stalled, samples)
        dog = Watchdog(db, runlog, retention=None)
        stage.measures["watchdog pass"] = await timed(dog.run_once, max(5, samples // 10))
        for run_id in hot:
            await runlog.set_terminal(run_id, "completed")
        self.log(f"growth --large: {stage.target:,}: per-call measures done, retention next")
        stage.retention = await self.retention(db)
        rows = await self.sql(SIZES)
        stage.sizes = {k: int(v or 0) for k, v in rows[0].items()}
        stage.load = (loaded, load_average())

    async def run(self) -> list[Stage]:
        rows = await self.sql("SELECT date_trunc('day', now() - interval '400 days', 'UTC') AS day")
        self.first_day = rows[0]["day"]
        stages = []
        async with Database(self.url, min_size=1, max_size=4) as db:
            for events in self.profile.stages:
                stage = Stage(events, events, 0)
                stage.fill_s = await self.fill_to(events)
                counted = await self.sql(
                    "SELECT (SELECT count(*) FROM ledger.runs) AS runs,"
                    " (SELECT count(*) FROM ledger.run_events) AS events"
                )
                stage.runs, stage.events = int(counted[0]["runs"]), int(counted[0]["events"])
                self.log(
                    f"growth --large: {stage.events:,} events in {stage.runs:,} runs"
                    f" (filled in {stage.fill_s:.0f} s)"
                )
                await self.measure(db, stage)
                stages.append(stage)
        return stages


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def kib(n: float) -> str:
    return f"{n / 2**10:,.0f} KiB"


def print_report(stages: Sequence[Stage]) -> None:
    header = ("measure", *[f"{s.target / 1e6:g} M events" for s in stages])
    rows: list[tuple[str, ...]] = []
    for name in stages[0].measures:
        cells = [f"{s.measures[name][0]:.2f} / {s.measures[name][1]:.2f}" for s in stages]
        rows.append((f"{name}, p50 / p99 ms", *cells))
    for way in stages[0].retention:
        cells = [f"{s.retention[way]['seconds']:.2f} s, {kib(s.retention[way]['wal_bytes'])}" for s in stages]
        rows.append((f"retention of a day's runs, {way}: time, WAL", *cells))
    rows.append(
        (
            "buffer pages: event page / run list page",
            *[f"{s.pages['event page']} / {s.pages['run list']}" for s in stages],
        )
    )
    rows.append(("runs in the ledger", *[f"{s.runs:,}" for s in stages]))
    rows.append(("event log partitions", *[f"{s.pages['partitions']}" for s in stages]))
    for key, label in (
        ("events_table", "event log, table MiB"),
        ("events_indexes", "event log, indexes MiB"),
        ("runs_table", "runs, table MiB"),
        ("runs_indexes", "runs, indexes MiB"),
    ):
        rows.append((label, *[mib(s.sizes[key]) for s in stages]))
    rows.append(
        (
            "on disk: database + WAL MiB",
            *[f"{mib(s.sizes['database'])} + {mib(s.sizes['wal'])}" for s in stages],
        )
    )
    rows.append(("fill to the stage, s", *[f"{s.fill_s:,.0f}" for s in stages]))
    rows.append(
        (
            "load average (1 min), measures began / ended",
            *[f"{s.load[0]:.2f} / {s.load[1]:.2f}" for s in stages],
        )
    )
    common.print_table(header, rows, align="right")


def run(profile: Profile, as_json: bool) -> None:
    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # A terminated run would otherwise leave its embedded server running and gigabytes in /tmp:
    # exiting through SystemExit stops and removes it on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    log(f"growth --large: load average {os.getloadavg()[0]:.2f} at the start")
    with common.bench_database("bench-growth-large-") as database:
        started = time.perf_counter()
        stages = asyncio.run(Growth(database.url, profile, log).run())
        if as_json:
            print(
                json.dumps(
                    {
                        "profile": profile.name,
                        "where": database.where,
                        "seconds": round(time.perf_counter() - started, 1),
                        "stages": [asdict(s) for s in stages],
                    },
                    indent=2,
                )
            )
            return
        print_report(stages)
        common.print_footer(started, f"{database.where}; load average {os.getloadavg()[0]:.2f} at the end")
