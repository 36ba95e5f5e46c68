"""Run-log benchmark: append throughput and commit-to-wake latency, next to a raw baseline.

    .venv/bin/python bench/bench_runlog.py [--seconds 5]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (server defaults: fsync and
synchronous_commit on), migrated (bench/common.py), then measures

- single-event appends/s with 1 and 8 concurrent runs (one appender per run),
- batched appends (1,000 events per call) in events/s,
- commit-to-wake latency p50/p99 with 1 and 1,000 long-poll waiters on one process: from issuing
  COMMIT of an append to each waiter returning the event (NOTIFY, fan-out, re-read),
- the same with 1,000 followers (`RunLog.follow`: callbacks, no task each) in place of the tasks.

The baseline for throughput is `baselines.append_rate` (what `python -m bench` uses too): pgbench,
the embedded wheel's client program (it works against any server), running the one-statement
append with NOTIFY (advance the run, insert the batch, notify) in autocommit. pgbench cannot
LISTEN, so the wake baseline is one bare psycopg LISTEN connection: COMMIT to notification
arrival, plus one re-read.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import baselines
import psycopg
from common import bench_database, print_footer, print_table
from psycopg.rows import dict_row

from ledger.db import Database
from ledger.embedded import client_bin_dir
from ledger.runlog.fanout import SharedPage
from ledger.runlog.listener import CHANNEL, Listener
from ledger.runlog.store import RunLog, append_in_transaction, lock_run, read_page

BATCH = 1000


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def open_runs(db: Database, run_ids: list[str]) -> None:
    runlog = RunLog(db)
    for run_id in run_ids:
        await runlog.open_run(run_id)


def log_events(batch: int) -> list[dict[str, str]]:
    """The batch every append measure sends: `batch` log lines."""
    return [{"type": "log", "line": f"line {i}"} for i in range(batch)]


async def throughput(url: str, runs: int, batch: int, seconds: float) -> float:
    """Events/s appended by `runs` concurrent appenders, one run each, `batch` events per call.

    The runs are new each call, as the baseline's are (`baselines.append_rate`): a round starts
    every run empty, so both sides reach the retention cap after the same number of events and
    trim alike from there (a run kept across rounds would trim on every call of the later rounds
    while the baseline's fresh run does not yet)."""
    async with Database(url, min_size=runs, max_size=runs) as db:
        run_ids = [f"py-{runs}-{batch}-{time.time_ns()}-{i}" for i in range(runs)]
        await open_runs(db, run_ids)
        runlog = RunLog(db)
        events = log_events(batch)
        deadline = time.perf_counter() + seconds
        counts = [0] * runs

        async def appender(index: int) -> None:
            while time.perf_counter() < deadline:
                await runlog.append(run_ids[index], events)
                counts[index] += batch

        start = time.perf_counter()
        await asyncio.gather(*(appender(i) for i in range(runs)))
        return sum(counts) / (time.perf_counter() - start)


async def wait_one(runlog: RunLog, run_id: str, after: int) -> float:
    page = await runlog.list_events(run_id, after=after, timeout_ms=30_000)
    assert page["events"], "timed out"
    return time.perf_counter()


async def wake_latency(url: str, waiters: int, rounds: int) -> list[float]:
    """Seconds from COMMIT of an append to each waiter returning it, over `rounds` appends."""
    run_id = f"wake-{waiters}-{time.time_ns()}"  # a run of its own: the suite may measure again
    samples: list[float] = []
    async with (
        Database(url, min_size=10, max_size=10) as db,
        Database(url, min_size=1, max_size=1) as writer_db,
        Listener(url) as listener,
    ):
        await open_runs(db, [run_id])
        runlog = RunLog(db, listener=listener)
        for seq in range(rounds):
            waits_before = listener.waits
            tasks = [asyncio.create_task(wait_one(runlog, run_id, seq)) for _ in range(waiters)]
            while listener.waits < waits_before + waiters:  # noqa: ASYNC110 - a counter, not an event
                await asyncio.sleep(0.001)
            async with writer_db.connection() as conn, conn.transaction():
                run = await lock_run(conn, run_id)
                await append_in_transaction(conn, run, [{"type": "log", "line": "x"}], max_events_per_run=0)
                committed_at = time.perf_counter()  # the transaction block's exit issues COMMIT
            samples.extend(t - committed_at for t in await asyncio.gather(*tasks))
    return samples


async def follow_latency(url: str, followers: int, rounds: int) -> list[float]:
    """Seconds from COMMIT of an append to each follower's callback getting it, over `rounds`
    appends: `wake_latency`'s wake, its readers followers of the run instead of waiting tasks."""
    run_id = f"follow-{followers}-{time.time_ns()}"
    samples: list[float] = []
    loop = asyncio.get_running_loop()
    got: list[float] = []
    everyone: asyncio.Future[None] = loop.create_future()

    def on_page(shared: SharedPage) -> None:
        got.append(time.perf_counter())
        if len(got) == followers:
            everyone.set_result(None)

    def on_error(error: BaseException) -> None:
        if not everyone.done():
            everyone.set_exception(error)

    async with (
        Database(url, min_size=10, max_size=10) as db,
        Database(url, min_size=1, max_size=1) as writer_db,
        Listener(url) as listener,
    ):
        await open_runs(db, [run_id])
        runlog = RunLog(db, listener=listener)
        waits_before = listener.waits
        handles = [runlog.follow(run_id, on_page, after=0, on_error=on_error) for _ in range(followers)]
        try:
            for seq in range(rounds):
                # Each follower waits once per round: after its first read, then after each page.
                while listener.waits < waits_before + followers * (seq + 1):  # noqa: ASYNC110 - a counter
                    await asyncio.sleep(0.001)
                got.clear()
                everyone = loop.create_future()
                async with writer_db.connection() as conn, conn.transaction():
                    run = await lock_run(conn, run_id)
                    event = [{"type": "log", "line": "x"}]
                    await append_in_transaction(conn, run, event, max_events_per_run=0)
                    committed_at = time.perf_counter()  # the block's exit issues COMMIT
                await everyone
                samples.extend(t - committed_at for t in got)
        finally:
            for handle in handles:
                handle.close()
    return samples


async def raw_wake_latency(url: str, rounds: int) -> list[float]:
    """Baseline: one bare LISTEN connection, COMMIT to notification arrival plus one re-read."""
    samples: list[float] = []
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as listen,
        await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as reader,
        await psycopg.AsyncConnection.connect(url) as writer,
    ):
        await listen.execute(f"LISTEN {CHANNEL}")
        run_id = f"raw-wake-{time.time_ns()}"  # a run of its own: the suite may measure again
        # Inserting the run makes its partition of the event log (a trigger on runs).
        await writer.execute("INSERT INTO ledger.runs (run_id) VALUES (%s)", (run_id,))
        await writer.commit()
        # The re-read is the library's page read, told the run's `created_at` as a `RunLog` is.
        cur = await reader.execute("SELECT created_at FROM ledger.runs WHERE run_id = %s", (run_id,))
        run = await cur.fetchone()
        assert run is not None
        created_at = run["created_at"]
        for seq in range(rounds):
            await writer.execute(
                "UPDATE ledger.runs SET last_seq = last_seq + 1 WHERE run_id = %s RETURNING last_seq",
                (run_id,),
            )
            await writer.execute(
                "INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, payload)"
                " SELECT run_id, %s, created_at, 'log', '{}' FROM ledger.runs WHERE run_id = %s",
                (seq + 1, run_id),
            )
            await writer.execute("SELECT pg_notify(%s, %s)", (CHANNEL, run_id))
            committed_at = time.perf_counter()
            commit = asyncio.create_task(writer.commit())
            async for _ in listen.notifies(stop_after=1):
                pass
            await read_page(reader, run_id, seq, 1000, created_at=created_at)
            samples.append(time.perf_counter() - committed_at)
            await commit
    return samples


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


async def measure(url: str, bin_dir: Path, seconds: float) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []

    async def pair(label: str, runs: int, batch: int, unit: str) -> None:
        ours = await throughput(url, runs, batch, seconds)
        raw = await asyncio.to_thread(baselines.append_rate, bin_dir, url, runs, batch, seconds)
        rows.append((label, f"{ours:,.0f} {unit}", f"{raw:,.0f} {unit}", f"{ours / raw:.0%}"))

    await pair("single-event appends, 1 run", 1, 1, "appends/s")
    await pair("single-event appends, 8 runs", 8, 1, "appends/s")
    await pair("batched appends (1,000/call), 1 run", 1, BATCH, "events/s")
    raw = await raw_wake_latency(url, 200)
    raw_text = f"{ms(percentile(raw, 0.5))} / {ms(percentile(raw, 0.99))} ms"
    for waiters, rounds in ((1, 200), (1000, 15)):
        ours = await wake_latency(url, waiters, rounds)
        rows.append(
            (
                f"commit-to-wake p50 / p99, {waiters} waiter{'s' if waiters > 1 else ''}",
                f"{ms(percentile(ours, 0.5))} / {ms(percentile(ours, 0.99))} ms",
                raw_text + " (1 LISTEN conn)",
                f"{statistics.median(ours) / statistics.median(raw):.1f}x",
            )
        )
    ours = await follow_latency(url, 1000, 15)
    rows.append(
        (
            "commit-to-wake p50 / p99, 1000 followers",
            f"{ms(percentile(ours, 0.5))} / {ms(percentile(ours, 0.99))} ms",
            raw_text + " (1 LISTEN conn)",
            f"{statistics.median(ours) / statistics.median(raw):.1f}x",
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    args = parser.parse_args()
    with bench_database("bench-runlog-") as database:
        started = time.perf_counter()
        rows = asyncio.run(measure(database.url, client_bin_dir(), args.seconds))
        print_table(("measure", "run-ledger", "raw baseline (pgbench / bare LISTEN)", "ratio"), rows)
        print_footer(started, database.where)


if __name__ == "__main__":
    main()
