"""Peers in the same run: DBOS Transact streams, Procrastinate and pgmq beside our equivalent paths.

    pip install -e ".[bench]"
    .venv/bin/python bench/peers.py [--quick]
    .venv/bin/python -m bench --peers          # the suite's table, then these rows under it

Prints `measure | ours | peer | ours/peer`. Every peer runs on the same Postgres server as ours, in
the same run, each in a database of its own (CREATE DATABASE beside the ledger's, dropped at the
end; with LEDGER_DATABASE_URL its role needs CREATEDB), with the peer's own defaults except where a
row says otherwise. `ours/peer` reads "how many times ours": ours / peer for a rate, peer / ours
for a latency, so above 1 ours is ahead either way.

The peers are an optional extra (`bench`): without it this module still imports (it imports the
peers inside the functions that use them), `python -m bench` runs as before, and `--peers` (or this
script) says how to install the extra and exits with code 2.

The rows, and how each side is measured (wall clock, one process, awaited from asyncio; the peers'
synchronous APIs run in threads):

- stream append, 1 / 8 writers (events/s): ours is `RunLog.append` of one event per call, one run
  per writer (as `bench_runlog.throughput`); DBOS is `DBOS.write_stream` of the same event from
  inside a workflow, one workflow and stream per writer (one transaction each: its step record is
  checked, the value inserted, the step recorded). Both commit every event on its own.
- stream read wake, 1 reader, p50 / p99 (ms): from the writer's call (`RunLog.append`;
  `DBOS.write_stream`) to a reader already blocked in its read (`RunLog.list_events` long-poll;
  the `DBOS.read_stream` generator) having the event; one event per round, the reader waiting
  before each write. Both wake by LISTEN/NOTIFY. DBOS coalesces its stream notifications off the
  write path (`notification_coalesce_sec`, default 10 ms), which is part of what it costs; the
  "DBOS coalescing 1 ms" rows run it again with the smallest interval it allows.
- job start, p50 / p99 (ms): Procrastinate from `defer_async` to the task's body starting in a
  worker already waiting (LISTEN/NOTIFY on, concurrency 1), deferred 100 ms after its last job: a
  job whose notification comes while the worker is fetching is missed (the worker clears its
  wake-up flag after each fetch) and waits for its 5 s poll, seen in p99 on a loaded machine
  when the gap was 20 ms. Ours is the stream wake above (measured again, in turns with it), our
  one push path: a worker waiting on a run wakes by the same mechanism. Equivalent in mechanism
  (commit, NOTIFY, one re-read), not in what is handed over (a job row vs an event).
- jobs / claims drained, 1 worker (per s): Procrastinate's worker draining N deferred no-op jobs
  (fetch, run, mark succeeded: two writes per job) vs our pool claim draining N ready entries
  (one write per claim, as `bench_pool.scenario`). Ours does less per item; the row says so.
- message wake, p50 / p99 (ms): pgmq from `pgmq.send`'s call to a consumer already waiting having
  the message, two ways: blocked in `pgmq.read_with_poll` (its server-side long-poll, which looks
  every 100 ms by default; each send at a random point of its sleep), and LISTENing for the
  insert notifications `pgmq.enable_notify_insert` turns on (throttle 0: every insert notifies),
  then one `pgmq.read`. Ours is the stream wake above (measured again, in turns with each).
- queue claim, 1 / 8 consumers (per s): pgmq `pop` (read and delete in one statement) draining N
  messages vs our pool claim draining N entries: the same one-write shape, though our claim also
  collects expired entries, locks the run and records the mapping and counts.

pgmq installs from PyPI only as a client, but that client ships the pgmq extension's SQL-only
install script (`pgmq.install.install_pgmq_from_sql`), which needs no extension binaries: it is
run into pgmq's own database at bench time, so no pgmq code is committed here. pgmq is driven by
its SQL functions over psycopg (what every client of it calls), not through the Python client.

N is the profile's pool size (2,000; `--quick` 200), the throughput runs last the profile's seconds
(5; 1) and the latency rows take the profile's wake rounds (200; 20), each side. Ours and the peer
take turns in three blocks per measure (ours, peer, ours, peer...), so a machine whose load drifts
during the run weighs on both alike; a rate is over all of a side's blocks, a percentile over all
of its samples.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import queue
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_pool
import bench_runlog
import common
import psycopg
import suite
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ledger.db import Database
from ledger.runlog.listener import Listener
from ledger.runlog.store import RunLog

if TYPE_CHECKING:  # the peers are imported where they are used: the extra is optional
    import procrastinate
    from procrastinate.types import JSONDict

PEERS = ("dbos", "procrastinate", "pgmq")
INSTALL = 'pip install -e ".[bench]"'
# How long a blocked reader is given to be back in its wait before the next write of a wake round.
SETTLE = 0.02
EVENT = {"type": "log", "line": "a line of output"}
# Procrastinate's worker clears its wake-up flag after each fetch, so a job whose notification
# comes during a fetch waits for the next poll (5 s); the worker gets this long after a job to be
# back waiting, as the measure says it is.
PROCRASTINATE_SETTLE = 0.1
# DBOS's smallest allowed notification coalescing interval (its default is 10 ms).
TUNED_COALESCE = 0.001
# pgmq.read_with_poll's default interval between its looks at the queue.
PGMQ_POLL_MS = 100
# Ours and each peer take turns in this many blocks per measure, so drift on a loaded machine
# falls on both sides alike.
BLOCKS = 3


def missing() -> list[str]:
    """The peers that cannot be imported here (the `bench` extra is not installed)."""
    return [name for name in PEERS if importlib.util.find_spec(name) is None]


def versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in PEERS}


def _ms(samples: list[float], q: float) -> float:
    return bench_runlog.percentile(samples, q) * 1000


@contextmanager
def peer_database(url: str, name: str) -> Iterator[str]:
    """A fresh database `name` on the server of `url`, dropped on exit; yields its URL."""
    ident = sql.Identifier(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    try:
        yield make_conninfo(url, dbname=name)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


def sqlalchemy_url(conninfo: str) -> str:
    """`conninfo` as a SQLAlchemy URL for psycopg 3 (DBOS takes one)."""
    from sqlalchemy.engine import URL

    params = conninfo_to_dict(conninfo)
    host = params.pop("host", None)
    port = params.pop("port", None)
    query = {k: str(v) for k, v in params.items() if k not in ("dbname", "user", "password")}
    if host is not None and str(host).startswith("/"):
        query["host"] = str(host)  # a Unix socket directory
        host = None
    return URL.create(
        "postgresql+psycopg",
        username=str(params["user"]) if params.get("user") else None,
        password=str(params["password"]) if params.get("password") else None,
        host=str(host) if host else None,
        port=int(port) if port else None,
        database=str(params["dbname"]),
        query=query,
    ).render_as_string(hide_password=False)


# --- ours -----------------------------------------------------------------------------------------


async def ours_wake_latency(url: str, rounds: int) -> list[float]:
    """Seconds from `RunLog.append`'s call to a long-poll waiter already blocked returning the event."""
    run_id = f"peers-wake-{time.time_ns()}"
    samples: list[float] = []
    async with (
        Database(url, min_size=2, max_size=2) as db,
        Database(url, min_size=1, max_size=1) as writer_db,
        Listener(url) as listener,
    ):
        await bench_runlog.open_runs(db, [run_id])
        reader, writer = RunLog(db, listener=listener), RunLog(writer_db)
        for seq in range(rounds):
            waits_before = listener.waits
            waiter = asyncio.create_task(bench_runlog.wait_one(reader, run_id, seq))
            while listener.waits < waits_before + 1:  # noqa: ASYNC110 - a counter, not an event
                await asyncio.sleep(0.001)
            await asyncio.sleep(SETTLE)
            began = time.perf_counter()
            await writer.append(run_id, [EVENT])
            samples.append(await waiter - began)
    return samples


# --- DBOS Transact streams ------------------------------------------------------------------------


class DbosStreams:
    """DBOS launched on a database of its own, with a writer workflow for each measure."""

    def __init__(self, conninfo: str, coalesce_sec: float | None = None) -> None:
        from dbos import DBOS, DBOSConfig

        logging.getLogger("dbos").setLevel(logging.WARNING)
        self.dbos = DBOS
        self.ready: queue.Queue[None] = queue.Queue()
        self.began: list[float] = []

        @DBOS.workflow()
        def write_for(seconds: float) -> list[float]:
            written = 0
            started = time.perf_counter()
            deadline = started + seconds
            while time.perf_counter() < deadline:
                DBOS.write_stream("log", {**EVENT, "n": written})
                written += 1
            return [written, time.perf_counter() - started]

        @DBOS.workflow()
        def write_rounds(rounds: int) -> None:
            for n in range(rounds):
                self.ready.get(timeout=60)  # the reader is back in read_stream
                time.sleep(SETTLE)
                self.began.append(time.perf_counter())
                DBOS.write_stream("log", {**EVENT, "n": n})
            DBOS.close_stream("log")

        self.write_for = write_for
        self.write_rounds = write_rounds
        config: DBOSConfig = {
            "name": "run-ledger-peers",
            "system_database_url": sqlalchemy_url(conninfo),
            "log_level": "WARNING",
        }
        if coalesce_sec is not None:
            config["notification_coalesce_sec"] = coalesce_sec
        DBOS(config=config)
        DBOS.launch()

    def close(self) -> None:
        self.dbos.destroy(destroy_registry=True)

    def throughput(self, writers: int, seconds: float) -> float:
        handles = [self.dbos.start_workflow(self.write_for, seconds) for _ in range(writers)]
        results = [handle.get_result() for handle in handles]
        return sum(n / elapsed for n, elapsed in results)

    def wake(self, rounds: int) -> list[float]:
        self.began.clear()
        handle = self.dbos.start_workflow(self.write_rounds, rounds)
        received: list[float] = []
        values = self.dbos.read_stream(handle.workflow_id, "log")
        self.ready.put(None)
        for _ in values:
            received.append(time.perf_counter())
            if len(received) < rounds:
                self.ready.put(None)
        handle.get_result()
        return [got - began for got, began in zip(received, self.began, strict=True)]


# --- Procrastinate --------------------------------------------------------------------------------


@asynccontextmanager
async def procrastinate_app(conninfo: str) -> AsyncIterator[procrastinate.App]:
    """A Procrastinate app on `conninfo` with its schema applied, open for the block."""
    import procrastinate

    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    # It warns when the app is defined in __main__ (this file run as a script), which matters only
    # to workers in other processes that import tasks by module path; the worker here is in-process.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        yield app


class ProcrastinateJobs:
    """Procrastinate's two measures on one open app: job start latency and jobs drained per second."""

    def __init__(self, app: procrastinate.App) -> None:
        self.app = app
        self.started: list[float] = []
        self.ran = asyncio.Event()
        self.done = 0

        @app.task(queue="peers-start", name="peers_start")
        async def start(began: float) -> None:
            self.started.append(time.perf_counter() - began)
            self.ran.set()

        @app.task(queue="peers-drain", name="peers_drain")
        async def drain(n: int) -> None:
            self.done += 1

        self.start = start
        self.drain = drain

    @asynccontextmanager
    async def waiting_worker(self) -> AsyncIterator[None]:
        """A worker on the start queue (LISTEN/NOTIFY on, concurrency 1), waiting for the block."""
        worker = asyncio.create_task(
            self.app.run_worker_async(
                queues=["peers-start"],
                concurrency=1,
                wait=True,
                install_signal_handlers=False,
                listen_notify=True,
            )
        )
        try:
            await asyncio.sleep(0.5)  # the worker's first fetch and its LISTEN
            yield
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    async def start_latency(self, rounds: int) -> list[float]:
        """Seconds from `defer_async`'s call to the task's body starting (inside `waiting_worker`)."""
        self.started.clear()
        for _ in range(rounds):
            self.ran.clear()
            await asyncio.sleep(PROCRASTINATE_SETTLE)
            await self.start.defer_async(began=time.perf_counter())
            await asyncio.wait_for(self.ran.wait(), 60)
        return list(self.started)

    async def drain_rate(self, jobs: int) -> float:
        """Jobs/s for one worker (concurrency 1) draining `jobs` no-op jobs deferred before it starts."""
        self.done = 0
        for start in range(0, jobs, 500):
            batch: list[JSONDict] = [{"n": n} for n in range(start, min(start + 500, jobs))]
            await self.drain.batch_defer_async(*batch)
        began = time.perf_counter()
        await self.app.run_worker_async(
            queues=["peers-drain"], concurrency=1, wait=False, install_signal_handlers=False
        )
        elapsed = time.perf_counter() - began
        assert self.done == jobs, f"{self.done} of {jobs} jobs ran"
        return jobs / elapsed


# --- pgmq -----------------------------------------------------------------------------------------


def pgmq_sql_version() -> str:
    from pgmq.install import get_embedded_sql_version

    return get_embedded_sql_version()


def install_pgmq(conninfo: str) -> None:
    """pgmq's SQL-only install (shipped inside the PyPI client) into the database at `conninfo`."""
    from pgmq.install import install_pgmq_from_sql

    logging.getLogger("pgmq").setLevel(logging.WARNING)
    install_pgmq_from_sql(dsn=conninfo)


async def pgmq_pop_rate(conninfo: str, consumers: int, messages: int) -> float:
    """Messages/s for `consumers` connections draining `messages` with `pgmq.pop` (one statement each)."""
    name = f"peers_{consumers}_{time.time_ns()}"
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute("SELECT pgmq.create(%s)", (name,))
        for start in range(0, messages, 500):
            batch = min(500, messages - start)
            await conn.execute(
                "SELECT pgmq.send_batch(%s, array_fill(%s::jsonb, ARRAY[%s]))", (name, '{"n": 1}', batch)
            )
    handed: list[int] = []

    async def consumer() -> None:
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            while True:
                row = await (await conn.execute("SELECT msg_id FROM pgmq.pop(%s, 1)", (name,))).fetchone()
                if row is None:
                    return
                handed.append(row[0])

    began = time.perf_counter()
    await asyncio.gather(*(consumer() for _ in range(consumers)))
    elapsed = time.perf_counter() - began
    assert len(handed) == len(set(handed)) == messages, "a message was lost or handed out twice"
    return messages / elapsed


async def pgmq_wake(conninfo: str, rounds: int) -> list[float]:
    """Seconds from `pgmq.send`'s call to a consumer already blocked in `pgmq.read_with_poll` having it.

    read_with_poll looks at the queue, sleeps `PGMQ_POLL_MS`, looks again...; each send comes at a
    random point of a sleep (a fixed one would pick the latency), counted from when the consumer's
    backend is seen sleeping in it (not from the call, which a loaded machine delays by a varying
    amount before the server starts the loop).
    """
    name = f"peers_wake_{time.time_ns()}"
    jitter = random.Random(15)
    samples: list[float] = []
    async with (
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as consumer,
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as producer,
    ):
        await producer.execute("SELECT pgmq.create(%s)", (name,))
        backend = consumer.info.backend_pid

        async def sleeping() -> None:
            while True:
                cur = await producer.execute(
                    "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (backend,)
                )
                row = await cur.fetchone()
                if row is not None and row[0] == "PgSleep":
                    return
                await asyncio.sleep(0.001)

        async def receive() -> float:
            while True:
                cur = await consumer.execute(
                    "SELECT msg_id FROM pgmq.read_with_poll(%s, 30, 1, 5, %s)", (name, PGMQ_POLL_MS)
                )
                if await cur.fetchone() is not None:
                    return time.perf_counter()

        for _ in range(rounds):
            received = asyncio.create_task(receive())
            await asyncio.wait_for(sleeping(), 60)
            await asyncio.sleep(jitter.uniform(0, PGMQ_POLL_MS / 1000))
            began = time.perf_counter()
            await producer.execute("SELECT pgmq.send(%s, %s::jsonb)", (name, '{"n": 1}'))
            samples.append(await asyncio.wait_for(received, 60) - began)
    return samples


async def pgmq_notify_wake(conninfo: str, rounds: int) -> list[float]:
    """Seconds from `pgmq.send`'s call to a consumer LISTENing for pgmq's insert notification having it."""
    name = f"peers_notify_{time.time_ns()}"
    samples: list[float] = []
    async with (
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as listen,
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as consumer,
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as producer,
    ):
        await producer.execute("SELECT pgmq.create(%s)", (name,))
        await producer.execute("SELECT pgmq.enable_notify_insert(%s, 0)", (name,))
        await listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"pgmq.q_{name}.INSERT")))

        async def receive() -> float:
            async for _ in listen.notifies(stop_after=1):
                pass
            cur = await consumer.execute("SELECT msg_id FROM pgmq.read(%s, 30, 1)", (name,))
            assert await cur.fetchone() is not None, "notified, but no message to read"
            return time.perf_counter()

        for _ in range(rounds):
            received = asyncio.create_task(receive())
            await asyncio.sleep(SETTLE)
            began = time.perf_counter()
            await producer.execute("SELECT pgmq.send(%s, %s::jsonb)", (name, '{"n": 1}'))
            samples.append(await asyncio.wait_for(received, 60) - began)
    return samples


# --- the rows -------------------------------------------------------------------------------------


def blocks(total: float) -> list[float]:
    """`total` cut into BLOCKS shares, for ours and a peer to take turns on."""
    return [total / BLOCKS] * BLOCKS


def counts(total: int) -> list[int]:
    return [total // BLOCKS + (1 if i < total % BLOCKS else 0) for i in range(BLOCKS)]


async def turns(
    total: int, ours: Callable[[int], Awaitable[list[float]]], peer: Callable[[int], Awaitable[list[float]]]
) -> tuple[list[float], list[float]]:
    """Latency samples of ours and the peer, `total` rounds each, taken in alternating blocks."""
    mine: list[float] = []
    theirs: list[float] = []
    for n in counts(total):
        mine += await ours(n)
        theirs += await peer(n)
    return mine, theirs


async def drain_turns(
    total: int, ours: Callable[[int], Awaitable[float]], peer: Callable[[int], Awaitable[float]]
) -> tuple[float, float]:
    """Items/s of ours and the peer each draining `total` items, in alternating blocks."""
    seconds = [0.0, 0.0]
    for n in counts(total):
        seconds[0] += n / await ours(n)
        seconds[1] += n / await peer(n)
    return total / seconds[0], total / seconds[1]


class Peers:
    """Measures every peer row on the server of `url`, ours and the peer taking turns.

    A loaded machine drifts over a run, so each pair is taken in BLOCKS alternating blocks (ours,
    peer, ours, peer...) and each side's figure is over all of its blocks.
    """

    def __init__(self, url: str, profile: suite.Profile, log: Callable[[str], None]) -> None:
        self.url = url
        self.profile = profile
        self.log = log
        self.rows: list[suite.Measure] = []
        self.version = versions()

    def add(self, measure: suite.Measure) -> None:
        self.rows.append(measure)
        self.log(f"{measure.measure}: {measure.ours:,.2f} vs {measure.baseline:,.2f} {measure.unit}")

    def pair(self, label: str, ours: list[float], peer: list[float], peer_is: str) -> None:
        for q, tag in ((0.5, "p50"), (0.99, "p99")):
            self.add(suite.Measure(f"{label}, {tag}", "ms", "latency", _ms(ours, q), _ms(peer, q), peer_is))

    async def ours_wake(self, rounds: int) -> list[float]:
        return await ours_wake_latency(self.url, rounds)

    def ours_claims(self, claimers: int) -> Callable[[int], Awaitable[float]]:
        async def claims(entries: int) -> float:
            tag = f"peers-c{claimers}-{time.time_ns()}"
            rate, _ = await bench_pool.scenario(self.url, claimers, entries, tag)
            return rate

        return claims

    async def dbos(self) -> None:
        rounds = self.profile.wake_rounds
        dbos = f"DBOS {self.version['dbos']}"
        with peer_database(self.url, f"peers_dbos_{os.getpid()}") as conninfo:
            streams = await asyncio.to_thread(DbosStreams, conninfo)
            try:
                for writers in (1, 8):
                    ours = peer = 0.0
                    for seconds in blocks(self.profile.seconds):
                        ours += await bench_runlog.throughput(self.url, writers, 1, seconds) / BLOCKS
                        peer += await asyncio.to_thread(streams.throughput, writers, seconds) / BLOCKS
                    label = f"stream append, {writers} writer{'s' if writers > 1 else ''}"
                    self.add(
                        suite.Measure(
                            label, "events/s", "rate", ours, peer, f"{dbos}: write_stream in a workflow"
                        )
                    )

                async def dbos_wake(n: int) -> list[float]:
                    return await asyncio.to_thread(streams.wake, n)

                mine, theirs = await turns(rounds, self.ours_wake, dbos_wake)
                self.pair("stream read wake, 1 reader", mine, theirs, f"{dbos}: read_stream")
            finally:
                await asyncio.to_thread(streams.close)
            # Its shortest notification coalescing, so the rows do not rest on a default alone
            # (dbos_wake reads `streams`, from here on this instance).
            streams = await asyncio.to_thread(DbosStreams, conninfo, TUNED_COALESCE)
            try:
                mine, theirs = await turns(rounds, self.ours_wake, dbos_wake)
            finally:
                await asyncio.to_thread(streams.close)
        self.pair(
            "stream read wake, 1 reader, DBOS coalescing 1 ms",
            mine,
            theirs,
            f"{dbos}: read_stream, notification_coalesce_sec={TUNED_COALESCE}",
        )

    async def procrastinate(self) -> None:
        what = f"Procrastinate {self.version['procrastinate']}"
        with peer_database(self.url, f"peers_procrastinate_{os.getpid()}") as conninfo:
            async with procrastinate_app(conninfo) as app:
                jobs = ProcrastinateJobs(app)
                async with jobs.waiting_worker():
                    mine, theirs = await turns(self.profile.wake_rounds, self.ours_wake, jobs.start_latency)
                self.pair("job start (ours: stream read wake)", mine, theirs, f"{what}: defer → task starts")
                ours, peer = await drain_turns(
                    self.profile.pool_entries, self.ours_claims(1), jobs.drain_rate
                )
                label = "jobs drained, 1 worker (ours: pool claims)"
                self.add(
                    suite.Measure(label, "items/s", "rate", ours, peer, f"{what}: worker fetch, run, finish")
                )

    async def pgmq(self) -> None:
        what = f"pgmq {self.version['pgmq']} (SQL {pgmq_sql_version()})"
        rounds = self.profile.wake_rounds
        with peer_database(self.url, f"peers_pgmq_{os.getpid()}") as conninfo:
            await asyncio.to_thread(install_pgmq, conninfo)

            async def polled(n: int) -> list[float]:
                return await pgmq_wake(conninfo, n)

            async def notified(n: int) -> list[float]:
                return await pgmq_notify_wake(conninfo, n)

            mine, theirs = await turns(rounds, self.ours_wake, polled)
            self.pair(
                "message wake, pgmq read_with_poll (ours: stream read wake)",
                mine,
                theirs,
                f"{what}: send → read_with_poll (looks every {PGMQ_POLL_MS} ms)",
            )
            mine, theirs = await turns(rounds, self.ours_wake, notified)
            self.pair(
                "message wake, pgmq LISTEN + read (ours: stream read wake)",
                mine,
                theirs,
                f"{what}: send → insert NOTIFY (enable_notify_insert, throttle 0) → read",
            )
            for consumers in (1, 8):

                async def pops(n: int, consumers: int = consumers) -> float:
                    return await pgmq_pop_rate(conninfo, consumers, n)

                ours, peer = await drain_turns(self.profile.pool_entries, self.ours_claims(consumers), pops)
                label = f"queue claim, {consumers} consumer{'s' if consumers > 1 else ''} (ours: pool claim)"
                self.add(suite.Measure(label, "items/s", "rate", ours, peer, f"{what}: pgmq.pop"))

    async def run(self) -> list[suite.Measure]:
        await self.dbos()
        await self.procrastinate()
        await self.pgmq()
        return self.rows


def require() -> None:
    """Exit with code 2, saying how to install them, when a peer cannot be imported."""
    absent = missing()
    if absent:
        print(f"the peers bench needs {', '.join(absent)} (the `bench` extra): {INSTALL}", file=sys.stderr)
        raise SystemExit(2)


def print_table(rows: list[suite.Measure], spread: Mapping[str, list[float]] | None = None) -> None:
    """The peer rows as `measure | ours | peer | ours/peer`, with what each peer figure is under it."""
    headers = ("measure", "ours", "peer", "ours/peer") + (("per round",) if spread is not None else ())
    common.print_table(headers, suite.table_rows(rows, spread), align="right")
    print()
    for what in dict.fromkeys(row.baseline_is for row in rows):
        print(f"  peer: {what}")
    print("  ours/peer: ours / peer for rates, peer / ours for latencies (above 1 = ours ahead)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized: about a second per measure")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    require()
    profile = suite.QUICK if args.quick else suite.FULL

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with common.bench_database("bench-peers-") as database:
        started = time.perf_counter()
        rows = asyncio.run(Peers(database.url, profile, log).run())
        if args.json:
            document = {
                "profile": profile.name,
                "where": database.where,
                "peers": versions(),
                "measures": [row.as_json() for row in rows],
            }
            print(json.dumps(document, indent=2))
            return
        print_table(rows)
        common.print_footer(started, database.where)


if __name__ == "__main__":
    main()
