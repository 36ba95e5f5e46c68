"""The watchdog fails stalled runs exactly once, even with several replicas, and nothing else; a
checkpoint upload is a heartbeat; expired run mappings are swept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg.rows import dict_row

from ledger.clock import ManualClock
from ledger.db import Database
from ledger.errors import RunTerminal, StaleAttempt
from ledger.ingest.store import apply_status_upload
from ledger.pool.store import WarmPool
from ledger.runlog.events import WATCHDOG_ERROR
from ledger.runlog.store import RunLog, lock_run
from ledger.runlog.watchdog import Swept, Watchdog

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

    # No retention: its loop (which sleeps too) is not started.
    watchdog = Watchdog(db, stall_after_s=300, interval_s=30, retention=None, sleep=fake_sleep)
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


async def heartbeat_of(db: Database, run_id: str) -> object:
    async with db.connection() as conn:
        cur = await conn.execute("SELECT last_heartbeat_at FROM ledger.runs WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
    assert row is not None
    return row["last_heartbeat_at"]


async def test_an_upload_with_a_checkpoint_is_a_heartbeat_even_when_it_appends_nothing(db: Database) -> None:
    runlog = RunLog(db)
    for run_id in ("alive", "silent"):
        await apply_status_upload(db, run_id, {"status": "running", "upload_seq": 1, "live_logs": ["x"]})
    await backdate(db, ["alive", "silent"], minutes=10)
    assert await heartbeat_of(db, "alive") is None
    # A late duplicate of upload 1: no event, nothing applied - but its producer is alive.
    late = await apply_status_upload(
        db, "alive", {"status": "running", "upload_seq": 1, "last_checkpoint_at": 1_700_000_000_000}
    )
    assert late["duplicate"] is True and late["events_appended"] == {}
    assert await heartbeat_of(db, "alive") is not None
    watchdog = Watchdog(db, runlog, stall_after_s=300)
    assert await watchdog.run_once() == ["silent"]
    assert (await runlog.get_run("alive"))["terminal"] is None
    # A stale attempt's upload proves nothing about the producer the run waits for.
    await apply_status_upload(db, "alive", {"status": "running", "producer_attempt": 2})
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE ledger.runs SET updated_at = now() - interval '10 minutes',"
            " last_heartbeat_at = now() - interval '10 minutes' WHERE run_id = 'alive'"
        )
    with pytest.raises(StaleAttempt):
        await apply_status_upload(
            db, "alive", {"status": "running", "producer_attempt": 1, "last_checkpoint_at": 1}
        )
    assert await watchdog.run_once() == ["alive"]


async def test_the_stall_test_takes_the_later_of_the_last_event_and_the_heartbeat(db: Database) -> None:
    runlog = RunLog(db)
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": "tick"}])
    watchdog = Watchdog(db, runlog, stall_after_s=300)
    async with db.transaction() as conn:
        # An old event and a recent heartbeat: alive.
        await conn.execute(
            "UPDATE ledger.runs SET updated_at = now() - interval '10 minutes',"
            " last_heartbeat_at = now() - interval '1 minute'"
        )
    assert await watchdog.run_once() == []
    async with db.transaction() as conn:
        # A recent event and an old heartbeat: alive too.
        await conn.execute(
            "UPDATE ledger.runs SET updated_at = now() - interval '1 minute',"
            " last_heartbeat_at = now() - interval '10 minutes'"
        )
    assert await watchdog.run_once() == []
    async with db.transaction() as conn:
        await conn.execute("UPDATE ledger.runs SET updated_at = now() - interval '6 minutes'")
    assert await watchdog.run_once() == ["r1"]


async def test_a_late_producer_learns_who_ended_its_run(db: Database) -> None:
    runlog = RunLog(db)
    await runlog.open_run("r1")
    await backdate(db, ["r1"], minutes=10)
    assert await Watchdog(db, runlog).run_once() == ["r1"]
    with pytest.raises(RunTerminal) as appended:
        await runlog.append("r1", [{"type": "log", "line": "I am back"}])
    assert appended.value.terminal["error"] == WATCHDOG_ERROR
    assert appended.value.terminal["status"] == "failed"
    with pytest.raises(RunTerminal) as uploaded:
        await apply_status_upload(db, "r1", {"status": "completed", "upload_seq": 1})
    assert uploaded.value.terminal == appended.value.terminal


async def mapping_ids(db: Database) -> list[str]:
    async with db.connection() as conn:
        cur = await conn.execute("SELECT run_id FROM ledger.run_mappings ORDER BY run_id")
        return [row["run_id"] for row in await cur.fetchall()]


async def test_expired_mappings_are_swept_in_batches_skipping_locked_ones(
    db: Database, clean_database_url: str
) -> None:
    clock = ManualClock(datetime.now(UTC))
    pool = WarmPool(db, clock=clock)
    for index in range(7):
        await pool.map_run(f"old-{index}", f"i1-{index}", "v1")
    clock.advance(pool.settings.mapping_ttl_ms + 1)
    await pool.map_run("fresh", "i2", "v1")
    watchdog = Watchdog(db, clock=clock, sweep_batch_size=3)
    holder = await psycopg.AsyncConnection.connect(clean_database_url)
    async with holder, holder.transaction():
        await holder.execute("SELECT 1 FROM ledger.run_mappings WHERE run_id = 'old-0' FOR UPDATE")
        swept = await watchdog.sweep()
    assert swept.mappings == 6
    assert await mapping_ids(db) == ["fresh", "old-0"]
    assert (await watchdog.sweep()).mappings == 1
    assert await mapping_ids(db) == ["fresh"]
    # The live mapping still resolves; an expired one was already absent before it was swept.
    assert (await pool.resolve_run("fresh", "v1"))["instance_id"] == "i2"


async def test_retention_runs_in_a_loop_of_its_own_beside_the_sweeps(db: Database) -> None:
    # A partition's detach may wait for a reader left open: failing stalled runs, making the
    # partitions ahead and the quick sweeps never wait behind retention.
    passes: list[str] = []
    stuck = asyncio.Event()
    swept = asyncio.Event()

    async def fake_sleep(seconds: float) -> None:
        await asyncio.Event().wait()  # one round each

    watchdog = Watchdog(db, sleep=fake_sleep)
    real_sweep_expired = watchdog.sweep_expired

    async def stuck_retention() -> int:
        passes.append("retention")
        stuck.set()
        await asyncio.Event().wait()  # as a detach waiting for an open reader
        return 0

    async def counted_sweep_expired() -> Swept:
        passes.append("sweep")
        swept.set()
        return await real_sweep_expired()

    watchdog.sweep_runs = stuck_retention  # type: ignore[method-assign]
    watchdog.sweep_expired = counted_sweep_expired  # type: ignore[method-assign]
    watchdog.start()
    await asyncio.wait_for(asyncio.gather(stuck.wait(), swept.wait()), timeout=30)
    await watchdog.stop()
    assert sorted(passes) == ["retention", "sweep"] and watchdog.passes == 1
