"""Durable Streams benchmark: append and read rows for streams beside the run log's, same database.

    .venv/bin/python bench/bench_streams.py [--seconds 5]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (server defaults: fsync and
synchronous_commit on), migrated (bench/common.py), then measures, for the run log (`RunLog`) and a
byte stream (`StreamStore`) alike:

- single appends/s with 1 and 8 concurrent writers (one run or stream each),
- batched appends: 1,000 events per call for the run log, 1,000 JSON messages per call for a
  JSON stream (flattened one level, one row each),
- catch-up reads of 1,000 items (events, or the messages of a JSON stream) per call,
- commit-to-wake latency p50/p99 of one long-poll waiter (the same single LISTEN connection wakes
  both).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from bench_runlog import log_events
from common import bench_database, print_footer, print_table

from ledger.db import Database
from ledger.runlog.listener import Listener
from ledger.runlog.store import RunLog
from ledger.streams.store import AppendRequest, CreateRequest, StreamStore

BATCH = 1000
WAKE_ROUNDS = 200


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def append_request(body: bytes, content_type: str = "application/octet-stream") -> AppendRequest:
    return AppendRequest(content_type=content_type, body=body, close=False, producer=None, stream_seq=None)


def create_request(content_type: str) -> CreateRequest:
    return CreateRequest(content_type=content_type, ttl_s=None, expires_at=None, closed=False, body=b"")


async def rate(writers: int, seconds: float, step: int, one: Callable[[int], Awaitable[object]]) -> float:
    """Items/s when `writers` tasks each call `one(index)` (adding `step` items) for `seconds`."""
    deadline = time.perf_counter() + seconds
    counts = [0] * writers

    async def writer(index: int) -> None:
        while time.perf_counter() < deadline:
            await one(index)
            counts[index] += step

    start = time.perf_counter()
    await asyncio.gather(*(writer(i) for i in range(writers)))
    return sum(counts) / (time.perf_counter() - start)


async def runlog_appends(db: Database, writers: int, batch: int, seconds: float) -> float:
    runlog = RunLog(db, max_events_per_run=0)
    run_ids = [f"bench-{writers}-{batch}-{i}-{time.monotonic_ns()}" for i in range(writers)]
    for run_id in run_ids:
        await runlog.open_run(run_id)
    events = log_events(batch)
    return await rate(writers, seconds, batch, lambda i: runlog.append(run_ids[i], events))


async def stream_appends(db: Database, writers: int, batch: int, seconds: float) -> float:
    store = StreamStore(db)
    names = [f"bench/{writers}-{batch}-{i}-{time.monotonic_ns()}" for i in range(writers)]
    if batch == 1:
        for name in names:
            await store.create(name, create_request("application/octet-stream"))
        request = append_request(b"line 0")
    else:
        for name in names:
            await store.create(name, create_request("application/json"))
        body = json.dumps([{"line": f"line {i}"} for i in range(batch)]).encode()
        request = append_request(body, "application/json")
    return await rate(writers, seconds, batch, lambda i: store.append(names[i], request))


async def reads(db: Database, seconds: float) -> tuple[float, float]:
    """Catch-up reads of 1,000 items per call from the start: (run log, JSON stream) items/s."""
    runlog = RunLog(db, max_events_per_run=0)
    run_id = f"bench-read-{time.monotonic_ns()}"
    await runlog.open_run(run_id)
    await runlog.append(run_id, log_events(BATCH))
    store = StreamStore(db)
    name = f"bench/read-{time.monotonic_ns()}"
    await store.create(name, create_request("application/json"))
    await store.append(
        name,
        append_request(
            json.dumps([{"line": f"line {i}"} for i in range(BATCH)]).encode(), "application/json"
        ),
    )
    ours_run = await rate(1, seconds, BATCH, lambda _: runlog.list_events(run_id, -1, 0, BATCH))
    ours_stream = await rate(1, seconds, BATCH, lambda _: store.read(name, -1))
    return ours_run, ours_stream


async def wake(url: str) -> tuple[list[float], list[float]]:
    """Commit-to-return of one waiting reader, run log and stream: seconds per round."""
    run_samples: list[float] = []
    stream_samples: list[float] = []
    async with (
        Database(url, min_size=2, max_size=4) as db,
        Database(url, min_size=1, max_size=1) as writer_db,
        Listener(url) as listener,
    ):
        runlog, writer_log = RunLog(db, listener=listener), RunLog(writer_db)
        store, writer_store = StreamStore(db, listener=listener), StreamStore(writer_db)
        run_id, name = f"bench-wake-{time.monotonic_ns()}", f"bench/wake-{time.monotonic_ns()}"
        await runlog.open_run(run_id)
        await store.create(name, create_request("application/octet-stream"))
        for seq in range(WAKE_ROUNDS):
            waiting = asyncio.create_task(runlog.list_events(run_id, seq, 30_000))
            await asyncio.sleep(0.002)
            started = time.perf_counter()
            await writer_log.append(run_id, [{"type": "log", "line": "x"}])
            await waiting
            run_samples.append(time.perf_counter() - started)
            waiting_stream = asyncio.create_task(store.wait_read(name, seq, 30))
            await asyncio.sleep(0.002)
            started = time.perf_counter()
            await writer_store.append(name, append_request(b"x"))
            await waiting_stream
            stream_samples.append(time.perf_counter() - started)
    return run_samples, stream_samples


def ms(samples: list[float]) -> str:
    return f"{percentile(samples, 0.5) * 1000:.2f} / {percentile(samples, 0.99) * 1000:.2f} ms"


async def measure(url: str, seconds: float) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    async with Database(url, min_size=8, max_size=8) as db:
        for writers in (1, 8):
            ours_run = await runlog_appends(db, writers, 1, seconds)
            ours_stream = await stream_appends(db, writers, 1, seconds)
            label = f"single appends, {writers} writer{'s' if writers > 1 else ''}"
            rows.append((label, f"{ours_run:,.0f} appends/s", f"{ours_stream:,.0f} appends/s"))
        ours_run = await runlog_appends(db, 1, BATCH, seconds)
        ours_stream = await stream_appends(db, 1, BATCH, seconds)
        rows.append(
            ("batched appends (1,000/call)", f"{ours_run:,.0f} events/s", f"{ours_stream:,.0f} messages/s")
        )
        read_run, read_stream = await reads(db, seconds)
        rows.append(
            ("catch-up reads (1,000/call)", f"{read_run:,.0f} events/s", f"{read_stream:,.0f} messages/s")
        )
    run_wake, stream_wake = await wake(url)
    rows.append(("append-to-wake p50 / p99, 1 waiter", ms(run_wake), ms(stream_wake)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    args = parser.parse_args()
    with bench_database("bench-streams-") as database:
        started = time.perf_counter()
        rows = asyncio.run(measure(database.url, args.seconds))
        print_table(("measure", "run log", "durable stream"), rows)
        print_footer(started, database.where)


if __name__ == "__main__":
    main()
