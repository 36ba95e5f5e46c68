"""How cost grows: per-call latency of the hot paths against the size of what they work on.

    .venv/bin/python bench/growth.py [--quick] [--json] [--no-explain]
    .venv/bin/python -m bench --growth [--quick] [--json]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (fsync on), migrated
(bench/common.py). Each path is called through the library, on data bulk-inserted with one
`generate_series` statement per size (the fill is not timed):

- append: `RunLog.append` of one event to runs already holding n retained events (at the
  default retention limit every append also trims one),
- claim: `WarmPool.claim` from pools of n ready entries (the claimed entry is released by its run
  and put back, untimed, so the pool keeps its size),
- listing: `overview.list_runs` (what `GET /v1/runs` and `ledger runs` call) over n runs: the
  first page of 50, a full page of 1,000, and a page half-way down the list by cursor,
- ingestion: `apply_status_upload` of n-node progress maps, 10 nodes changed and every node changed.

Sizes of one path are measured interleaved (one call per size in turn), so a load spike on the
shared machine slows every size alike. Runs are the exception (one table, filled up size by
size), so the listing also counts the buffer pages each statement touches (EXPLAIN ANALYZE,
BUFFERS), which no load changes. `growth` compares a size with the one before it (x p50, and x
pages, for x n); `verdict` reads the pages where counted, else the p50: flat (at most x1.2),
~log n (at most 1.25 x the growth of log n), ~linear (at least n^0.75), superlinear (n^1.3) or
"> log n" in between; a path's verdict is its last step's. At the largest run count the
listing's first page is shown with EXPLAIN (ANALYZE, BUFFERS).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ingest
import common
import psycopg

from ledger.db import Database
from ledger.ingest.store import apply_status_upload
from ledger.pool.store import WarmPool
from ledger.runlog import overview
from ledger.runlog.store import RunLog


@dataclass(frozen=True)
class GrowthProfile:
    """The sizes each path is measured at, and how many timed calls per size."""

    name: str
    retained: tuple[int, ...]  # events already in the run
    pool_sizes: tuple[int, ...]  # ready entries in the pool
    run_counts: tuple[int, ...]  # runs in the ledger
    node_counts: tuple[int, ...]  # nodes in an upload's progress map
    samples: int  # timed calls per size (per listing variant)


FULL = GrowthProfile(
    "full",
    retained=(10, 100, 1_000, 10_000),
    pool_sizes=(100, 1_000, 10_000, 100_000),
    run_counts=(10_000, 100_000, 1_000_000),
    node_counts=(10, 100, 1_000),
    samples=200,
)
QUICK = GrowthProfile(
    "quick",
    retained=(10, 100, 1_000),
    pool_sizes=(100, 1_000),
    run_counts=(5_000, 20_000),
    node_counts=(10, 100),
    samples=15,
)


@dataclass(frozen=True)
class Point:
    """Latency of one path at one size (milliseconds)."""

    size: int
    p50_ms: float
    p99_ms: float
    # Buffer pages the statement touched (EXPLAIN ANALYZE, BUFFERS): the same on a busy machine
    # as on a quiet one. Only for the listing, which cannot interleave its sizes.
    pages: int | None = None


@dataclass(frozen=True)
class Curve:
    """One path measured at growing sizes."""

    path: str
    size_is: str
    points: list[Point]

    def verdict(self) -> str:
        """The last step's verdict: at the largest sizes a fixed per-call cost hides growth least."""
        return step_verdict(self.points[-2], self.points[-1])

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict()}


def verdict(n1: int, t1: float, n2: int, t2: float) -> str:
    """How a latency `t1` at size `n1` grew to `t2` at `n2`: flat, ~log n, > log n or ~linear."""
    grew = t2 / t1
    log_grew = math.log(n2) / math.log(n1) if n1 > 1 else math.log(n2)
    exponent = math.log(grew) / math.log(n2 / n1)
    if grew <= 1.2:
        return "flat"
    if grew <= 1.25 * max(log_grew, 1.2):
        return "~log n"
    if exponent >= 1.3:
        return "superlinear"
    if exponent >= 0.75:
        return "~linear"
    return "> log n"


def cost(p: Point) -> float:
    return float(p.pages) if p.pages is not None else p.p50_ms


def step_verdict(before: Point, after: Point) -> str:
    return verdict(before.size, cost(before), after.size, cost(after))


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def point(size: int, samples: Sequence[float], pages: int | None = None) -> Point:
    return Point(size, percentile(samples, 0.5) * 1000, percentile(samples, 0.99) * 1000, pages)


Call = Callable[[], Awaitable[Any]]


async def interleaved(
    calls: dict[int, Call], samples: int, after: Callable[[int, Any], Awaitable[None]]
) -> list[Point]:
    """Time `samples` calls per size, one size after another in turn; `after` runs untimed."""
    timings: dict[int, list[float]] = {size: [] for size in calls}
    for size, call in calls.items():  # warm-up: plans cached, pages in memory
        await after(size, await call())
    for _ in range(samples):
        for size, call in calls.items():
            began = time.perf_counter()
            result = await call()
            timings[size].append(time.perf_counter() - began)
            await after(size, result)
    return [point(size, timings[size]) for size in calls]


async def nothing(size: int, result: Any) -> None:
    return None


# -- fills: one statement per size -----------------------------------------------------------

FILL_EVENTS = """
INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, ts, payload)
SELECT %(run_id)s, g, (SELECT created_at FROM ledger.runs WHERE run_id = %(run_id)s), 'log', now(),
       jsonb_build_object('line', 'growth bench: fetched batch ' || g || ' from https://api.example.com/items')
FROM generate_series(1, %(n)s::int) AS g
"""

ADVANCE_RUN = "UPDATE ledger.runs SET last_seq = %(n)s, updated_at = now() WHERE run_id = %(run_id)s"

# Ready for 30 s to 90 s (inside the claim window, well before the entries go stale).
# Ids carry the pool's name: an instance id names one instance in every pool.
FILL_POOL = """
INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
SELECT %(pool)s, %(pool)s || '-instance-' || g, 'v1', 'ready', now(),
       now() - interval '30 seconds' - (g %% 60) * interval '1 second', now() + interval '8 minutes'
FROM generate_series(1, %(n)s::int) AS g
"""

# The run hands its instance back: a claim never hands out an instance a live run holds, so one put
# back while its mapping lives would only be skipped, and claims would read past ever more of them.
RELEASE = "DELETE FROM ledger.run_mappings WHERE instance_id = %(id)s"
PUT_BACK = """
INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
VALUES (%(pool)s, %(id)s, 'v1', 'ready', now(), now() - interval '30 seconds', now() + interval '8 minutes')
"""

# Runs shaped like the listing's real ones: a play name, three nodes of progress, a quarter of
# them finished; every two runs share a creation time, so order leans on the run_id tie-break.
FILL_RUNS = """
INSERT INTO ledger.runs (run_id, status, play_name, created_at, updated_at, live_node_progress,
                         terminal_status, terminal_total_rows, completed_at)
SELECT 'growth-' || lpad(g::text, 8, '0'),
       CASE WHEN g %% 4 = 0 THEN 'completed' ELSE 'running' END,
       'enrich-companies',
       t.created, t.created + interval '1 minute',
       jsonb_build_object(
           'node-1', jsonb_build_object('started_at', 1, 'completed', g %% 500, 'total', 500),
           'node-2', jsonb_build_object('started_at', 1, 'completed', g %% 300, 'total', 300),
           'node-3', jsonb_build_object('started_at', 1, 'completed_at', 2, 'completed', 10, 'total', 10)),
       CASE WHEN g %% 4 = 0 THEN 'completed' END,
       CASE WHEN g %% 4 = 0 THEN 810 END,
       CASE WHEN g %% 4 = 0 THEN t.created + interval '1 minute' END
FROM generate_series(%(first)s::int, %(last)s::int) AS g,
     LATERAL (SELECT now() - interval '1 hour' - (g / 2) * interval '1 millisecond' AS created) AS t
"""


async def execute(url: str, *statements: tuple[str, dict[str, Any]]) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for sql, params in statements:
            await conn.execute(sql, params)


# -- the paths -------------------------------------------------------------------------------


async def append_growth(db: Database, url: str, profile: GrowthProfile, tag: str) -> Curve:
    runlog = RunLog(db)
    calls: dict[int, Call] = {}
    for n in profile.retained:
        run_id = f"growth-append-{n}-{tag}"
        await runlog.open_run(run_id, play_name="growth")
        await execute(
            url, (FILL_EVENTS, {"run_id": run_id, "n": n}), (ADVANCE_RUN, {"run_id": run_id, "n": n})
        )
        calls[n] = lambda run_id=run_id: runlog.append(run_id, [{"type": "log", "line": "one more line"}])  # type: ignore[misc]
    await execute(url, ("VACUUM ANALYZE ledger.run_events", {}), ("VACUUM ANALYZE ledger.runs", {}))
    points = await interleaved(calls, profile.samples, nothing)
    return Curve("append, 1 event", "events retained", points)


async def claim_growth(db: Database, url: str, profile: GrowthProfile, tag: str) -> Curve:
    warm = WarmPool(db)
    pools = {n: f"growth-{n}-{tag}" for n in profile.pool_sizes}
    for n, pool in pools.items():
        await execute(url, (FILL_POOL, {"pool": pool, "n": n}))
    await execute(url, ("VACUUM ANALYZE ledger.pool_entries", {}))
    claims = iter(range(10**9))
    calls: dict[int, Call] = {
        n: lambda pool=pool: warm.claim(pool, "v1", f"growth-claim-{tag}-{next(claims)}")  # type: ignore[misc]
        for n, pool in pools.items()
    }

    async def put_back(size: int, result: Any) -> None:
        assert result["id"] is not None, f"the pool of {size} ran dry"
        put = {"pool": pools[size], "id": result["id"]}
        await execute(url, (RELEASE, put), (PUT_BACK, put))

    points = await interleaved(calls, profile.samples, put_back)
    for pool in pools.values():
        await warm.clear(pool)
    return Curve("pool claim", "ready entries in the pool", points)


async def ingest_growth(db: Database, profile: GrowthProfile, tag: str) -> list[Curve]:
    curves = []
    for label, changed in (("10 nodes changed", 10), ("every node changed", None)):
        calls: dict[int, Call] = {}
        for n in profile.node_counts:
            run_id = f"growth-ingest-{n}-{changed}-{tag}"
            build = bench_ingest.progress(n if changed is None else min(changed, n), nodes=n)
            seqs = iter(range(1, 10**9))
            calls[n] = lambda run_id=run_id, build=build, seqs=seqs: apply_status_upload(  # type: ignore[misc]
                db, run_id, build(next(seqs))
            )
        points = await interleaved(calls, profile.samples, nothing)
        curves.append(Curve(f"ingestion, {label}", "nodes in the upload", points))
    return curves


LISTING_VARIANTS = ("first page of 50", "full page of 1,000", "page of 50 half-way down, by cursor")


Listing = tuple[list[float], int]  # timings (s) and buffer pages of one variant at one size


async def listing_at(db: Database, samples: int) -> list[Listing]:
    """Per listing variant, `samples` timings of it and the pages it touches, on the runs as they are."""
    cursor = await halfway_cursor(db)
    variants = [(50, None), (1000, None), (50, cursor)]
    assert await overview.list_runs(db, 50), "no runs to list"
    timings: list[list[float]] = [[] for _ in variants]
    for limit, before in variants:
        await overview.list_runs(db, limit, before)
    for _ in range(samples):
        for i, (limit, before) in enumerate(variants):
            began = time.perf_counter()
            await overview.list_runs(db, limit, before)
            timings[i].append(time.perf_counter() - began)
    return [(timings[i], await pages(db, limit, before)) for i, (limit, before) in enumerate(variants)]


async def pages(db: Database, limit: int, before: str | None) -> int:
    """Buffer pages (hit or read) one run of the listing statement touches."""
    statement, params = overview.listing_statement(limit, before)
    async with db.connection() as conn:
        cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params)
        row = await cur.fetchone()
    assert row is not None
    top = row["QUERY PLAN"][0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


async def halfway_cursor(db: Database) -> str:
    """The cursor that pages on from the run half-way down the listing."""
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT run_id, created_at FROM ledger.runs ORDER BY created_at DESC, run_id "
            "OFFSET (SELECT count(*) / 2 FROM ledger.runs) LIMIT 1"
        )
        row = await cur.fetchone()
    assert row is not None
    return overview.cursor_of(row["created_at"], row["run_id"])


async def listing_growth(
    db: Database, url: str, profile: GrowthProfile, log: Callable[[str], None]
) -> tuple[list[Curve], list[str]]:
    measured: dict[int, list[Listing]] = {}
    filled = 0
    for n in profile.run_counts:
        began = time.perf_counter()
        await execute(url, (FILL_RUNS, {"first": filled + 1, "last": n}), ("VACUUM ANALYZE ledger.runs", {}))
        log(f"growth: {n:,} runs filled in {time.perf_counter() - began:.1f} s")
        filled = n
        measured[n] = await listing_at(db, profile.samples)
    curves = [
        Curve(
            f"run listing, {variant}",
            "runs in the ledger",
            [point(n, at[i][0], pages=at[i][1]) for n, at in measured.items()],
        )
        for i, variant in enumerate(LISTING_VARIANTS)
    ]
    async with db.connection() as conn:
        statement, params = overview.listing_statement(50, None)
        cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
        plan = [row["QUERY PLAN"] for row in await cur.fetchall()]
    return curves, plan


async def measure(
    url: str, profile: GrowthProfile, log: Callable[[str], None]
) -> tuple[list[Curve], list[str]]:
    tag = str(time.time_ns())
    curves: list[Curve] = []
    async with Database(url, min_size=1, max_size=2) as db:
        log("growth: append")
        curves.append(await append_growth(db, url, profile, tag))
        log("growth: pool claim")
        curves.append(await claim_growth(db, url, profile, tag))
        log("growth: ingestion")
        curves.extend(await ingest_growth(db, profile, tag))
        log("growth: run listing")
        listing, plan = await listing_growth(db, url, profile, log)
        curves.extend(listing)
    return curves, plan


def table_rows(curves: Sequence[Curve]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for curve in curves:
        before: Point | None = None
        for p in curve.points:
            if before is None:
                growth, step = "", ""
            else:
                growth = f"x{p.p50_ms / before.p50_ms:.2f} for x{p.size / before.size:g} n"
                if p.pages is not None and before.pages is not None:
                    growth = f"{growth}, pages x{p.pages / before.pages:.2f}"
                step = step_verdict(before, p)
            rows.append(
                (
                    curve.path if before is None else "",
                    f"{p.size:,}",
                    f"{p.p50_ms:.2f}",
                    f"{p.p99_ms:.2f}",
                    "" if p.pages is None else f"{p.pages:,}",
                    growth,
                    step,
                )
            )
            before = p
    return rows


def print_report(curves: Sequence[Curve], plan: Sequence[str]) -> None:
    common.print_table(
        ("path", "n", "p50 ms", "p99 ms", "pages", "growth", "verdict"), table_rows(curves), align="right"
    )
    print()
    width = max(len(c.path) for c in curves)
    for curve in curves:
        first, last = curve.points[0], curve.points[-1]
        sizes = f"{curve.size_is}, {first.size:,} -> {last.size:,}"
        grew = f"p50 x{last.p50_ms / first.p50_ms:.2f}"
        if first.pages is not None and last.pages is not None:
            grew = f"{grew}, pages x{last.pages / first.pages:.2f}"
        print(f"  {curve.path.ljust(width)}  {curve.verdict():<11}  {sizes}: {grew} (verdict: last step)")
    if plan:
        print("\n  the listing's first page at the largest run count, EXPLAIN (ANALYZE, BUFFERS):")
        for line in plan:
            print(f"    {line}")


def run(profile: GrowthProfile, as_json: bool) -> None:
    """Measure on a bench database and print the growth table (or JSON)."""

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with common.bench_database("bench-growth-") as database:
        started = time.perf_counter()
        curves, plan = asyncio.run(measure(database.url, profile, log))
        if as_json:
            document = {
                "profile": profile.name,
                "where": database.where,
                "seconds": round(time.perf_counter() - started, 1),
                "curves": [curve.as_json() for curve in curves],
                "listing_plan": plan,
            }
            print(json.dumps(document, indent=2))
            return
        print_report(curves, plan)
        common.print_footer(started, database.where)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller top sizes, fewer calls")
    parser.add_argument("--json", action="store_true", help="print the curves as JSON")
    args = parser.parse_args()
    run(QUICK if args.quick else FULL, args.json)


if __name__ == "__main__":
    main()
