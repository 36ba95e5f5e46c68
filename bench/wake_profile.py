"""Where a 1,000-reader wake-up goes: waiting tasks and followers, step by step.

    .venv/bin/python bench/wake_profile.py [--readers 1000] [--commits 15] [--blocks 3]

Not part of CI. Two parts, each printed as a table:

- asyncio's floor: `--readers` bare tasks each awaiting a future of its own, every future resolved
  in one pass, to the last task resumed; beside it the same number of plain calls;
- on a throwaway embedded Postgres (or LEDGER_DATABASE_URL's server), in `--blocks` interleaved
  blocks of `--commits` commits, for 1,000 waiting tasks (`RunLog.list_events`) and 1,000
  followers (`RunLog.follow`) of one run: from the writer issuing COMMIT to the notification
  reaching the process (a second LISTEN connection in the same loop), the shared read taking its
  pooled connection and giving it back, and the first, median and last reader's answer (medians
  over the block's commits).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from bench_runlog import open_runs
from common import bench_database, print_table

from ledger.db import Conn, Database
from ledger.runlog.fanout import SharedPage
from ledger.runlog.listener import CHANNEL, Listener
from ledger.runlog.store import RunLog, append_in_transaction, lock_run

_marks: dict[str, float] = {}


def _mark(name: str) -> None:
    _marks.setdefault(name, time.perf_counter())


class _TimedDatabase(Database):
    """A pool that marks when the first connection after a commit is taken and given back: the
    shared read's (nothing else reads while the readers wait)."""

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        _mark("read starts")
        async with super().connection() as conn:
            yield conn
        _mark("read ends")


async def _notifications(url: str, ready: asyncio.Event) -> None:
    """Mark each notification's arrival on a LISTEN connection of its own, in the same loop."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"LISTEN {CHANNEL}")
        ready.set()
        async for _ in conn.notifies():
            _mark("notification")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


async def asyncio_floor(readers: int, rounds: int = 50) -> list[tuple[str, str, str]]:
    loop = asyncio.get_running_loop()
    tasks_s: list[float] = []
    calls_s: list[float] = []

    async def wait(future: asyncio.Future[None]) -> float:
        await future
        return time.perf_counter()

    for _ in range(rounds):
        futures = [loop.create_future() for _ in range(readers)]
        tasks = [asyncio.create_task(wait(future)) for future in futures]
        await asyncio.sleep(0)  # every task waits on its future
        started = time.perf_counter()
        for future in futures:
            future.set_result(None)
        tasks_s.append(max(await asyncio.gather(*tasks)) - started)
        called: list[float] = []
        started = time.perf_counter()
        for _ in range(readers):
            called.append(time.perf_counter())
        calls_s.append(called[-1] - started)
    return [
        (f"{readers:,} bare tasks, to the last", _ms(min(tasks_s)), _ms(statistics.median(tasks_s))),
        (f"{readers:,} plain calls, to the last", _ms(min(calls_s)), _ms(statistics.median(calls_s))),
    ]


async def _commit(writer_db: Database, run_id: str) -> float:
    """Append one event to `run_id`; the moment COMMIT is issued (the marks are cleared just before)."""
    async with writer_db.connection() as conn, conn.transaction():
        run = await lock_run(conn, run_id)
        await append_in_transaction(conn, run, [{"type": "log", "line": "x"}], max_events_per_run=0)
        _marks.clear()
        return time.perf_counter()  # the block's exit issues COMMIT


def _relative(committed_at: float, answered: list[float]) -> dict[str, float]:
    """The block's marks and the answers' first, median and last, in seconds after the commit."""
    answered.sort()
    times = {**_marks, "first": answered[0], "median": answered[len(answered) // 2], "last": answered[-1]}
    return {step: at - committed_at for step, at in times.items()}


async def _tasks_block(url: str, readers: int, commits: int) -> list[dict[str, float]]:
    run_id = f"wake-profile-tasks-{time.time_ns()}"
    per_commit: list[dict[str, float]] = []
    async with (
        _TimedDatabase(url, min_size=10, max_size=10) as db,
        Database(url, min_size=1, max_size=1) as writer_db,
        Listener(url) as wake,
    ):
        await open_runs(db, [run_id])
        runlog = RunLog(db, listener=wake)

        async def wait_one(after: int) -> float:
            await runlog.list_events(run_id, after=after, timeout_ms=30_000)
            return time.perf_counter()

        for seq in range(commits):
            waits = wake.waits
            tasks = [asyncio.create_task(wait_one(seq)) for _ in range(readers)]
            while wake.waits < waits + readers:  # noqa: ASYNC110 - a counter, not an event
                await asyncio.sleep(0.001)
            committed_at = await _commit(writer_db, run_id)
            per_commit.append(_relative(committed_at, list(await asyncio.gather(*tasks))))
    return per_commit


async def _followers_block(url: str, readers: int, commits: int) -> list[dict[str, float]]:
    run_id = f"wake-profile-followers-{time.time_ns()}"
    per_commit: list[dict[str, float]] = []
    loop = asyncio.get_running_loop()
    answered: list[float] = []
    everyone: asyncio.Future[None] = loop.create_future()

    def on_page(shared: SharedPage) -> None:
        answered.append(time.perf_counter())
        if len(answered) == readers:
            everyone.set_result(None)

    async with (
        _TimedDatabase(url, min_size=10, max_size=10) as db,
        Database(url, min_size=1, max_size=1) as writer_db,
        Listener(url) as wake,
    ):
        await open_runs(db, [run_id])
        runlog = RunLog(db, listener=wake)
        waits = wake.waits
        handles = [runlog.follow(run_id, on_page, after=0) for _ in range(readers)]
        try:
            for seq in range(commits):
                # Each follower waits once per commit: after its first read, then after each page.
                while wake.waits < waits + readers * (seq + 1):  # noqa: ASYNC110 - a counter, not an event
                    await asyncio.sleep(0.001)
                answered.clear()
                everyone = loop.create_future()
                committed_at = await _commit(writer_db, run_id)
                await everyone
                per_commit.append(_relative(committed_at, list(answered)))
        finally:
            for handle in handles:
                handle.close()
    return per_commit


_STEPS = ("notification", "read starts", "read ends", "first", "median", "last")


async def with_database(url: str, readers: int, commits: int, blocks: int) -> list[tuple[str, ...]]:
    ready = asyncio.Event()
    notifications = asyncio.create_task(_notifications(url, ready))
    await ready.wait()
    try:
        return await _blocks(url, readers, commits, blocks)
    finally:
        notifications.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await notifications


async def _blocks(url: str, readers: int, commits: int, blocks: int) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for block in range(blocks):
        load = os.getloadavg()[0]
        for name, measure in (("waiting tasks", _tasks_block), ("followers", _followers_block)):
            per_commit = await measure(url, readers, commits)
            cells = [_ms(statistics.median(c[step] for c in per_commit)) for step in _STEPS]
            rows.append((f"{block + 1} (load {load:.1f})", f"{readers:,} {name}", *cells))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=1000, help="readers of one run")
    parser.add_argument("--commits", type=int, default=15, help="commits timed per block and kind")
    parser.add_argument("--blocks", type=int, default=3, help="interleaved blocks of tasks and followers")
    args = parser.parse_args()
    print("asyncio's floor (ms; best / median of 50 rounds)")
    print_table(("measure", "best", "median"), asyncio.run(asyncio_floor(args.readers)), align="right")
    with bench_database("bench-wake-profile-") as database:
        rows = asyncio.run(with_database(database.url, args.readers, args.commits, args.blocks))
    print(f"\nWith the database ({database.where}): ms after COMMIT was issued, medians over the commits")
    print_table(("block", "readers", *_STEPS), rows, align="right")


if __name__ == "__main__":
    main()
