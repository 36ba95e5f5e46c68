"""The partitioned event log: partitions made on demand and ahead, retention dropping whole
partitions (manual clock), every run-scoped statement on one partition, keys ready to distribute."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from ledger.cli.app import cli
from ledger.clock import ManualClock
from ledger.db import Database
from ledger.errors import DatabaseUnavailable, SchemaMissing
from ledger.ingest.store import apply_status_upload
from ledger.runlog import partitions
from ledger.runlog.store import RunLog, read_page
from ledger.runlog.watchdog import Watchdog

DAY = timedelta(days=1)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


async def names(db: Database) -> list[str]:
    async with db.connection() as conn:
        return [p.name for p in await partitions.list_partitions(conn)]


async def runs(db: Database) -> list[str]:
    async with db.connection() as conn:
        cur = await conn.execute("SELECT run_id FROM ledger.runs ORDER BY run_id")
        return [row["run_id"] for row in await cur.fetchall()]


async def make_run(
    runlog: RunLog, clock: ManualClock, run_id: str, created: datetime, ended: datetime | None
) -> None:
    clock.current = created
    await runlog.open_run(run_id)
    await runlog.append(run_id, [{"type": "log", "line": "hello"}, {"type": "log", "line": "again"}])
    if ended is not None:
        clock.current = ended
        await runlog.set_terminal(run_id, "completed")


# -- made on demand and ahead ----------------------------------------------------------------------


async def test_opening_a_run_makes_its_day_partition_and_a_period_change_never_overlaps(db: Database) -> None:
    clock = ManualClock(at("2097-05-10T13:00:00"))
    runlog = RunLog(db, clock=clock)
    await runlog.open_run("day-run")
    assert "run_events_20970510_20970511" in await names(db)
    async with db.transaction() as conn:
        await partitions.set_period(conn, "month")
    try:
        async with db.transaction() as conn:
            # Later in the month: the month's partition starts where the day's ended.
            assert (
                await partitions.ensure_partition(conn, at("2097-05-20T00:00:00"))
                == "run_events_20970511_20970601"
            )
            # Earlier in the month: it ends where the day's begins.
            assert (
                await partitions.ensure_partition(conn, at("2097-05-01T00:00:00"))
                == "run_events_20970501_20970510"
            )
            # Inside an existing partition: that one, whatever the period says.
            assert (
                await partitions.ensure_partition(conn, at("2097-05-10T23:59:59"))
                == "run_events_20970510_20970511"
            )
            assert (
                await partitions.ensure_partition(conn, at("2097-06-01T00:00:00"))
                == "run_events_20970601_20970701"
            )
    finally:
        async with db.transaction() as conn:
            await partitions.set_period(conn, "day")
    # The run's events go to its own partition, and read back from it.
    await runlog.append("day-run", [{"type": "log", "line": "x"}])
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT tableoid::regclass::text AS part FROM ledger.run_events WHERE run_id = 'day-run'"
        )
        assert [row["part"] for row in await cur.fetchall()] == [
            "ledger_partitions.run_events_20970510_20970511"
        ]
    assert [e["line"] for e in (await runlog.list_events("day-run"))["events"]] == ["x"]


async def test_the_watchdog_makes_the_current_partition_and_two_ahead(db: Database) -> None:
    clock = ManualClock(at("2097-08-10T23:30:00"))
    made = await Watchdog(db, clock=clock).make_partitions()
    assert made == [
        "run_events_20970810_20970811",
        "run_events_20970811_20970812",
        "run_events_20970812_20970813",
    ]
    assert set(made) <= set(await names(db))


# -- retention by partition ---------------------------------------------------------------------------


async def test_retention_drops_whole_partitions_and_deletes_straddlers_one_by_one(db: Database) -> None:
    clock = ManualClock()
    runlog = RunLog(db, clock=clock)
    # Day A: every run ended long ago. Day B: one run is still going. Day C holds the cutoff.
    await make_run(runlog, clock, "a1", at("2099-11-20T01:00:00"), at("2099-11-20T02:00:00"))
    await make_run(runlog, clock, "a2", at("2099-11-20T23:00:00"), at("2099-11-21T05:00:00"))
    await make_run(runlog, clock, "b-done", at("2099-11-22T01:00:00"), at("2099-11-22T02:00:00"))
    await make_run(runlog, clock, "b-long", at("2099-11-22T03:00:00"), None)
    await make_run(runlog, clock, "c-done", at("2099-12-02T01:00:00"), at("2099-12-02T02:00:00"))
    day_a, day_b, day_c = (
        "run_events_20991120_20991121",
        "run_events_20991122_20991123",
        "run_events_20991202_20991203",
    )
    clock.current = at("2100-01-01T12:00:00")  # the cutoff is 2099-12-02 12:00
    dog = Watchdog(db, clock=clock, retention=timedelta(days=30))

    plan = await dog.plan_retention()
    # (Empty partitions other tests left behind go too: they hold no run.)
    assert [(p.name, n) for p, n in plan.partitions if n] == [(day_a, 2)]
    # b-done has expired in a partition b-long holds; c-done has expired too, but its day is not
    # past the cutoff yet: it waits for its partition.
    assert plan.per_run == 1 and plan.runs == 3
    assert await dog.sweep_runs() == 3
    left = await names(db)
    assert day_a not in left and day_b in left and day_c in left
    assert await runs(db) == ["b-long", "c-done"]
    async with db.connection() as conn:
        cur = await conn.execute("SELECT DISTINCT run_id FROM ledger.run_events ORDER BY run_id")
        assert [row["run_id"] for row in await cur.fetchall()] == ["b-long", "c-done"]
    assert await dog.sweep_runs() == 0

    # A day later day C is past the cutoff, and nothing holds it.
    clock.current += DAY
    assert await dog.sweep_runs() == 1
    assert day_c not in await names(db) and day_b in await names(db)
    # b-long ends; once it is past the retention (not at it) its partition goes whole.
    await runlog.set_terminal("b-long", "failed", error="gave up")
    clock.current += timedelta(days=30)
    assert [p.name for p, n in (await dog.plan_retention()).partitions if n] == []
    clock.current += timedelta(microseconds=1)
    assert [p.name for p, n in (await dog.plan_retention()).partitions if n] == [day_b]
    assert await dog.sweep_runs() == 1
    assert day_b not in await names(db) and await runs(db) == []


async def test_a_partition_the_database_will_not_drop_is_the_library_s_error(db: Database) -> None:
    # The watchdog leaves such a partition for its next pass: it catches the library's errors, so
    # the drop must raise those, with the driver's error kept as the cause.
    clock = ManualClock(at("2097-06-10T13:00:00"))
    await RunLog(db, clock=clock).open_run("kept")
    async with db.connection() as conn:
        (partition,) = [
            p for p in await partitions.list_partitions(conn) if p.name == "run_events_20970610_20970611"
        ]
    # Finishing a detach that never started is refused (the partition is not pending).
    with pytest.raises(DatabaseUnavailable) as refused:
        await partitions.drop_partition(db, dataclasses.replace(partition, detach_pending=True))
    assert isinstance(refused.value.__cause__, psycopg.errors.ObjectNotInPrerequisiteState)
    # A partition already gone (another watchdog dropped it).
    with pytest.raises(SchemaMissing) as gone:
        await partitions.drop_partition(db, dataclasses.replace(partition, name="run_events_gone"))
    assert isinstance(gone.value.__cause__, psycopg.errors.UndefinedTable)
    assert partition.name in await names(db)
    await partitions.drop_partition(db, partition)
    assert partition.name not in await names(db)


# -- one partition per run-scoped statement ----------------------------------------------------------

TOUCHES = """
SELECT relname, seq_scan + coalesce(idx_scan, 0) + n_tup_ins + n_tup_upd + n_tup_del AS n
FROM pg_stat_user_tables WHERE schemaname = 'ledger_partitions'
"""


@pytest.fixture
async def one_connection(clean_database_url: str) -> AsyncIterator[Database]:
    """A pool of one: the connection the statements run on is the one whose statistics we flush."""
    async with Database(clean_database_url, min_size=1, max_size=1) as db:
        yield db


async def partitions_touched(db: Database, url: str, operation: Callable[[], Awaitable[Any]]) -> set[str]:
    """The event log partitions `operation` scanned or wrote (its statistics, flushed at once)."""

    async def flush() -> None:
        async with db.connection() as conn:
            await conn.execute("SELECT pg_stat_force_next_flush()")

    def counts() -> dict[str, int]:
        with psycopg.connect(url, autocommit=True) as conn:
            return {name: n for name, n in conn.execute(TOUCHES).fetchall()}

    await flush()
    before = counts()
    await operation()
    await flush()
    after = counts()
    return {name for name, n in after.items() if n != before.get(name, 0)}


async def test_every_run_scoped_statement_touches_one_partition(
    one_connection: Database, clean_database_url: str
) -> None:
    db = one_connection
    clock = ManualClock()
    runlog = RunLog(db, clock=clock, max_events_per_run=3)
    for day in ("2098-03-01", "2098-03-05", "2098-03-09"):
        await make_run(runlog, clock, f"run-{day}", at(f"{day}T10:00:00"), None)
    clock.current = at("2098-03-05T11:00:00")
    target = "run-2098-03-05"
    own = {"run_events_20980305_20980306"}

    async def touched(operation: Callable[[], Awaitable[Any]]) -> set[str]:
        return await partitions_touched(db, clean_database_url, operation)

    async def by_run_id_alone() -> None:
        async with db.connection() as conn:
            await conn.execute("SELECT count(*) FROM ledger.run_events WHERE run_id = %s", (target,))

    # The check sees a statement that names the run but not its creation time: it reads them all.
    assert len(await touched(by_run_id_alone)) >= 3
    # The append (its insert, and its trim: 1,003 events past a cap of 3 complete a chunk of 1,000
    # trimmed seqs, which the same call deletes).
    assert (
        await touched(lambda: runlog.append(target, [{"type": "log", "line": f"{i}"} for i in range(1003)]))
        == own
    )
    # Reads: a page, the resumption's log tail, the overview of one run.
    assert await touched(lambda: runlog.list_events(target)) == own
    assert await touched(lambda: runlog.list_events(target, after=1004)) == own
    assert await touched(lambda: runlog.recent_log_lines(target)) == own

    async def overview() -> None:
        async with db.connection() as conn:
            await conn.execute("SELECT * FROM ledger.run_overview WHERE run_id = %s", (target,))

    assert await touched(overview) == own
    # Ingestion: an upload appending logs and setting the terminal state, in one transaction.
    upload = {
        "status": "completed",
        "upload_seq": 1,
        "producer_attempt": 1,
        "live_logs": ["one", "two"],
        "live_log_total_count": 2,
    }
    assert await touched(lambda: apply_status_upload(db, target, upload, max_events_per_run=3)) == own
    # A run ingestion opens lands in the current partition only.
    clock.current = at("2098-03-09T12:00:00")
    fresh = await touched(lambda: apply_status_upload(db, "fresh", {**upload, "status": "running"}))
    assert len(fresh) == 1


# The event log partitions this transaction holds a lock on: every partition a statement's plan
# kept, whether its executor then scanned it or pruned it at run time.
LOCKED_PARTITIONS = r"""
SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND c.relkind = 'r'
  AND c.relname LIKE 'run\_events\_%'
"""


async def test_a_runs_first_read_plans_its_own_partition_alone(db: Database) -> None:
    # A read that finds the run's partition only at run time has every partition planned, locked
    # and set up first: a cost growing with the partitions retention keeps, which the scan counts
    # above do not see.
    clock = ManualClock()
    runlog = RunLog(db, clock=clock)
    for day in ("2096-05-01", "2096-05-05", "2096-05-09"):
        await make_run(runlog, clock, f"first-read-{day}", at(f"{day}T10:00:00"), None)
    async with db.transaction() as conn:
        shared, created_at = await read_page(conn, "first-read-2096-05-05", -1, 100)
        cur = await conn.execute(LOCKED_PARTITIONS)
        locked = {row["relname"] for row in await cur.fetchall()}
    assert created_at == at("2096-05-05T10:00:00")
    assert [e["line"] for e in shared.page["events"]] == ["hello", "again"]
    assert locked == {"run_events_20960505_20960506"}


# -- ready to distribute by run_id ---------------------------------------------------------------------

KEYS = """
SELECT c.conrelid::regclass::text AS relation, c.conname,
       (SELECT a.attname FROM pg_attribute a
        WHERE a.attrelid = c.conrelid AND a.attnum = c.conkey[1]) AS first
FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname IN ('ledger', 'ledger_partitions') AND c.contype IN ('p', 'u')
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attname = 'run_id')
"""

UNIQUE_INDEXES = """
SELECT i.indexrelid::regclass::text AS index,
       (SELECT a.attname FROM pg_attribute a
        WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[0]) AS first
FROM pg_index i
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname IN ('ledger', 'ledger_partitions') AND i.indisunique
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attname = 'run_id')
"""


def test_every_run_scoped_key_starts_with_run_id(clean_database_url: str) -> None:
    with psycopg.connect(clean_database_url) as conn:
        keys = conn.execute(KEYS).fetchall()
        indexes = conn.execute(UNIQUE_INDEXES).fetchall()
    relations = {relation for relation, _, _ in keys}
    # Every table a run owns, and the event log's partitions too.
    assert {"ledger.runs", "ledger.run_events", "ledger.sheet_rows", "ledger.node_observations"} <= relations
    assert any(r.startswith("ledger_partitions.") for r in relations)
    assert [(r, name) for r, name, first in keys if first != "run_id"] == []
    assert [index for index, first in indexes if first != "run_id"] == []


def test_ledger_db_partitions_makes_them_ahead_and_sets_the_period(clean_database_url: str) -> None:
    env = {"LEDGER_DATABASE_URL": clean_database_url}
    runner = CliRunner()
    try:
        listed = runner.invoke(cli, ["db", "partitions", "--ahead", "3", "--interval", "month"], env=env)
        assert listed.exit_code == 0, listed.output
        assert "new partitions cover one UTC month" in listed.output
        with psycopg.connect(clean_database_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM ledger.run_event_partitions WHERE to_at > now()"
                " AND from_at < now() + interval '3 months'"
            ).fetchone()
        # Today's and three more (months now: each starts where the last one ended).
        assert row is not None and row[0] >= 4
        bad = runner.invoke(cli, ["db", "partitions", "--interval", "week"], env=env)
        assert bad.exit_code == 2 and "--interval" in bad.output
    finally:
        runner.invoke(cli, ["db", "partitions", "--interval", "day"], env=env)


async def test_partition_bounds_are_utc_days_whatever_the_session_time_zone(db: Database) -> None:
    async with db.transaction() as conn:
        # +13:45 in September: 23:30 UTC is already the next day there.
        await conn.execute("SET LOCAL TimeZone = 'Pacific/Chatham'")
        name = await partitions.ensure_partition(conn, at("2097-09-01T23:30:00"))
        assert name == "run_events_20970901_20970902"
        found = [p for p in await partitions.list_partitions(conn) if p.name == name]
    assert [(p.from_at, p.to_at) for p in found] == [(at("2097-09-01T00:00:00"), at("2097-09-02T00:00:00"))]


async def test_a_run_deleted_and_opened_again_reads_its_new_events(db: Database) -> None:
    # The run log remembers each read run's creation time to name its partition: a run id used
    # again (after retention deleted the first run) must not read the old run's partition.
    clock = ManualClock(at("2097-10-01T08:00:00"))
    runlog = RunLog(db, clock=clock)
    await runlog.open_run("again")
    await runlog.append("again", [{"type": "log", "line": "first life"}])
    assert [e["line"] for e in (await runlog.list_events("again"))["events"]] == ["first life"]
    async with db.transaction() as conn:
        await conn.execute("DELETE FROM ledger.runs WHERE run_id = 'again'")
    clock.current = at("2097-10-03T08:00:00")
    await runlog.open_run("again")
    await runlog.append("again", [{"type": "log", "line": "second life"}])
    assert [e["line"] for e in (await runlog.list_events("again"))["events"]] == ["second life"]


async def test_a_row_with_no_partition_is_unavailable_not_invalid_input(db: Database) -> None:
    # What an append meets when its partition is missing at that instant (an upgrade or a
    # conversion in flight, a detach under way): the request is fine, retrying later serves it.
    # A 422 would tell a plain client to drop its events.
    with pytest.raises(DatabaseUnavailable) as unavailable:
        async with db.transaction() as conn:
            await conn.execute(
                "INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, ts, payload)"
                " VALUES ('nowhere', 1, '1901-01-01', 'log', now(), '{}')"
            )
    assert isinstance(unavailable.value.__cause__, psycopg.errors.CheckViolation)
