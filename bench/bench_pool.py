"""Warm-pool claim benchmark: claims/s beside the raw SKIP LOCKED claim, and latency vs pool size.

    .venv/bin/python bench/bench_pool.py [--entries 2000] [--rounds 2] [--sizes 100,1000,10000,100000]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (server defaults: fsync on),
migrated (bench/common.py). Two tables:

- Throughput: per number of claimers, a fresh pool of `--entries` ready entries drained by N
  claimers (each on its own connection, each claim for a new run), beside pgbench running the
  one-statement `SKIP LOCKED` claim CTE (`baselines.claim_rate`: prepared, `--seconds` on an
  analyzed pool that outlasts it) on the same server right after.
  Every claim of ours is the full operation: the run lock, the idempotent answer or the
  `SKIP LOCKED` pick, delete and mapping upsert, the counts, and now and then the GC. Best of
  `--rounds` for both.
- Latency vs pool size: a pool of each size (ready entries, vacuumed and analyzed, as autovacuum
  leaves a steady pool), one claimer making claims one after another, beside the raw claim CTE
  run the same way (one statement per round trip, psycopg) on the same pool. Both sides commit
  with `synchronous_commit = off` here: the wait for fsync is the same for every size and would
  hide what the statement itself costs as the pool grows.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import baselines
import psycopg
from common import bench_database, print_footer, print_table
from psycopg.conninfo import make_conninfo

from ledger.db import Database
from ledger.embedded import client_bin_dir
from ledger.pool.store import WarmPool

CLAIMERS = (1, 8)
SIZES = (100, 1_000, 10_000, 100_000)
Row = tuple[str, ...]

# Ids carry the pool's name: an instance id names one instance in every pool, and a claim skips
# one that a run of an earlier scenario still holds.
FILL_SQL = """
INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
SELECT %(pool)s, %(pool)s || '-i' || n, 'v1', 'ready', now(), now() - n * interval '1 millisecond',
       now() + interval '5 minutes'
FROM generate_series(1, %(entries)s) AS n
"""


async def scenario(url: str, claimers: int, entries: int, tag: str) -> tuple[float, list[float]]:
    """(claims/s, per-claim latencies in ms) for `claimers` draining a pool of `entries`."""
    async with Database(url, min_size=claimers + 1, max_size=claimers + 1) as db:
        pool = WarmPool(db)
        name = f"bench-{tag}"
        await pool.clear(name)
        for start in range(0, entries, 500):
            ids = [f"{tag}-i{n}" for n in range(start, min(start + 500, entries))]
            await pool.add(name, "v1", ids, ready=True)
        latencies: list[float] = []
        handed: list[str] = []

        async def claimer(k: int) -> None:
            n = 0
            while True:
                began = time.perf_counter()
                result = await pool.claim(name, "v1", f"{tag}-{k}-{n}")
                if result["id"] is None:
                    return
                latencies.append((time.perf_counter() - began) * 1000)
                handed.append(result["id"])
                n += 1

        started = time.perf_counter()
        await asyncio.gather(*(claimer(k) for k in range(claimers)))
        elapsed = time.perf_counter() - started
        assert len(handed) == len(set(handed)) == entries, "an entry was lost or handed out twice"
        return entries / elapsed, latencies


async def throughput(url: str, entries: int, rounds: int, seconds: float) -> list[Row]:
    rows: list[Row] = []
    for claimers in CLAIMERS:
        best: tuple[float, list[float]] | None = None
        raw = 0.0
        for r in range(rounds):
            outcome = await scenario(url, claimers, entries, f"c{claimers}-r{r}-{time.time_ns()}")
            if best is None or outcome[0] > best[0]:
                best = outcome
            rate = await asyncio.to_thread(baselines.claim_rate, client_bin_dir(), url, claimers, seconds)
            raw = max(raw, rate)
        assert best is not None
        rate, latencies = best
        cuts = statistics.quantiles(latencies, n=100)
        rows.append(
            (
                str(claimers),
                f"{entries:,}",
                f"{rate:,.0f}",
                f"{cuts[49]:.2f}",
                f"{cuts[98]:.2f}",
                f"{raw:,.0f}",
                f"{rate / raw:.2f}",
            )
        )
    return rows


def _p(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1]


async def by_size(database_url: str, size: int, claims: int) -> Row:
    """Claim latencies (ours and the raw CTE's) on a pool of `size` ready entries."""
    url = make_conninfo(database_url, options="-c synchronous_commit=off")
    name = f"bench-size-{size}-{time.time_ns()}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(FILL_SQL, {"pool": name, "entries": size})
        await conn.execute("VACUUM ANALYZE ledger.pool_entries")
        await conn.execute("VACUUM ANALYZE ledger.run_mappings")
    ours: list[float] = []
    async with Database(url, min_size=1, max_size=1) as db:
        pool = WarmPool(db)
        for n in range(claims):
            began = time.perf_counter()
            result = await pool.claim(name, "v1", f"{name}-{n}")
            ours.append((time.perf_counter() - began) * 1000)
            assert result["id"] is not None and result["available"] == size - n - 1
    raw: list[float] = []
    claim_sql = baselines.CLAIM_SKIP_LOCKED.replace("@POOL@", name)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(claims):
            began = time.perf_counter()
            await (await conn.execute(claim_sql)).fetchone()
            raw.append((time.perf_counter() - began) * 1000)
        await conn.execute("DELETE FROM ledger.pool_entries WHERE pool = %s", (name,))
    return (
        f"{size:,}",
        f"{_p(ours, 50):.2f}",
        f"{_p(ours, 99):.2f}",
        f"{_p(raw, 50):.2f}",
        f"{_p(raw, 50) / _p(ours, 50):.2f}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=2000, help="ready entries per throughput scenario")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per raw claim run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per scenario (best is shown)")
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="pool sizes for the latency table ('' skips it)"
    )
    parser.add_argument("--claims", type=int, default=200, help="claims timed per pool size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with bench_database("bench-pool-") as database:
        started = time.perf_counter()
        rows = asyncio.run(throughput(database.url, args.entries, args.rounds, args.seconds))
        print_table(
            ("claimers", "entries", "claims/s", "p50 ms", "p99 ms", "raw claims/s", "ratio"),
            rows,
            align="right",
        )
        if sizes:
            print()
            size_rows = [
                asyncio.run(by_size(database.url, size, min(args.claims, size // 2))) for size in sizes
            ]
            print_table(
                ("pool size", "claim p50 ms", "claim p99 ms", "raw claim p50 ms", "raw / ours"),
                size_rows,
                align="right",
            )
        print("\n  raw: the one-statement SKIP LOCKED claim CTE (pgbench for claims/s, psycopg per size)")
        print_footer(started, database.where)


if __name__ == "__main__":
    main()
