"""Concurrent appenders on real, separate connections: gapless per run, independent across runs."""

from __future__ import annotations

import asyncio

import psycopg
from psycopg.rows import dict_row

from ledger.db import Conn, Database
from ledger.runlog.store import RunLog, append_in_transaction, lock_run

WRITERS = 8
APPENDS_EACH = 500


async def connect(url: str) -> Conn:
    return await psycopg.AsyncConnection.connect(url, row_factory=dict_row)


async def test_concurrent_appenders_to_one_run_get_exactly_1_to_n(
    db: Database, clean_database_url: str
) -> None:
    await RunLog(db).open_run("hot")
    conns = [await connect(clean_database_url) for _ in range(WRITERS)]
    pids = {conn.info.backend_pid for conn in conns}
    assert len(pids) == WRITERS  # really eight sessions

    async def writer(conn: Conn, index: int) -> list[int]:
        seqs = []
        for i in range(APPENDS_EACH):
            async with conn.transaction():
                run = await lock_run(conn, "hot")
                [event] = await append_in_transaction(
                    conn, run, [{"type": "log", "line": f"{index}:{i}"}], max_events_per_run=0
                )
            seqs.append(event["seq"])
        return seqs

    try:
        results = await asyncio.gather(*(writer(conn, index) for index, conn in enumerate(conns)))
    finally:
        for conn in conns:
            await conn.close()
    total = WRITERS * APPENDS_EACH
    returned = sorted(seq for seqs in results for seq in seqs)
    assert returned == list(range(1, total + 1))
    # Each writer saw its own appends in increasing order.
    assert all(seqs == sorted(seqs) for seqs in results)
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n, count(DISTINCT seq) AS d, min(seq) AS lo, max(seq) AS hi,"
            " count(DISTINCT payload->>'line') AS lines FROM ledger.run_events WHERE run_id = 'hot'"
        )
        assert await cur.fetchone() == {"n": total, "d": total, "lo": 1, "hi": total, "lines": total}
        cur = await conn.execute("SELECT last_seq FROM ledger.runs WHERE run_id = 'hot'")
        assert await cur.fetchone() == {"last_seq": total}


async def wait_until_blocked(db: Database, pid: int) -> None:
    """Until backend `pid` waits for a lock it has not been granted."""
    while True:
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
            )
            row = await cur.fetchone()
        if row is not None and row["n"] > 0:
            return
        await asyncio.sleep(0.01)


async def test_a_locked_run_does_not_delay_another_run(db: Database, clean_database_url: str) -> None:
    runlog = RunLog(db)
    await runlog.open_run("a")
    await runlog.open_run("b")
    holder = await connect(clean_database_url)
    appender_a = await connect(clean_database_url)
    try:
        await holder.execute("BEGIN")
        await lock_run(holder, "a")  # run A's lock held in an open transaction

        async def append_a() -> int:
            async with appender_a.transaction():
                run = await lock_run(appender_a, "a")
                [event] = await append_in_transaction(
                    appender_a, run, [{"type": "log", "line": "a"}], max_events_per_run=0
                )
            return int(event["seq"])

        blocked = asyncio.create_task(append_a())
        await wait_until_blocked(db, appender_a.info.backend_pid)
        # While A's appender is provably waiting on A's lock, B's append goes through.
        [event_b] = await runlog.append("b", [{"type": "log", "line": "b"}])
        assert event_b["seq"] == 1
        assert (await runlog.get_run("b"))["last_seq"] == 1
        assert not blocked.done()
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_locks WHERE pid = %s AND NOT granted",
                (appender_a.info.backend_pid,),
            )
            assert await cur.fetchone() == {"n": 1}
        await holder.execute("COMMIT")
        assert await blocked == 1
    finally:
        await holder.close()
        await appender_a.close()
