"""What transaction pooling's settings cost: the timeouts set per transaction instead of per session.

    .venv/bin/python bench/pooler_cost.py [--transactions 3000]

Not part of CI. On a throwaway embedded Postgres (or LEDGER_DATABASE_URL's server, or a PgBouncer
in front of it), one connection runs `--transactions` short transactions (`SELECT 1`) with
`transaction_pooling` off (the timeouts set once per session) and on (`set_config(..., true)` at
the start of each transaction, so nothing outlives it on a shared server session): the mean
transaction time of each, and the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

from ledger.db import Database


async def mean_transaction_ms(url: str, transactions: int, *, transaction_pooling: bool) -> float:
    async with Database(
        url,
        min_size=1,
        max_size=1,
        lock_timeout_s=2,
        statement_timeout_s=5,
        transaction_pooling=transaction_pooling,
    ) as db:
        for _ in range(100):
            async with db.transaction() as conn:
                await conn.execute("SELECT 1")
        started = time.perf_counter()
        for _ in range(transactions):
            async with db.transaction() as conn:
                await conn.execute("SELECT 1")
        return (time.perf_counter() - started) * 1000 / transactions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=3000)
    args = parser.parse_args()
    started = time.perf_counter()
    with common.bench_database("bench-pooler-") as database:
        off = asyncio.run(mean_transaction_ms(database.url, args.transactions, transaction_pooling=False))
        on = asyncio.run(mean_transaction_ms(database.url, args.transactions, transaction_pooling=True))
        common.print_table(
            ("timeouts set", "mean transaction"),
            [
                ("once per session", f"{off:.3f} ms"),
                ("per transaction (pooling)", f"{on:.3f} ms (+{on - off:.3f})"),
            ],
        )
        common.print_footer(started, database.where)


if __name__ == "__main__":
    main()
