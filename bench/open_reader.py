"""What a reader left open costs retention and the watchdog.

    .venv/bin/python bench/open_reader.py [--hold 30] [--wait 10]

Not part of CI. On a throwaway embedded Postgres (or LEDGER_DATABASE_URL's server), it makes a
partition of the event log due (a run created and finished 60 days ago), opens a session that
reads `ledger.run_events` and stays idle in its transaction for `--hold` seconds, and meanwhile:
runs `ledger gc --wait W` (how long it took, its exit code and line), and the watchdog's loops
with a 1 s stall limit and a pass every 0.2 s over a run that goes quiet (how long after its
limit the run was failed). Then, once the reader has ended, how long the next pass takes to
finish the detach it left pending.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import psycopg

from ledger.clock import DatabaseClock, ManualClock
from ledger.db import Database
from ledger.runlog import partitions
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog

STALL_S = 1.0


async def measure(url: str, hold_s: float, wait_s: float) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    async with Database(url, max_size=5) as db:
        async with db.connection() as conn:
            now = await DatabaseClock().now(conn)
        old = RunLog(db, clock=ManualClock(now - timedelta(days=60)))
        await old.open_run("bench-old")
        await old.set_terminal("bench-old", "completed")
        started = time.perf_counter()
        baseline = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "ledger.cli", "gc", "--dry-run"],
            env={**os.environ, "LEDGER_DATABASE_URL": url},
            capture_output=True,
            text=True,
        )
        rows.append(
            (
                "`ledger gc --dry-run`, nothing open (the command's own start-up)",
                f"{time.perf_counter() - started:.1f} s, exit {baseline.returncode}",
            )
        )
        reader = await psycopg.AsyncConnection.connect(url, application_name="bench-reader")
        await reader.execute("SELECT count(*) FROM ledger.run_events")
        opened = time.perf_counter()

        started = time.perf_counter()
        gc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "ledger.cli", "gc", "--wait", str(wait_s)],
            env={**os.environ, "LEDGER_DATABASE_URL": url},
            capture_output=True,
            text=True,
        )
        took = time.perf_counter() - started
        line = (gc.stderr.strip().splitlines() or [""])[-1]
        rows.append((f"`ledger gc --wait {wait_s:g}`, a reader open", f"{took:.1f} s, exit {gc.returncode}"))
        print(line)

        dog = Watchdog(db, stall_after_s=STALL_S, interval_s=0.2, detach_wait_s=hold_s * 2)
        dog.start()
        runlog = RunLog(db)
        await runlog.open_run("bench-quiet")
        await runlog.append("bench-quiet", [{"type": "log", "line": "then nothing"}])
        quiet_since = time.perf_counter()
        # Polled: the bench looks from outside, as a reader would.
        while await runlog.get_terminal("bench-quiet") is None:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        late = time.perf_counter() - quiet_since - STALL_S
        rows.append(
            ("a quiet run failed by the watchdog (1 s limit, 0.2 s passes)", f"{late:.2f} s after its limit")
        )
        await dog.stop()

        await asyncio.sleep(max(0.0, hold_s - (time.perf_counter() - opened)))
        await reader.close()
        finisher = Watchdog(db, detach_wait_s=wait_s)
        started = time.perf_counter()
        dropped = await finisher.drop_partitions()
        rows.append(
            (
                "the next pass after the reader ended",
                f"{time.perf_counter() - started:.2f} s: {len(dropped)} partition(s) finished and dropped",
            )
        )
        async with db.connection() as conn:
            pending = [p.name for p in await partitions.list_partitions(conn) if p.detach_pending]
        rows.append(("partitions left pending", str(len(pending))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold", type=float, default=30.0, help="seconds the reader stays open")
    parser.add_argument("--wait", type=float, default=partitions.DEFAULT_DETACH_WAIT_S)
    args = parser.parse_args()
    started = time.perf_counter()
    with common.bench_database("bench-open-reader-") as database:
        rows = asyncio.run(measure(database.url, args.hold, args.wait))
        common.print_table(("what", "measured"), rows)
        common.print_footer(started, database.where)


if __name__ == "__main__":
    main()
