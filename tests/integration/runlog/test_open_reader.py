"""Retention beside a reader someone left open: a transaction that has read the event log and
stays open (a BI query, a `pg_dump`, a psql session idle in a transaction) keeps a partition's
concurrent detach waiting. It must never delay failing stalled runs or making partitions ahead,
must leave no partition half-detached for good, and must be named when retention gives up on it.

Real connections, on the tests' Postgres and on Debian's PostgreSQL 15 (a server of the module's own,
`tests.debian_postgres`): on 15 a detach waiting in its second phase is interrupted by neither
`statement_timeout` nor `lock_timeout`, which is what the client-side deadline is for. Waits are
on conditions, bounded by the configured limits with a wide margin."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime, timedelta

import psycopg
import pytest
from click.testing import CliRunner

from ledger import migrate
from ledger.cli.app import cli
from ledger.cli.exits import EXIT_BLOCKED
from ledger.clock import DatabaseClock, ManualClock
from ledger.db import Database
from ledger.errors import HeldBySession
from ledger.runlog import partitions
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog
from tests import postgres
from tests.debian_postgres import debian_postgres_15, fresh_database

STALL_S = 1.0
INTERVAL_S = 0.1
# Far longer than the stall limit: while the detach waits this long, stall failures must go on.
LONG_DETACH_WAIT_S = 60.0
SHORT_DETACH_WAIT_S = 0.5
READER = "bi-reader"
# Longer than every bounded wait of a test in a row, shorter than pytest's timeout.
HANG_BOUND_S = 100.0


async def wait_for(condition: Callable[[], Awaitable[bool]], *, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within_s:g} s")
        await asyncio.sleep(0.05)


async def old_finished_run(db: Database, run_id: str, days_ago: int) -> str:
    """A run created and finished `days_ago` (over the 30 days' retention); the name of its (due)
    partition. Each test takes a day of its own: partitions outlive a test's rows."""
    async with db.connection() as conn:
        now = await DatabaseClock().now(conn)
    return await finished_run(db, run_id, now - timedelta(days=days_ago))


async def finished_run(db: Database, run_id: str, created: datetime) -> str:
    """A run created and finished at `created`; the name of its partition."""
    runlog = RunLog(db, clock=ManualClock(created))
    await runlog.open_run(run_id)
    await runlog.append(run_id, [{"type": "log", "line": "long ago"}])
    await runlog.set_terminal(run_id, "completed")
    async with db.connection() as conn:
        return await partitions.ensure_partition(conn, created)


@pytest.fixture(scope="module")
def postgres_15() -> Iterator[str]:
    with debian_postgres_15() as admin_url:
        yield admin_url


@pytest.fixture(params=["embedded", pytest.param("postgresql-15", marks=pytest.mark.own_postgres)])
def clean_database_url(request: pytest.FixtureRequest, clean_database_url: str) -> str:
    """Each test on the tests' server, then on PostgreSQL 15 (a fresh migrated database)."""
    if request.param == "embedded":
        return clean_database_url
    return fresh_database(request.getfixturevalue("postgres_15"), "open_reader")


@pytest.fixture
def other_ledger_url(clean_database_url: str, worker_id: str) -> Iterator[str]:
    """A second ledger's database on the server of `clean_database_url`, migrated: its partitions,
    and the sessions that detach them, have the same names as the first ledger's. Dropped after."""
    name = f"ledger_test_blockers_{worker_id}_{os.getpid()}"
    url = postgres.create_empty_database(clean_database_url, name)
    try:
        migrate.upgrade(url)
        yield url
    finally:
        with psycopg.connect(clean_database_url, autocommit=True) as conn:
            postgres.drop_database(conn, name)


@pytest.fixture
async def open_reader(clean_database_url: str) -> AsyncIterator[psycopg.AsyncConnection[object]]:
    """A session that will read the event log (`read_all`) and leave its transaction open."""
    conn = await psycopg.AsyncConnection.connect(clean_database_url, application_name=READER)
    try:
        yield conn
    finally:
        await conn.close()


async def read_all(reader: psycopg.AsyncConnection[object]) -> None:
    """Read the whole event log (every partition there is now) and stay in the transaction."""
    await reader.execute("SELECT count(*) FROM ledger.run_events")


async def partition_state(db: Database, name: str) -> str:
    """`attached`, `pending` (a detach interrupted) or `gone`."""
    async with db.connection() as conn:
        listed = {p.name: p for p in await partitions.list_partitions(conn)}
        leftovers = await partitions.detached_leftovers(conn)
    if name in listed:
        return "pending" if listed[name].detach_pending else "attached"
    return "detached" if name in leftovers else "gone"


async def detach_waiting(db: Database) -> bool:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity"
            " WHERE application_name LIKE 'run-ledger detach %' AND wait_event_type = 'Lock'"
            " AND datname = current_database()"
        )
        row = await cur.fetchone()
    return row is not None and row["n"] > 0


async def drop_partitions_ahead(db: Database) -> None:
    """Drop the empty partitions after today's, so the watchdog's loop has to attach them again."""
    async with db.connection() as conn:
        now = await DatabaseClock().now(conn)
        for partition in await partitions.list_partitions(conn):
            if partition.from_at > now:
                await conn.execute(f"DROP TABLE ledger_partitions.{partition.name}")


async def test_stalled_runs_are_failed_on_time_while_a_reader_holds_a_due_partition(
    db: Database, open_reader: psycopg.AsyncConnection[object]
) -> None:
    due = await old_finished_run(db, "old", 60)
    runlog = RunLog(db)
    await runlog.open_run("stalled")
    # Making a partition ahead waits for the detach too (both lock the parent): it must give up
    # rather than hold the loop.
    await drop_partitions_ahead(db)
    await read_all(open_reader)
    dog = Watchdog(db, stall_after_s=STALL_S, interval_s=INTERVAL_S, detach_wait_s=LONG_DETACH_WAIT_S)
    dog.start()
    try:
        await wait_for(
            lambda: detach_waiting(db), within_s=30, what="retention's detach waiting for the reader"
        )
        await runlog.append("stalled", [{"type": "log", "line": "then nothing"}])

        async def failed() -> bool:
            return await runlog.get_terminal("stalled") is not None

        # Well within the detach's own wait: the stall loop does not wait for it.
        await wait_for(failed, within_s=STALL_S * 10 + 5, what="the stalled run failed")
        terminal = await runlog.get_terminal("stalled")
        assert terminal is not None and terminal["status"] == "failed"
        assert await detach_waiting(db), "the reader no longer held the detach: the test proved nothing"

        await open_reader.close()

        async def dropped() -> bool:
            return await partition_state(db, due) == "gone"

        await wait_for(dropped, within_s=30, what="the partition dropped once the reader ended")

        async def ahead() -> bool:
            async with db.connection() as conn:
                now = await DatabaseClock().now(conn)
                return (
                    len([p for p in await partitions.list_partitions(conn) if p.to_at > now])
                    > partitions.DEFAULT_AHEAD
                )

        # And the partitions ahead are made again once nothing holds the parent.
        await wait_for(ahead, within_s=30, what="the partitions ahead made again")
    finally:
        await dog.stop()


async def test_finishing_a_pending_detach_beside_an_open_reader_never_holds_up_appends(
    db: Database, open_reader: psycopg.AsyncConnection[object]
) -> None:
    # The reader holds the partition itself (it read the whole log before the detach began).
    # Finishing the detach takes ACCESS EXCLUSIVE on it; waiting for that in the lock queue would
    # queue every statement that touches the partition behind it, the appends of the watchdog's
    # terminal events among them. It only ever tries briefly.
    # Every wait below is bounded on its own; this bound, under pytest's 120 s, turns a hang
    # into a traceback that ends at the await that hung (a hang was seen once, on the docker
    # backend, and pytest's own timeout showed only the idle event loop).
    async with asyncio.timeout(HANG_BOUND_S):
        due = await old_finished_run(db, "old", 68)
        await read_all(open_reader)
        await Watchdog(db, detach_wait_s=SHORT_DETACH_WAIT_S).drop_partitions()
        assert await partition_state(db, due) == "pending"
        dog = Watchdog(db, stall_after_s=STALL_S, interval_s=INTERVAL_S, detach_wait_s=LONG_DETACH_WAIT_S)
        dog.start()
        try:
            runlog = RunLog(db)
            await runlog.open_run("stalled")
            await runlog.append("stalled", [{"type": "log", "line": "then nothing"}])
            for n in range(20):
                await runlog.open_run(f"busy-{n}")
                await runlog.append(f"busy-{n}", [{"type": "log", "line": "still here"}])

            async def failed() -> bool:
                return await runlog.get_terminal("stalled") is not None

            await wait_for(failed, within_s=STALL_S * 10 + 5, what="the stalled run failed")
            assert await partition_state(db, due) == "pending", "the reader no longer held the partition"
            await open_reader.close()

            async def dropped() -> bool:
                return await partition_state(db, due) == "gone"

            await wait_for(dropped, within_s=30, what="the partition dropped once the reader ended")
        finally:
            await dog.stop()


async def test_a_detach_past_its_wait_is_cancelled_naming_the_reader_and_finished_next_time(
    db: Database, open_reader: psycopg.AsyncConnection[object]
) -> None:
    due = await old_finished_run(db, "old", 62)
    await read_all(open_reader)
    reader_pid = open_reader.info.backend_pid
    dog = Watchdog(db, detach_wait_s=SHORT_DETACH_WAIT_S)
    assert await dog.drop_partitions() == []
    blocked = dog.retention_blocked
    assert blocked is not None
    message = str(blocked)
    assert f"pid {reader_pid}" in message and f"application_name '{READER}'" in message
    assert "idle in transaction" in message and due in message
    # Cancelled in its second phase: left pending, not attached as before nor dropped.
    assert await partition_state(db, due) == "pending"
    # The detach waits on nobody else: the cancel left no session of ours behind.
    assert not await detach_waiting(db)

    await open_reader.close()
    dropped = await dog.drop_partitions()
    assert [p.name for p in dropped] == [due] and dog.retention_blocked is None
    assert await partition_state(db, due) == "gone"


async def test_a_detach_names_only_the_sessions_of_its_own_database(
    db: Database,
    open_reader: psycopg.AsyncConnection[object],
    other_ledger_url: str,
) -> None:
    # Another ledger on the same server detaches its partition of the same name at the same time,
    # its detach (a session of the same name) waiting for a reader of its own.
    async with db.connection() as conn:
        created = await DatabaseClock().now(conn) - timedelta(days=70)
    due = await finished_run(db, "old", created)
    other_reader = await psycopg.AsyncConnection.connect(other_ledger_url, application_name=READER)
    async with Database(other_ledger_url, min_size=1, max_size=4) as other:
        assert await finished_run(other, "old", created) == due
        async with other.connection() as conn:
            (other_due,) = [p for p in await partitions.list_partitions(conn) if p.name == due]
        await read_all(other_reader)
        other_detach = asyncio.ensure_future(
            partitions.drop_partition(other, other_due, wait_s=LONG_DETACH_WAIT_S)
        )
        try:
            await wait_for(
                lambda: detach_waiting(other), within_s=30, what="the other ledger's detach waiting"
            )
            other_pid = f"pid {other_reader.info.backend_pid} ("
            # Nothing of this database waits for anyone or holds the partition.
            named = await partitions.blocking_sessions(db, "run-ledger detach " + due, due)
            assert other_pid not in named
            assert named == "a session that ended meanwhile"

            # This ledger's detach, held by a reader of its own: that reader alone is named.
            await read_all(open_reader)
            async with db.connection() as conn:
                (own_due,) = [p for p in await partitions.list_partitions(conn) if p.name == due]
            with pytest.raises(HeldBySession) as held:
                await partitions.drop_partition(db, own_due, wait_s=SHORT_DETACH_WAIT_S)
            message = str(held.value)
            assert f"pid {open_reader.info.backend_pid} (application_name '{READER}'" in message
            assert other_pid not in message
            assert await detach_waiting(other), "the other ledger's detach ended: the test proved nothing"
        finally:
            await other_reader.close()
            await asyncio.wait_for(other_detach, timeout=30)
    assert await partition_state(db, due) == "pending"
    await open_reader.close()
    await Watchdog(db).drop_partitions()
    assert await partition_state(db, due) == "gone"


async def test_a_drop_past_its_wait_leaves_a_table_the_next_pass_drops(
    db: Database, clean_database_url: str
) -> None:
    due = await old_finished_run(db, "old", 64)
    # Detached, then a reader of that table itself: what a drop cancelled after its detach leaves.
    async with db.connection() as conn:
        await conn.execute(f"ALTER TABLE ledger.run_events DETACH PARTITION ledger_partitions.{due}")
    reader = await psycopg.AsyncConnection.connect(clean_database_url, application_name=READER)
    try:
        await reader.execute(f"SELECT count(*) FROM ledger_partitions.{due}")
        dog = Watchdog(db, detach_wait_s=SHORT_DETACH_WAIT_S)
        await dog.drop_partitions()
        blocked = str(dog.retention_blocked)
        assert f"dropping the detached event log partition {due}" in blocked and READER in blocked
        assert await partition_state(db, due) == "detached"
    finally:
        await reader.close()
    await dog.drop_partitions()
    assert dog.retention_blocked is None and await partition_state(db, due) == "gone"


def test_ledger_gc_ends_within_its_wait_naming_who_holds_the_partition(
    clean_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def prepare() -> tuple[psycopg.AsyncConnection[object], str]:
        async with Database(clean_database_url) as db:
            due = await old_finished_run(db, "old", 66)
        conn = await psycopg.AsyncConnection.connect(clean_database_url, application_name=READER)
        await conn.execute("SELECT count(*) FROM ledger.run_events")
        return conn, due

    loop = asyncio.new_event_loop()
    try:
        reader, due = loop.run_until_complete(prepare())
        monkeypatch.setenv("LEDGER_DATABASE_URL", clean_database_url)
        result = CliRunner().invoke(cli, ["gc", "--wait", "1"])
        pid = reader.info.backend_pid
        loop.run_until_complete(reader.close())
    finally:
        loop.close()
    assert result.exit_code == EXIT_BLOCKED, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("deleted 1 finished run(s) older than 30d")
    (error,) = [line for line in lines if line.startswith("Error:")]
    assert f"pid {pid}" in error and f"application_name '{READER}'" in error and due in error
