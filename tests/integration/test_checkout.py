"""The pool's checkout: a connection is handed out without a checking round trip only when nothing
says it may be dead; a terminated backend's connection is never handed to a request.

Real Postgres, real `pg_terminate_backend` (what a restart or an admin shutdown does to a session).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from ledger.db import Database
from ledger.runlog.store import RunLog


@pytest.fixture
async def one_conn(clean_database_url: str) -> AsyncIterator[Database]:
    # One connection: every checkout is offered the same one again.
    async with Database(clean_database_url, min_size=1, max_size=1, timeout_s=5.0) as database:
        yield database


async def backend_pid(db: Database) -> int:
    async with db.connection() as conn:
        cur = await conn.execute("SELECT pg_backend_pid() AS pid")
        row = await cur.fetchone()
    assert row is not None
    return int(row["pid"])


async def terminate(admin_url: str, pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as admin:
        # With a timeout it returns once the backend has exited: the server has said FATAL and
        # closed the socket, as after a restart.
        cur = await admin.execute("SELECT pg_terminate_backend(%s, 60000) AS gone", (pid,))
        row = await cur.fetchone()
    assert row is not None and row[0] is True


async def test_a_connection_used_moments_ago_whose_backend_was_terminated_is_replaced(
    one_conn: Database, pg_admin_url: str
) -> None:
    first = await backend_pid(one_conn)
    assert await backend_pid(one_conn) == first  # the same connection is reused
    await terminate(pg_admin_url, first)
    # Given back moments ago, so only its readable socket tells it is dead: it must not be used.
    second = await backend_pid(one_conn)
    assert second != first
    assert one_conn.available


async def test_a_one_call_append_after_its_connection_was_terminated_succeeds(
    one_conn: Database, pg_admin_url: str
) -> None:
    runlog = RunLog(one_conn)
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": "before"}])
    await terminate(pg_admin_url, await backend_pid(one_conn))
    [event] = await runlog.append("r1", [{"type": "log", "line": "after"}])
    assert event["seq"] == 2
    page = await runlog.list_events("r1")
    assert [e["seq"] for e in page["events"]] == [1, 2]


async def in_one_transaction(conn: psycopg.AsyncConnection[object]) -> bool:
    """Whether two statements on `conn` share one transaction (the second sees the first's id)."""
    first = await (await conn.execute("SELECT txid_current() AS x")).fetchone()
    second = await (await conn.execute("SELECT txid_current_if_assigned() AS x")).fetchone()
    if not conn.autocommit:
        await conn.rollback()
    assert isinstance(first, dict) and isinstance(second, dict)
    return bool(first["x"] == second["x"])


async def test_each_block_gets_the_mode_it_asks_for_whatever_the_connection_was_last(
    one_conn: Database,
) -> None:
    # One connection for every block: each hands it back in its own mode, the next sets its own.
    for _ in range(2):
        async with one_conn.autocommit() as conn:
            assert conn.autocommit and not await in_one_transaction(conn)
        async with one_conn.connection() as conn:
            assert not conn.autocommit and await in_one_transaction(conn)
        async with one_conn.connection(autocommit=True) as conn:
            assert conn.autocommit and not await in_one_transaction(conn)
        async with one_conn.transaction() as conn:
            assert not conn.autocommit
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS


async def test_appends_one_after_another_switch_the_connection_s_mode_once(
    one_conn: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two switches per append (to autocommit and back) were a tenth of its client's instructions.
    switches: list[bool] = []
    set_autocommit = psycopg.AsyncConnection.set_autocommit

    async def counting(self: psycopg.AsyncConnection[object], value: bool) -> None:
        switches.append(value)
        await set_autocommit(self, value)

    monkeypatch.setattr(psycopg.AsyncConnection, "set_autocommit", counting)
    runlog = RunLog(one_conn)
    await runlog.open_run("r1")
    switches.clear()  # (the check of a connection never handed out switches it and back)
    for i in range(5):
        await runlog.append("r1", [{"type": "log", "line": str(i)}])
    assert switches == [True]
    await runlog.get_run("r1")
    assert switches == [True, False]


async def test_an_autocommit_block_commits_nothing_at_its_end(one_conn: Database) -> None:
    # Its statements committed themselves; a transaction opened by hand and left open is not
    # committed by the block's end (the pool rolls it back when the connection comes back).
    # Session settings undo with their transaction, and leave nothing in the schema.
    async with one_conn.autocommit() as conn:
        await conn.execute("SELECT set_config('ledger_test.kept', 'yes', false)")
        await conn.execute("BEGIN")
        await conn.execute("SELECT set_config('ledger_test.left_open', 'yes', false)")
    async with one_conn.connection() as conn:  # the one connection, as it came back
        cur = await conn.execute(
            "SELECT current_setting('ledger_test.kept', true) AS kept,"
            " current_setting('ledger_test.left_open', true) AS open"
        )
        row = await cur.fetchone()
    assert row is not None and row["kept"] == "yes" and row["open"] != "yes"
