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
