"""Warm-pool claim benchmark: claims/s with 1, 4 and 16 concurrent claimers.

    .venv/bin/python bench/bench_pool.py [--entries 1000] [--rounds 2]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (server defaults: fsync on),
migrated (bench/common.py), then per scenario: fills a fresh pool with `--entries`
ready entries and lets N claimers (each on its own connection, each claim for a new run) claim until
the pool is empty. Every claim is the full operation: GC, the run lock, `SKIP LOCKED` pick, delete,
mapping upsert and the counts. Reported: claims/s and per-claim latency percentiles, best of
`--rounds`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from common import bench_database, print_footer, print_table

from ledger.db import Database
from ledger.pool.store import WarmPool

CLAIMERS = (1, 4, 16)
Row = tuple[str, str, str, str, str]


async def scenario(url: str, claimers: int, entries: int, tag: str) -> tuple[float, list[float]]:
    """(claims/s, per-claim latencies in ms) for `claimers` draining a pool of `entries`."""
    async with Database(url, min_size=claimers + 1, max_size=claimers + 1) as db:
        pool = WarmPool(db)
        name = f"bench-{tag}"
        await pool.clear(name)
        for start in range(0, entries, 500):
            ids = [f"i{n}" for n in range(start, min(start + 500, entries))]
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


async def measure(url: str, entries: int, rounds: int) -> list[Row]:
    rows = []
    for claimers in CLAIMERS:
        best: tuple[float, list[float]] | None = None
        for r in range(rounds):
            outcome = await scenario(url, claimers, entries, f"c{claimers}-r{r}-{time.time_ns()}")
            if best is None or outcome[0] > best[0]:
                best = outcome
        assert best is not None
        rate, latencies = best
        cuts = statistics.quantiles(latencies, n=100)
        rows.append((str(claimers), str(entries), f"{rate:,.0f}", f"{cuts[49]:.2f}", f"{cuts[98]:.2f}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000, help="ready entries per scenario")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per scenario (best is shown)")
    args = parser.parse_args()
    with bench_database("bench-pool-") as database:
        started = time.perf_counter()
        rows = asyncio.run(measure(database.url, args.entries, args.rounds))
        print_table(("claimers", "entries", "claims/s", "p50 ms", "p99 ms"), rows, align="right")
        print_footer(started, database.where)


if __name__ == "__main__":
    main()
