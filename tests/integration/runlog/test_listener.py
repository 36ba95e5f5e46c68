"""Long-polls woken by LISTEN/NOTIFY with real commits, one listening connection, reconnects."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest

from ledger.db import Database
from ledger.runlog.listener import APPLICATION_NAME, ListenConn, Listener
from ledger.runlog.store import RunLog, append_in_transaction, lock_run
from tests import postgres
from tests.own_postgres import own_postgres


class RollBack(Exception):
    pass


LONG_MS = 30_000  # the clamp: a test that finishes did not sit out a long-poll


async def until(condition: Callable[[], bool]) -> None:
    """Until `condition` holds (the test's own timeout bounds it); no timing is asserted."""
    while not condition():  # noqa: ASYNC110 - counters, not events, are what we watch
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def database_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    """A database of this module's own. These tests count the backends on their database; the
    acceptance tests' session-scoped `ledger serve` keeps a listener and a pool open on the shared
    worker database, which would be counted too whenever it ran earlier on the same worker."""
    template = postgres.ensure_template(pg_admin_url)
    name = f"ledger_test_listener_{worker_id}_{os.getpid()}"
    url = postgres.clone_database(pg_admin_url, template, name)
    yield url
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


@pytest.fixture
async def runlog(db: Database, listener: Listener) -> RunLog:
    log = RunLog(db, listener=listener)
    await log.open_run("r1")
    return log


@pytest.fixture
async def other_db(clean_database_url: str) -> AsyncIterator[Database]:
    """A second pool: appends from another connection, as another process would."""
    async with Database(clean_database_url, min_size=1, max_size=2) as database:
        yield database


async def test_returns_at_once_when_events_exist(runlog: RunLog, listener: Listener) -> None:
    await runlog.append("r1", [{"type": "log", "line": "a"}])
    page = await runlog.list_events("r1", after=0, timeout_ms=LONG_MS)
    assert [e["line"] for e in page["events"]] == ["a"]
    assert listener.waits == 0 and listener.waiter_count == 0


async def test_wakes_when_another_connection_commits(
    runlog: RunLog, listener: Listener, other_db: Database
) -> None:
    reader = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS))
    await until(lambda: listener.waits >= 1)
    assert listener.waiter_count == 1
    await RunLog(other_db).append("r1", [{"type": "log", "line": "late"}])
    page = await reader
    assert [(e["seq"], e["line"]) for e in page["events"]] == [(1, "late")]
    assert page["latest_seq"] == 1
    # Woken by the notification, not by a timeout or a poll.
    assert listener.timeouts == 0 and listener.wakeups == 1
    assert listener.waiter_count == 0


async def test_returns_empty_at_timeout(runlog: RunLog, listener: Listener) -> None:
    page = await runlog.list_events("r1", after=-1, timeout_ms=150)
    assert page == {"events": [], "latest_seq": 0, "first_seq": 1, "terminal": None}
    assert listener.timeouts >= 1 and listener.waiter_count == 0


async def test_now_sees_only_later_events(runlog: RunLog, listener: Listener, other_db: Database) -> None:
    await runlog.append("r1", [{"type": "log", "line": "old1"}, {"type": "log", "line": "old2"}])
    reader = asyncio.create_task(runlog.list_events("r1", after="now", timeout_ms=LONG_MS))
    await until(lambda: listener.waits >= 1)
    await RunLog(other_db).append("r1", [{"type": "log", "line": "new"}])
    page = await reader
    assert [(e["seq"], e["line"]) for e in page["events"]] == [(3, "new")]


async def test_a_terminal_run_answers_at_once(runlog: RunLog, listener: Listener) -> None:
    await runlog.set_terminal("r1", "cancelled")
    page = await runlog.list_events("r1", after="now", timeout_ms=LONG_MS)
    assert page["events"] == [] and page["terminal"]["status"] == "cancelled"
    assert listener.waits == 0


async def test_a_rolled_back_append_wakes_nobody(
    runlog: RunLog, listener: Listener, other_db: Database
) -> None:
    await runlog.open_run("r2")
    reader = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS))
    await until(lambda: listener.waits >= 1)
    with pytest.raises(RollBack):
        async with other_db.transaction() as conn:
            run = await lock_run(conn, "r1")
            await append_in_transaction(conn, run, [{"type": "log", "line": "ghost"}], max_events_per_run=0)
            raise RollBack
    # A commit on another run after the rollback: notifications arrive in commit order, so once this
    # one is in, a notification from the rolled-back transaction would have been too.
    await RunLog(other_db).append("r2", [{"type": "log", "line": "elsewhere"}])
    await until(lambda: listener.notifications == 1)
    assert listener.wakeups == 0
    assert not reader.done()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert listener.waiter_count == 0
    page = await runlog.list_events("r1", after=0)
    assert page["events"] == [] and page["latest_seq"] == 0


async def listening_backends(db: Database) -> list[int]:
    """Pids of listener sessions on this database, once those of earlier tests have gone.

    A listener closed by the previous test leaves its backend in pg_stat_activity for a moment after
    the client hung up, so wait (boundedly) for the count to settle before reading it.
    """
    pids: list[int] = []
    for _ in range(50):
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = %s",
                (APPLICATION_NAME,),
            )
            pids = [int(r["pid"]) for r in await cur.fetchall()]
        if len(pids) <= 1:
            break
        await asyncio.sleep(0.1)
    return pids


async def test_a_thousand_waiters_share_one_listening_connection(
    runlog: RunLog, listener: Listener, db: Database, other_db: Database
) -> None:
    readers = [
        asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS)) for _ in range(1000)
    ]
    await until(lambda: listener.waits >= 1000)
    assert listener.waiter_count == 1000
    assert await listening_backends(db) == [listener.backend_pid]
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
        )
        row = await cur.fetchone()
    # The pool (max 20), the other pool (max 2) and the listener: no connection per waiter.
    assert row is not None and row["n"] <= 23
    reads = runlog.reads
    await RunLog(other_db).append("r1", [{"type": "log", "line": "for everyone"}])
    pages = await asyncio.gather(*readers)
    assert all([e["line"] for e in page["events"]] == ["for everyone"] for page in pages)
    assert listener.timeouts == 0 and listener.waiter_count == 0
    # Woken together, they shared one re-read instead of a thousand.
    assert runlog.reads == reads + 1
    assert pages[0] == pages[1] and pages[0]["events"] is not pages[1]["events"]


async def test_killed_listener_reconnects_and_no_waiter_misses_the_event(
    runlog: RunLog, listener: Listener, db: Database, other_db: Database, pg_admin_url: str
) -> None:
    readers = [asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS)) for _ in range(50)]
    await until(lambda: listener.waits >= 50)
    killed_pid = listener.backend_pid
    async with await psycopg.AsyncConnection.connect(pg_admin_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (killed_pid,))
    await RunLog(other_db).append("r1", [{"type": "log", "line": "after the kill"}])
    pages = await asyncio.gather(*readers)
    assert all([e["line"] for e in page["events"]] == ["after the kill"] for page in pages)
    await until(lambda: listener.connected)
    assert listener.reconnects == 1 and listener.backend_pid != killed_pid
    assert await listening_backends(db) == [listener.backend_pid]
    # And the new connection listens: a later append wakes a new waiter by notification.
    wakeups, waits, timeouts = listener.wakeups, listener.waits, listener.timeouts
    reader = asyncio.create_task(runlog.list_events("r1", after=1, timeout_ms=LONG_MS))
    await until(lambda: listener.waits >= waits + 1)
    await RunLog(other_db).append("r1", [{"type": "log", "line": "again"}])
    assert [e["seq"] for e in (await reader)["events"]] == [2]
    assert listener.wakeups > wakeups and listener.timeouts == timeouts


async def test_waiters_poll_while_the_listener_cannot_reconnect(
    db: Database, other_db: Database, clean_database_url: str, pg_admin_url: str
) -> None:
    attempts: list[int] = []

    async def connect_once() -> ListenConn:
        # The database "goes away" for the listener after its first connection.
        attempts.append(1)
        if len(attempts) > 1:
            raise psycopg.OperationalError("simulated outage")
        conn: Any = await psycopg.AsyncConnection.connect(
            clean_database_url, autocommit=True, application_name=APPLICATION_NAME
        )
        return conn

    async with Listener(
        clean_database_url, fallback_poll_s=0.1, keepalive_s=1.0, backoff_max_s=0.2, connect=connect_once
    ) as listener:
        runlog = RunLog(db, listener=listener)
        await runlog.open_run("r1")
        readers = [
            asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS)) for _ in range(20)
        ]
        await until(lambda: listener.waits >= 20)
        async with await psycopg.AsyncConnection.connect(pg_admin_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (listener.backend_pid,))
        await until(lambda: len(attempts) >= 3)  # it keeps trying, and keeps failing
        assert not listener.connected
        await RunLog(other_db).append("r1", [{"type": "log", "line": "polled"}])
        pages = await asyncio.gather(*readers)
    assert all([e["line"] for e in page["events"]] == ["polled"] for page in pages)
    assert listener.reconnects == 0 and listener.wakeups == 0  # no notification ever delivered it


async def test_without_a_listener_long_poll_falls_back_to_polling(db: Database, other_db: Database) -> None:
    runlog = RunLog(db, poll_interval_s=0.05)
    await runlog.open_run("r1")
    reads = runlog.reads
    reader = asyncio.create_task(runlog.list_events("r1", after="now", timeout_ms=LONG_MS))
    # Read twice (found nothing, then polled again): the reader is polling, not answered yet.
    await until(lambda: runlog.reads >= reads + 2)
    assert not reader.done()
    await RunLog(other_db).append("r1", [{"type": "log", "line": "x"}])
    assert [e["seq"] for e in (await reader)["events"]] == [1]


async def test_a_shared_read_serves_only_readers_woken_before_it_started(
    runlog: RunLog, listener: Listener
) -> None:
    await runlog.append("r1", [{"type": "log", "line": "a"}])
    fanout = runlog._fanout
    assert fanout is not None
    woken_early = listener.tick()
    reads = runlog.reads
    first = asyncio.create_task(fanout.read(("r1", 0, 1000), woken_early))
    await asyncio.sleep(0)  # the first reader has started the read
    early = asyncio.create_task(fanout.read(("r1", 0, 1000), woken_early))
    # Woken after the read started: that read may predate the commit that woke it, so it reads again.
    late = asyncio.create_task(fanout.read(("r1", 0, 1000), listener.tick()))
    first.cancel()  # one reader going away does not cancel the read the others share
    pages = await asyncio.gather(early, late)
    assert runlog.reads == reads + 2
    assert all([e["line"] for e in page.page["events"]] == ["a"] for page in pages)
    with pytest.raises(asyncio.CancelledError):
        await first


@pytest.mark.own_postgres
async def test_a_frozen_listener_backend_is_replaced_and_the_waiter_still_woken() -> None:
    """A backend that stops answering (SIGSTOP: what a dead network looks like from here) raises
    no error; only the probe's deadline finds it. Default settings: they are what ships."""
    with own_postgres() as server:
        async with (
            Database(server.url, min_size=1, max_size=2) as database,
            Database(server.url, min_size=1, max_size=1) as writer,
            Listener(server.url) as listener,
        ):
            runlog = RunLog(database, listener=listener)
            await runlog.open_run("r1")
            reader = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS))
            await until(lambda: listener.waits >= 1)
            frozen = listener.backend_pid
            assert frozen is not None
            os.kill(frozen, signal.SIGSTOP)
            try:
                await RunLog(writer).append("r1", [{"type": "log", "line": "while frozen"}])
                page = await reader
                # Found by the probe and every waiter woken to re-read (or, until then, polled): the
                # long-poll's own timeout would have answered an empty page instead. The configured
                # probe and poll are far below that timeout, so only a waiter left asleep fails here.
                assert (
                    listener.keepalive_s + listener.probe_timeout_s + listener.fallback_poll_s
                    < LONG_MS / 1000
                )
                assert [e["line"] for e in page["events"]] == ["while frozen"]
                await until(lambda: listener.connected and listener.backend_pid != frozen)
                assert listener.reconnects == 1
                # The new connection listens: the next append wakes by notification.
                wakeups = listener.wakeups
                reader = asyncio.create_task(runlog.list_events("r1", after=1, timeout_ms=LONG_MS))
                await until(lambda: listener.waiter_count >= 1)
                await RunLog(writer).append("r1", [{"type": "log", "line": "after"}])
                assert [e["seq"] for e in (await reader)["events"]] == [2]
                assert listener.wakeups > wakeups
            finally:
                os.kill(frozen, signal.SIGCONT)
