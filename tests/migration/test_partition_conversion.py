"""A database filled by the migrations before 0011 converts: the upgrade moves the old event log
aside (refused while a service of the previous release is connected), reads of events answer 503
until `ledger db convert` has copied it, appends go on meanwhile, and the downgrade brings every
event back into one table."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError

from ledger import migrate
from ledger.db import Database
from ledger.errors import DatabaseUnavailable, HeldBySession
from ledger.runlog import conversion
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog
from tests import postgres

RUNS = 30
EVENTS_PER_RUN = 20


def filled_database(pg_admin_url: str, name: str, revision: str, days_apart: int) -> Iterator[str]:
    """A database of its own at `revision` holding RUNS runs of EVENTS_PER_RUN events, created
    `days_apart` days from each other back from now; dropped after."""
    url = postgres.create_empty_database(pg_admin_url, name)
    migrate.upgrade(url, revision)
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO ledger.runs (run_id, created_at, updated_at, last_seq)"
            " SELECT 'r' || i, now() - make_interval(days => i * %(apart)s), now(), %(n)s"
            " FROM generate_series(0, %(runs)s - 1) i",
            {"runs": RUNS, "n": EVENTS_PER_RUN, "apart": days_apart},
        )
        conn.execute(
            "INSERT INTO ledger.run_events (run_id, seq, type, payload)"
            " SELECT r.run_id, s, 'log', jsonb_build_object('line', 'line ' || s)"
            " FROM ledger.runs r CROSS JOIN generate_series(1, %(n)s) s",
            {"n": EVENTS_PER_RUN},
        )
    yield url
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


@pytest.fixture
def filled_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    """A database at 0008 holding runs created over the last 60 days, each with its events."""
    yield from filled_database(pg_admin_url, f"ledger_conv_{worker_id}_{os.getpid()}", "0008", 2)


def count(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


APPEND = (
    'SELECT * FROM ledger.append_events_v3(\'r1\', \'[["log", {"line": "during"}]]\'::jsonb,'
    " NULL, 0, NULL, 'ledger_test', false, NULL)"
)


def test_a_filled_database_converts_beside_live_appends_and_downgrades(
    filled_url: str, tmp_path: Path
) -> None:
    migrate.upgrade(filled_url)
    assert conversion.pending(filled_url)
    assert count(filled_url, "SELECT count(*) FROM ledger.run_events") == 0
    assert count(filled_url, f"SELECT count(*) FROM {conversion.OLD_TABLE}") == RUNS * EVENTS_PER_RUN

    env = {**os.environ, "LEDGER_DATABASE_URL": filled_url, "LEDGER_DATA_DIR": str(tmp_path)}

    appended: list[int] = []

    def append_between_batches(progress: conversion.Progress) -> None:
        # An append of a service still running: it goes to the partitioned table at once.
        if progress.batches == 2:
            with psycopg.connect(filled_url, autocommit=True) as conn:
                conn.execute(APPEND)
            appended.append(1)

    progress = conversion.convert(filled_url, batch=100, report=append_between_batches)
    assert appended == [1]
    assert progress.read == progress.copied == RUNS * EVENTS_PER_RUN
    assert progress.batches == RUNS * EVENTS_PER_RUN // 100
    assert not conversion.pending(filled_url)
    total = RUNS * EVENTS_PER_RUN + 1
    assert count(filled_url, "SELECT count(*) FROM ledger.run_events") == total
    # Each event sits in the partition of its run's creation time.
    assert (
        count(
            filled_url,
            "SELECT count(*) FROM ledger.run_events e JOIN ledger.runs r"
            " ON r.run_id = e.run_id AND r.created_at = e.run_created_at",
        )
        == total
    )
    assert count(filled_url, "SELECT count(*) FROM ledger.run_events WHERE run_id = 'r1' AND seq = 21") == 1
    again = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "db", "convert"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and "nothing to do" in again.stdout

    migrate.downgrade(filled_url, "0008")
    assert count(filled_url, "SELECT count(*) FROM ledger.run_events") == total
    assert count(filled_url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'ledger_partitions'") == 0


def test_a_conversion_left_half_done_downgrades_with_every_event(filled_url: str) -> None:
    migrate.upgrade(filled_url)
    with psycopg.connect(filled_url, autocommit=True) as conn:
        conn.execute(APPEND)
    migrate.downgrade(filled_url, "0008")
    assert count(filled_url, "SELECT count(*) FROM ledger.run_events") == RUNS * EVENTS_PER_RUN + 1


CAP = EVENTS_PER_RUN
APPEND_AT_CAP = (
    'SELECT * FROM ledger.append_events_v3(%(run)s, \'[["log", {"line": "during"}]]\'::jsonb,'
    " NULL, %(cap)s, NULL, 'ledger_test', false, NULL)"
)


def event_log(url: str, table: str) -> dict[tuple[str, int], object]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT run_id, seq, type, payload FROM {table}").fetchall()
    return {(run_id, seq): (kind, payload) for run_id, seq, kind, payload in rows}


def test_appends_trimming_at_the_cap_during_the_conversion_leave_one_consistent_log(filled_url: str) -> None:
    migrate.upgrade(filled_url)
    before = event_log(filled_url, conversion.OLD_TABLE)
    appends = 5

    def append_before_r1_is_copied(progress: conversion.Progress) -> None:
        # Batches go in (run_id, seq) order, 10 events each: r0 fills the first two, r1 comes next.
        if progress.batches == 1:
            with psycopg.connect(filled_url, autocommit=True) as conn:
                for _ in range(appends):
                    conn.execute(APPEND_AT_CAP, {"run": "r1", "cap": CAP})

    conversion.convert(filled_url, batch=10, report=append_before_r1_is_copied)
    after = event_log(filled_url, "ledger.run_events")
    # r1 holds its newest CAP events, gapless, and nothing below its trim watermark; the page's
    # first event is the one its first_seq names.
    kept = sorted(seq for run_id, seq in after if run_id == "r1")
    assert kept == list(range(appends + 1, EVENTS_PER_RUN + appends + 1))
    with psycopg.connect(filled_url) as conn:
        row = conn.execute("SELECT events_trimmed_through FROM ledger.runs WHERE run_id = 'r1'").fetchone()
    assert row == (appends,)
    # Every other run's log is exactly what it was, and r1's old events above the watermark too.
    expected = {key: value for key, value in before.items() if key[0] != "r1" or key[1] > appends}
    assert {
        key: value for key, value in after.items() if key[0] != "r1" or key[1] <= EVENTS_PER_RUN
    } == expected


def test_an_append_waits_for_the_batch_that_copies_its_run(filled_url: str) -> None:
    # The batch copies what lies above the run's trim watermark as it read it: an append that moved
    # the watermark before the batch committed would leave copied rows below it, stored for good.
    # The append's lock is its UPDATE, which a batch's `FOR KEY SHARE` would let through.
    migrate.upgrade(filled_url)
    first = {"after_run": "", "after_seq": 0, "limit": 10}  # r0's first ten events
    with psycopg.connect(filled_url) as batch, psycopg.connect(filled_url, autocommit=True) as appender:
        assert batch.execute(conversion.COPY_BATCH_SQL, first).fetchone() == (10, 10, "r0", 10)
        # Bounds the wait for a lock the batch holds until it commits: the append cannot go first.
        appender.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            appender.execute(APPEND_AT_CAP, {"run": "r0", "cap": CAP})
        batch.commit()
        appender.execute(APPEND_AT_CAP, {"run": "r0", "cap": CAP})
    row = count(filled_url, "SELECT events_trimmed_through FROM ledger.runs WHERE run_id = 'r0'")
    assert row == 1


def test_retention_drops_no_partition_while_a_conversion_is_pending(filled_url: str) -> None:
    migrate.upgrade(filled_url)

    async def drop() -> tuple[list[object], str]:
        async with Database(filled_url) as db:
            dog = Watchdog(db, retention=timedelta(days=1))
            dropped = await dog.drop_partitions()
            return list(dropped), str(dog.retention_blocked)

    # Runs were made over 60 days: with a day's retention most partitions would be due.
    dropped, why = asyncio.run(drop())
    assert dropped == [] and "ledger db convert" in why
    conversion.convert(filled_url)
    # (The filled runs are still running: they hold their partitions.)
    assert asyncio.run(drop()) == ([], "None")


def test_conversion_refuses_to_start_while_retention_drops_a_partition(filled_url: str) -> None:
    migrate.upgrade(filled_url)
    with psycopg.connect(
        filled_url, application_name="run-ledger detach run_events_20200101_20200102"
    ) as busy:
        with pytest.raises(HeldBySession) as refused:
            conversion.convert(filled_url)
        assert f"pid {busy.info.backend_pid}" in str(refused.value)
    assert conversion.pending(filled_url)
    conversion.convert(filled_url)
    assert not conversion.pending(filled_url)


def test_retention_in_another_database_of_the_server_does_not_hold_the_conversion(
    filled_url: str, pg_admin_url: str
) -> None:
    migrate.upgrade(filled_url)
    # Another ledger on the same server dropping a partition of the same name.
    with psycopg.connect(pg_admin_url, application_name="run-ledger detach run_events_20200101_20200102"):
        conversion.convert(filled_url)
    assert not conversion.pending(filled_url)


# The page query of the release before partitioning (its `ledger.runlog.store.READ_PAGE_SQL`,
# revision 0010), as its service ran it on every read of a run's events.
PREVIOUS_RELEASE_READ_PAGE = """
WITH run AS (
    SELECT last_seq, terminal_status, terminal_result, terminal_error, terminal_total_rows,
           terminal_duration_ms, terminal_play_name, completed_at
    FROM ledger.runs WHERE run_id = %(run_id)s
), bounds AS (
    SELECT min(seq) AS first_seq FROM ledger.run_events WHERE run_id = %(run_id)s
), page AS (
    SELECT seq, type, ts, payload FROM ledger.run_events
    WHERE run_id = %(run_id)s AND seq > COALESCE(%(after)s::bigint, (SELECT last_seq FROM run))
    ORDER BY seq
    LIMIT %(limit)s
)
SELECT run.*, bounds.first_seq, page.seq, page.type, page.ts, page.payload
FROM run CROSS JOIN bounds LEFT JOIN page ON true
ORDER BY page.seq
"""


def previous_release_page(conn: psycopg.Connection[tuple[object, ...]], after: int) -> tuple[int, list[int]]:
    params = {"run_id": "r1", "after": after, "limit": 1000}
    rows = conn.execute(PREVIOUS_RELEASE_READ_PAGE, params).fetchall()
    conn.rollback()
    # (first_seq, the page's seqs): what its answer was made of.
    return int(rows[0][8]), [int(row[9]) for row in rows if row[9] is not None]


def previous_release_migrations(tmp_path: Path, url: str) -> Config:
    """Alembic as the previous release ran it at start-up on `url`: its scripts end at 0010."""
    scripts = tmp_path / "previous-release-migrations"
    shutil.copytree(Path(migrate.__file__).parent / "migrations", scripts)
    for version in (scripts / "versions").glob("00*.py"):
        if version.name >= "0011":
            version.unlink()
    # The URL given, not the configured one: with none, env.py would migrate whatever database this
    # process's settings name, and the refusal would say nothing of the database converted here.
    cfg = migrate.alembic_config(url)
    cfg.set_main_option("script_location", str(scripts))
    return cfg


@pytest.fixture
def previous_release_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    """A database at 0010, the last revision before partitioning, with RUNS runs of 20 events."""
    yield from filled_database(pg_admin_url, f"ledger_prev_{worker_id}_{os.getpid()}", "0010", 1)


def test_no_reader_of_either_release_gets_a_partial_log_during_the_conversion(
    previous_release_url: str, tmp_path: Path
) -> None:
    url = previous_release_url
    whole = list(range(1, EVENTS_PER_RUN + 1))
    # A service of the previous release names its pooled sessions `run-ledger` and keeps a listener
    # (`run-ledger-listener`) connected, as this one does.
    with (
        psycopg.connect(url, application_name="run-ledger") as previous,
        psycopg.connect(url, application_name="run-ledger-listener") as listening,
    ):
        assert previous_release_page(previous, 0) == (1, whole)
        with pytest.raises(HeldBySession) as refused:
            migrate.upgrade(url)
        assert f"pid {previous.info.backend_pid}" in str(refused.value)
        assert f"pid {listening.info.backend_pid}" in str(refused.value)
        assert "previous release" in str(refused.value)
        # Nothing changed: the previous release still reads its whole log.
        assert migrate.current(url) == "0010"
        assert previous_release_page(previous, 0) == (1, whole)
        assert previous_release_page(previous, 10) == (1, whole[10:])

    # Stopped, it cannot come back during the window: its start-up migration does not know the
    # database's revision.
    migrate.upgrade(url)
    assert conversion.pending(url)
    with pytest.raises(CommandError, match="Can't locate revision"):
        command.upgrade(previous_release_migrations(tmp_path, url), "head")

    async def during_the_window() -> tuple[str, int]:
        async with Database(url) as db:
            runlog = RunLog(db, max_events_per_run=0)
            appended = await runlog.append("r1", [{"type": "log", "line": "during"}])
            answers = []
            for read in (runlog.list_events("r1", 10), runlog.recent_log_lines("r1")):
                with pytest.raises(DatabaseUnavailable) as unavailable:
                    await read
                answers.append(str(unavailable.value))
            assert answers[0] == answers[1]
            return answers[0], appended[0]["seq"]

    why, seq = asyncio.run(during_the_window())
    assert "ledger db convert" in why and seq == EVENTS_PER_RUN + 1

    conversion.convert(url, batch=7)

    async def after() -> tuple[int, list[int]]:
        async with Database(url) as db:
            page = await RunLog(db).list_events("r1", 10)
            return page["first_seq"], [event["seq"] for event in page["events"]]

    assert asyncio.run(after()) == (1, list(range(11, EVENTS_PER_RUN + 2)))
