"""Run retention: finished runs past it go with everything they own, in batches, skipping runs
another transaction holds; running and recent runs stay; `ledger gc` deletes them too, or only
counts them with --dry-run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
from click.testing import CliRunner

from ledger.cli.app import cli
from ledger.clock import ManualClock
from ledger.db import Database
from ledger.runlog.retention import RETENTION_VAR
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog

# A sweep that waited on a held row instead of skipping it would hang; fail well before that.
NO_HANG_S = 60

OWNED = ("run_events", "sheet_rows", "node_observations", "run_mappings")

# The sweeps under test see this as now, and the runs are dated before it: far in the future, so no
# other watchdog on the worker's database (a test's service, running on the real clock) ever finds
# these runs past its retention and deletes them under the test.
NOW = datetime(2100, 1, 1, tzinfo=UTC)


def watchdog_at_now(
    db: Database, retention: timedelta | None, *, batch_size: int = 100, pass_cap: int | None = 10_000
) -> Watchdog:
    return Watchdog(
        db,
        clock=ManualClock(NOW),
        retention=retention,
        retention_batch_size=batch_size,
        retention_pass_cap=pass_cap,
    )


async def make_run(runlog: RunLog, run_id: str, *, finished: bool, days_ago: int) -> None:
    """A run with events, a sheet row, an observation and a mapping, made `days_ago` old (at NOW)."""
    await runlog.open_run(run_id)
    await runlog.append(run_id, [{"type": "log", "line": f"line {i}"} for i in range(3)])
    if finished:
        await runlog.set_terminal(run_id, "completed", total_rows=1)
    async with runlog.db.transaction() as conn:
        await conn.execute(
            "INSERT INTO ledger.sheet_rows (run_id, table_namespace, row_key, status)"
            " VALUES (%s, 'sheet', 'r1', 'completed')",
            (run_id,),
        )
        await conn.execute(
            "INSERT INTO ledger.node_observations (run_id, node_id, attempt, invocation_seq, status)"
            " VALUES (%s, 'n1', 0, 0, 'completed')",
            (run_id,),
        )
        await conn.execute(
            "INSERT INTO ledger.run_mappings"
            " (run_id, pool, instance_id, state, version, created_at, expires_at)"
            " VALUES (%s, 'p', 'i1', 'claimed', 'v1', now(), %s)",
            (run_id, NOW + timedelta(hours=1)),
        )
        await conn.execute(
            "UPDATE ledger.runs SET created_at = %(at)s, updated_at = %(at)s,"
            " completed_at = CASE WHEN completed_at IS NULL THEN NULL ELSE %(at)s END"
            " WHERE run_id = %(id)s",
            {"at": NOW - timedelta(days=days_ago), "id": run_id},
        )


async def owned_rows(db: Database) -> dict[str, list[str]]:
    """The run ids each table still holds rows for (runs included)."""
    found: dict[str, list[str]] = {}
    async with db.connection() as conn:
        for table in ("runs", *OWNED):
            cur = await conn.execute(f"SELECT DISTINCT run_id FROM ledger.{table} ORDER BY run_id")
            found[table] = [row["run_id"] for row in await cur.fetchall()]
    return found


async def test_old_finished_runs_go_with_all_they_own_and_the_rest_stays(db: Database) -> None:
    runlog = RunLog(db)
    await make_run(runlog, "old-done", finished=True, days_ago=31)
    await make_run(runlog, "old-running", finished=False, days_ago=400)
    await make_run(runlog, "recent-done", finished=True, days_ago=29)
    dog = watchdog_at_now(db, timedelta(days=30))
    assert await dog.count_expired_runs() == 1
    swept = await dog.sweep()
    assert swept.runs == 1 and dog.swept_total.runs == 1
    keep = ["old-running", "recent-done"]
    assert await owned_rows(db) == {table: keep for table in ("runs", *OWNED)}
    assert (await dog.sweep()).runs == 0
    # Off keeps everything, however old.
    assert (await watchdog_at_now(db, None).sweep()).runs == 0
    assert (await watchdog_at_now(db, timedelta(days=1)).sweep()).runs == 1
    assert (await owned_rows(db))["runs"] == ["old-running"]


async def test_batches_delete_everything_over_several_transactions_within_the_pass_cap(
    db: Database,
) -> None:
    runlog = RunLog(db)
    for i in range(7):
        await make_run(runlog, f"old-{i}", finished=True, days_ago=40 + i)
    capped = watchdog_at_now(db, timedelta(days=30), batch_size=2, pass_cap=5)
    assert await capped.sweep_runs() == 5
    # Oldest first: the two most recent of the seven are what the cap left.
    assert (await owned_rows(db))["runs"] == ["old-0", "old-1"]
    assert await capped.sweep_runs() == 2
    assert await owned_rows(db) == {table: [] for table in ("runs", *OWNED)}


async def test_a_run_held_by_another_transaction_is_skipped_not_waited_on(
    db: Database, clean_database_url: str
) -> None:
    runlog = RunLog(db)
    for run_id in ("held", "free"):
        await make_run(runlog, run_id, finished=True, days_ago=60)
    dog = watchdog_at_now(db, timedelta(days=30), batch_size=1)
    holder = await psycopg.AsyncConnection.connect(clean_database_url)
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM ledger.runs WHERE run_id = 'held' FOR UPDATE")
            # A claim holding the free run's mapping: the run goes, the mapping is not waited on.
            await holder.execute("SELECT 1 FROM ledger.run_mappings WHERE run_id = 'free' FOR UPDATE")
            assert await asyncio.wait_for(dog.sweep_runs(), NO_HANG_S) == 1
            left = await owned_rows(db)
            assert left["runs"] == ["held"] and left["run_mappings"] == ["free", "held"]
    finally:
        await holder.close()
    assert await dog.sweep_runs() == 1
    assert (await owned_rows(db))["runs"] == []


def test_ledger_gc_dry_run_counts_and_gc_deletes(clean_database_url: str) -> None:
    # `ledger gc` reads the database's clock, so these runs are really this old: young enough
    # that no other watchdog on the database (30 days by default) deletes them under the test.
    with psycopg.connect(clean_database_url) as conn:
        # Newer ended just over an hour ago: past a retention of 60 minutes, and in the day (the
        # partition) the cutoff falls in at any time of day - two hours ago would be yesterday's
        # partition, dropped whole, between midnight and 2 a.m.
        for run_id, seconds in (("older", 48 * 3600), ("newer", 3600 + 1)):
            conn.execute(
                "INSERT INTO ledger.runs (run_id, status, terminal_status, created_at, completed_at)"
                " VALUES (%(id)s, 'completed', 'completed', now() - make_interval(secs => %(s)s),"
                " now() - make_interval(secs => %(s)s))",
                {"id": run_id, "s": seconds},
            )
            conn.execute(
                "SELECT ledger.ensure_run_events_partition(created_at) FROM ledger.runs WHERE run_id = %s",
                (run_id,),
            )
            conn.execute(
                "INSERT INTO ledger.run_events (run_id, seq, type, run_created_at)"
                " SELECT run_id, 1, 'terminal', created_at FROM ledger.runs WHERE run_id = %s",
                (run_id,),
            )
    env = {"LEDGER_DATABASE_URL": clean_database_url, RETENTION_VAR: "1d"}
    runner = CliRunner()

    def runs() -> list[str]:
        with psycopg.connect(clean_database_url) as conn:
            return [r[0] for r in conn.execute("SELECT run_id FROM ledger.runs ORDER BY run_id")]

    dry = runner.invoke(cli, ["gc", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert "would delete 1 finished run(s) older than 1d" in dry.output
    # Which partitions would go whole, and how many runs would go one by one.
    assert "dropped whole with its 1 run(s)" in dry.output
    assert "0 run(s) deleted one by one" in dry.output
    assert runs() == ["newer", "older"]
    # Older ended two days ago: its day's partition is past the cutoff. Newer has expired too, but
    # its day's partition is not past the cutoff yet: it waits, to go with it whole.
    wider = runner.invoke(cli, ["gc", "--dry-run", "--retention", "60m"], env=env)
    assert "would delete 1 finished run(s) older than 1h" in wider.output
    bad = runner.invoke(cli, ["gc", "--retention", "soon"], env=env)
    assert bad.exit_code == 2 and "--retention" in bad.output
    off = runner.invoke(cli, ["gc", "--retention", "off"], env=env)
    assert off.exit_code == 0 and "retention is off" in off.output
    assert runs() == ["newer", "older"]
    done = runner.invoke(cli, ["gc", "--batch", "1"], env=env)
    assert done.exit_code == 0, done.output
    assert "deleted 1 finished run(s) older than 1d (1 event log partition(s) dropped whole)" in done.output
    assert runs() == ["newer"]
