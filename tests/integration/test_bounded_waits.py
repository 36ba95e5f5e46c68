"""Every wait on the database is bounded: a held row lock, a runaway statement, dead connections.

Real Postgres and real locks held by another session. No time is asserted: the error itself says
which bound ended the wait (a lock timeout's `LockNotAvailable`, a statement timeout's cancel), and
the holder holds for longer than any test runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator

import psycopg
import pytest

from ledger.db import DB_FAULTS, Database
from ledger.errors import DatabaseUnavailable
from ledger.runlog.store import RunLog
from tests.own_postgres import own_postgres

LOCK_TIMEOUT_S = 0.3
STATEMENT_TIMEOUT_S = 0.5


@pytest.fixture
async def bounded(clean_database_url: str) -> AsyncIterator[Database]:
    async with Database(
        clean_database_url,
        min_size=1,
        max_size=3,
        timeout_s=5.0,
        lock_timeout_s=LOCK_TIMEOUT_S,
        statement_timeout_s=STATEMENT_TIMEOUT_S,
    ) as database:
        yield database


async def test_an_append_to_a_run_whose_row_is_held_fails_after_the_lock_timeout(
    bounded: Database, clean_database_url: str
) -> None:
    runlog = RunLog(bounded)
    await runlog.open_run("held")
    await runlog.open_run("free")
    async with await psycopg.AsyncConnection.connect(clean_database_url) as holder:
        await holder.execute("SELECT 1 FROM ledger.runs WHERE run_id = 'held' FOR UPDATE")
        with pytest.raises(DatabaseUnavailable) as caught:
            await runlog.append("held", [{"type": "log", "line": "blocked"}])
        # The store's boundary translated the driver's error into the outage it is: the service
        # answers it with 503, a fault of the moment, not of the request.
        assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
        assert isinstance(caught.value, DB_FAULTS)
        # The connection went back to the pool in working order; other runs never waited.
        appended = await runlog.append("free", [{"type": "log", "line": "fine"}])
        assert [e["seq"] for e in appended] == [1]
        assert bounded.available
    # Once the holder lets go, the run takes appends again, and the refused one left nothing.
    appended = await runlog.append("held", [{"type": "log", "line": "later"}])
    assert [e["seq"] for e in appended] == [1]


async def test_a_statement_running_past_the_statement_timeout_is_cancelled(bounded: Database) -> None:
    with pytest.raises(DatabaseUnavailable) as caught:
        async with bounded.connection() as conn:
            await conn.execute("SELECT pg_sleep(60)")
    # Cancelled by the statement timeout, not by anything else that cancels a statement.
    assert isinstance(caught.value.__cause__, psycopg.errors.QueryCanceled)
    assert "statement timeout" in str(caught.value.__cause__)
    assert isinstance(caught.value, DB_FAULTS)
    async with bounded.connection() as conn:
        cur = await conn.execute("SHOW lock_timeout")
        row = await cur.fetchone()
    assert row is not None and row["lock_timeout"] == f"{round(LOCK_TIMEOUT_S * 1000)}ms"


async def test_without_limits_the_sessions_keep_postgres_defaults(db: Database) -> None:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT current_setting('lock_timeout') AS l, current_setting('statement_timeout') AS s"
        )
        row = await cur.fetchone()
    assert row == {"l": "0", "s": "0"}


async def test_connections_killed_under_the_pool_are_replaced_not_handed_out(
    bounded: Database, pg_admin_url: str
) -> None:
    # Fill the pool with idle connections, then kill every one of them, as a restart would.
    async def hold() -> int:
        async with bounded.connection() as conn:
            await asyncio.sleep(0.05)
            return conn.info.backend_pid

    pids = set(await asyncio.gather(*(hold() for _ in range(3))))
    assert len(pids) >= 2
    async with await psycopg.AsyncConnection.connect(pg_admin_url, autocommit=True) as admin:
        for pid in pids:
            # With a timeout it waits for the backend to exit (its socket closed): a checkout
            # may skip the check for a connection whose socket has nothing to read yet.
            await admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
    # Every request still succeeds: each dead connection fails its checkout check and is replaced.
    for _ in range(5):
        async with bounded.connection() as conn:
            cur = await conn.execute("SELECT pg_backend_pid() AS pid")
            row = await cur.fetchone()
        assert row is not None and row["pid"] not in pids
    assert bounded.available


def ledger_backends(url: str) -> set[int]:
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'run-ledger'"
        ).fetchall()
    return {int(row[0]) for row in rows}


@pytest.mark.own_postgres
async def test_a_backend_that_stops_answering_is_replaced_without_calling_the_database_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A checkout's check that gets no answer in time condemns its connection only: the bound also
    # counts this process's loop running late (a burst of answers on a loaded machine), and calling
    # the database down for it failed every other request fast with 503 while it was fine. A server
    # of the test's own, whose backends are processes here to freeze (SIGSTOP).
    with own_postgres() as server:
        async with Database(server.url, min_size=1, max_size=1, timeout_s=10.0) as database:
            (frozen,) = ledger_backends(server.url)
            os.kill(frozen, signal.SIGSTOP)
            try:
                with caplog.at_level(logging.WARNING, logger="ledger.db"):
                    # Never handed out before, so the checkout checks it (no recent use vouches).
                    async with database.connection() as conn:
                        cur = await conn.execute("SELECT pg_backend_pid() AS pid")
                        row = await cur.fetchone()
            finally:
                os.kill(frozen, signal.SIGCONT)
            assert row is not None and row["pid"] != frozen
            assert database.available
            assert [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()] == []
