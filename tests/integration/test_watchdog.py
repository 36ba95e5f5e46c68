"""The watchdog fails stalled runs exactly once, even with several replicas, and nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg.rows import dict_row

from ledger.clock import ManualClock
from ledger.db import Database
from ledger.events import WATCHDOG_ERROR
from ledger.runlog import RunLog, lock_run
from ledger.watchdog import Watchdog

STALLED = [f"stalled-{i}" for i in range(12)]


@pytest.fixture
async def other_db(clean_database_url: str) -> AsyncIterator[Database]:
    async with Database(clean_database_url, min_size=1, max_size=2) as database:
        yield database


async def backdate(db: Database, run_ids: list[str], minutes: int) -> None:
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE ledger.runs SET updated_at = updated_at - make_interval(mins => %s)"
            " WHERE run_id = ANY(%s)",
            (minutes, run_ids),
        )


async def terminal_events(db: Database, run_id: str) -> list[dict[str, object]]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT seq, payload FROM ledger.run_events WHERE run_id = %s AND type = 'terminal'", (run_id,)
        )
        return list(await cur.fetchall())


async def test_two_watchdogs_fail_each_stalled_run_exactly_once(db: Database, other_db: Database) -> None:
    runlog = RunLog(db)
    for run_id in [*STALLED, "fresh", "done"]:
        await runlog.open_run(run_id)
        await runlog.append(run_id, [{"type": "log", "line": "started"}])
    await runlog.set_terminal("done", "completed", total_rows=1)
    await backdate(db, [*STALLED, "done"], minutes=10)
    # Batches of one make the two replicas interleave run by run.
    first = Watchdog(db, runlog, stall_after_s=300, batch_size=1)
    second = Watchdog(other_db, RunLog(other_db), stall_after_s=300, batch_size=1)
    failed_a, failed_b = await asyncio.gather(first.run_once(), second.run_once())
    assert sorted(failed_a + failed_b) == sorted(STALLED)  # no run failed twice, none missed
    for run_id in STALLED:
        [event] = await terminal_events(db, run_id)
        assert event["seq"] == 2
        assert event["payload"] == {
            "status": "failed",
            "error": WATCHDOG_ERROR,
            "result": None,
            "total_rows": None,
            "duration_ms": None,
            "play_name": None,
        }
        run = await runlog.get_run(run_id)
        assert run["status"] == "failed" and run["terminal"]["error"] == WATCHDOG_ERROR
    fresh = await runlog.get_run("fresh")
    assert fresh["terminal"] is None and fresh["last_seq"] == 1
    done = await runlog.get_run("done")
    assert done["terminal"]["status"] == "completed" and done["last_seq"] == 2
    assert len(await terminal_events(db, "done")) == 1
    # Another pass finds nothing left.
    assert await asyncio.gather(first.run_once(), second.run_once()) == [[], []]
    assert first.failed_total + second.failed_total == len(STALLED)


async def test_a_run_locked_by_a_writer_is_skipped_until_next_pass(
    db: Database, clean_database_url: str
) -> None:
    runlog = RunLog(db)
    for run_id in ("busy", "idle"):
        await runlog.open_run(run_id)
    await backdate(db, ["busy", "idle"], minutes=10)
    watchdog = Watchdog(db, runlog)
    writer = await psycopg.AsyncConnection.connect(clean_database_url, row_factory=dict_row)
    async with writer, writer.transaction():
        await lock_run(writer, "busy")
        assert await watchdog.run_once() == ["idle"]
    # The writer committed nothing new: the run is still stalled, and the next pass gets it.
    assert await watchdog.run_once() == ["busy"]


async def test_stall_after_boundary_with_a_manual_clock(db: Database) -> None:
    clock = ManualClock(datetime.now(UTC))
    runlog = RunLog(db, clock=clock)
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": "tick"}])
    watchdog = Watchdog(db, runlog, stall_after_s=300)
    clock.advance(299_999)
    assert await watchdog.run_once() == []
    await runlog.append("r1", [{"type": "log", "line": "still alive"}])  # an event resets the stall timer
    clock.advance(299_999)
    assert await watchdog.run_once() == []
    clock.advance(2)
    assert await watchdog.run_once() == ["r1"]
    terminal = await runlog.get_terminal("r1")
    assert terminal is not None and terminal["completed_at"] == int(clock.current.timestamp() * 1000)
    # A producer that comes back after the watchdog gave up is refused: first terminal wins.
    with pytest.raises(Exception, match="already ended failed"):
        await runlog.set_terminal("r1", "completed")


async def test_run_forever_passes_every_interval_and_survives_a_failing_pass(db: Database) -> None:
    calls: list[float] = []
    stop = asyncio.Event()

    async def fake_sleep(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == 3:
            stop.set()
            await asyncio.Event().wait()  # park until cancelled

    watchdog = Watchdog(db, stall_after_s=300, interval_s=30, sleep=fake_sleep)
    real_run_once = watchdog.run_once
    outcomes: list[str] = []

    async def flaky_run_once() -> list[str]:
        if not outcomes:
            outcomes.append("boom")
            raise RuntimeError("database hiccup")
        outcomes.append("ok")
        return await real_run_once()

    watchdog.run_once = flaky_run_once  # type: ignore[method-assign]
    watchdog.start()
    await stop.wait()
    await watchdog.stop()
    assert calls == [30, 30, 30]
    assert outcomes == ["boom", "ok", "ok"]
    assert watchdog.passes == 2
