"""The append in one round trip (`ledger.append_events_v3`): every rule it carries, on real Postgres.

Each test pins one rule the function took over from separate statements: gapless seqs under
concurrent one-call appends, refusing a terminal run, first terminal wins, retention sparing the
terminal event, one NOTIFY per transaction, nothing delivered for a rolled-back append, the
injected clock. Retention is pinned twice: what a reader is shown (exactly the newest events, from
the watermark up) and what is stored (the rows below the watermark deleted by whole chunks).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from ledger.clock import ManualClock, to_ms
from ledger.db import Database
from ledger.errors import CursorExpired, NotFound, RunTerminal
from ledger.runlog.events import notify_payload, parse_notify_payload
from ledger.runlog.listener import CHANNEL
from ledger.runlog.store import RunLog, append_in_transaction, lock_run, set_terminal_in_transaction

WRITERS = 8
APPENDS_EACH = 200
# Seqs per chunk the trim deletes at once (`trim_chunk` in `ledger/sql/append_events_v3.sql`).
TRIM_CHUNK = 1000


class RollBack(Exception):
    pass


async def stored(db: Database, run_id: str) -> list[tuple[int, str]]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT seq, type FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        )
        return [(int(r["seq"]), str(r["type"])) for r in await cur.fetchall()]


async def logged(db: Database, run_id: str) -> list[tuple[int, str]]:
    """The run's events as a person querying the log by hand reads them (`ledger.event_log`)."""
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT seq, type FROM ledger.event_log WHERE run_id = %s ORDER BY seq", (run_id,)
        )
        return [(int(r["seq"]), str(r["type"])) for r in await cur.fetchall()]


async def shown(runlog: RunLog, run_id: str) -> list[tuple[int, str]]:
    """Every event a reader reading from the start is given (page by page)."""
    page = await runlog.list_events(run_id, -1, limit=1000)
    events = list(page["events"])
    while events and events[-1]["seq"] < page["latest_seq"]:
        page = await runlog.list_events(run_id, events[-1]["seq"], limit=1000)
        events += page["events"]
    return [(int(e["seq"]), str(e["type"])) for e in events]


async def notes_after(listen: psycopg.AsyncConnection[Any]) -> list[str]:
    """Notification payloads delivered to `listen` so far (a short wait for any in flight)."""
    return [n.payload async for n in listen.notifies(timeout=0.5)]


@pytest.fixture
async def listen(clean_database_url: str) -> Any:
    async with await psycopg.AsyncConnection.connect(clean_database_url, autocommit=True) as conn:
        await conn.execute(f"LISTEN {CHANNEL}")
        yield conn


async def test_concurrent_one_call_appends_to_one_run_get_exactly_1_to_n(db: Database) -> None:
    runlog = RunLog(db, max_events_per_run=0)
    await runlog.open_run("hot")

    async def writer(index: int) -> list[int]:
        seqs = []
        for i in range(APPENDS_EACH):
            [event] = await runlog.append("hot", [{"type": "log", "line": f"{index}:{i}"}])
            seqs.append(event["seq"])
        return seqs

    results = await asyncio.gather(*(writer(index) for index in range(WRITERS)))
    total = WRITERS * APPENDS_EACH
    assert sorted(seq for seqs in results for seq in seqs) == list(range(1, total + 1))
    assert all(seqs == sorted(seqs) for seqs in results)
    assert [seq for seq, _ in await stored(db, "hot")] == list(range(1, total + 1))
    assert (await runlog.get_run("hot"))["last_seq"] == total
    # Timestamps are ordered like seqs: each append reads the clock once the run is its own.
    times = await stamped(db, "hot")
    assert times == sorted(times)


async def stamped(db: Database, run_id: str) -> list[datetime]:
    """The run's event timestamps in seq order."""
    async with db.connection() as conn:
        cur = await conn.execute("SELECT ts FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,))
        return [row["ts"] for row in await cur.fetchall()]


async def test_an_append_that_waited_for_the_run_reads_the_clock_after_the_wait(
    db: Database, clean_database_url: str
) -> None:
    # The append takes the run's lock with its UPDATE, which reads the clock too: the reading must be
    # the one made once the wait is over (Postgres evaluates the SET list again on the row version
    # it waited for), or the waiter's event would be stamped before the one it follows.
    runlog = RunLog(db, max_events_per_run=0)
    await runlog.open_run("r1")
    async with await psycopg.AsyncConnection.connect(clean_database_url) as holder:
        pid = holder.info.backend_pid
        await holder.execute("SELECT * FROM ledger.runs WHERE run_id = 'r1' FOR UPDATE")
        waiting = asyncio.create_task(runlog.append("r1", [{"type": "log", "line": "waited"}]))
        await blocked_behind(clean_database_url, pid)
        await holder.execute(
            'SELECT * FROM ledger.append_events_v3(\'r1\', \'[["log", {"line": "first"}]]\'::jsonb,'
            " NULL, 0, NULL, %s, false, NULL)",
            (CHANNEL,),
        )
        cur = await holder.execute("SELECT clock_timestamp()")
        before_commit = await cur.fetchone()
        assert before_commit is not None
        await holder.commit()
        [event] = await waiting
    assert event["seq"] == 2
    first, second = await stamped(db, "r1")
    assert first < before_commit[0] <= second


async def blocked_behind(url: str, pid: int) -> None:
    """Wait until some session waits for a lock the session `pid` holds."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher:
        while True:
            cur = await watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
            )
            found = await cur.fetchone()
            if found is not None and found[0] > 0:
                return
            await asyncio.sleep(0.01)


async def test_an_append_to_a_terminal_run_is_refused_with_the_stored_state_and_writes_nothing(
    db: Database, listen: psycopg.AsyncConnection[Any]
) -> None:
    runlog = RunLog(db)
    await runlog.open_run("r1")
    ended = await runlog.set_terminal("r1", "failed", error="boom", total_rows=4)
    assert len(await notes_after(listen)) == 1
    with pytest.raises(RunTerminal) as info:
        await runlog.append("r1", [{"type": "log", "line": "too late"}])
    assert info.value.run_id == "r1" and info.value.terminal == ended
    assert "failed: boom" in info.value.message
    # The same through the building block, inside the caller's transaction.
    async with db.transaction() as conn:
        run = await lock_run(conn, "r1")
        with pytest.raises(RunTerminal) as info:
            await append_in_transaction(conn, run, [{"type": "log", "line": "late"}], max_events_per_run=0)
        assert info.value.terminal == ended
    assert await stored(db, "r1") == [(1, "terminal")]
    assert (await runlog.get_run("r1"))["last_seq"] == 1
    assert await notes_after(listen) == []  # a refused append notifies nobody


async def test_first_terminal_wins_within_one_transaction_and_across_calls(db: Database) -> None:
    async with db.transaction() as conn:
        run = await lock_run(conn, "r1", create=True)
        [*_, last] = await append_in_transaction(
            conn,
            run,
            [{"type": "log", "line": "x"}, {"type": "terminal", "status": "cancelled"}],
            max_events_per_run=0,
        )
        assert last["type"] == "terminal" and run["terminal_status"] == "cancelled"
        state, newly = await set_terminal_in_transaction(
            conn, run, {"status": "cancelled"}, max_events_per_run=0
        )
        assert not newly and state["status"] == "cancelled"
        with pytest.raises(RunTerminal):
            await set_terminal_in_transaction(conn, run, {"status": "completed"}, max_events_per_run=0)
    runlog = RunLog(db)
    with pytest.raises(RunTerminal) as info:
        await runlog.set_terminal("r1", "failed", error="later")
    assert info.value.terminal["status"] == "cancelled"
    assert (await runlog.set_terminal("r1", "cancelled"))["status"] == "cancelled"
    assert await stored(db, "r1") == [(1, "log"), (2, "terminal")]
    run_now = await runlog.get_run("r1")
    assert run_now["status"] == "cancelled" and run_now["last_seq"] == 2


async def test_a_batch_past_retention_trims_itself_but_keeps_its_terminal_event(db: Database) -> None:
    runlog = RunLog(db, max_events_per_run=2)
    await runlog.open_run("r1", play_name=None)
    events = [{"type": "log", "line": str(i)} for i in range(5)]
    await runlog.append("r1", [*events, {"type": "terminal", "status": "completed", "play_name": "p"}])
    assert await shown(runlog, "r1") == [(5, "log"), (6, "terminal")]
    run = await runlog.get_run("r1")
    assert run["play_name"] == "p"  # a terminal state's play name fills a missing one
    # A tighter limit later (retention configured down): refused, nothing trimmed either.
    async with db.transaction() as conn:
        await conn.execute(
            "SELECT * FROM ledger.append_events_v3('r1', '[]'::jsonb, NULL, 1, NULL, %s, false, NULL)",
            (CHANNEL,),
        )
    assert await shown(runlog, "r1") == [(5, "log"), (6, "terminal")]
    assert await trimmed_through(db, "r1") == 4


async def test_the_chunk_delete_never_takes_the_terminal_event(db: Database) -> None:
    # The terminal event is the last of its run, so no cutoff reaches it; the delete spares it even
    # below one (a run ended, then let go on by hand), over a whole chunk.
    runlog = RunLog(db, max_events_per_run=2)
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": "a"}, {"type": "terminal", "status": "completed"}])
    async with db.connection() as conn:
        await conn.execute("UPDATE ledger.runs SET terminal_status = NULL, completed_at = NULL")
        await conn.execute(
            "SELECT * FROM ledger.append_events_v3('r1', %s::jsonb, NULL, 1, NULL, %s, false, NULL)",
            (json.dumps([["log", {"line": str(i)}] for i in range(TRIM_CHUNK)]), CHANNEL),
        )
    assert await trimmed_through(db, "r1") == TRIM_CHUNK + 1
    # Seqs 1 to 1,000 are a whole chunk below the watermark: all deleted but the terminal event.
    assert await stored(db, "r1") == [(2, "terminal"), (TRIM_CHUNK + 1, "log"), (TRIM_CHUNK + 2, "log")]
    # Readers and the view start above the watermark alike.
    assert await shown(runlog, "r1") == await logged(db, "r1") == [(TRIM_CHUNK + 2, "log")]


async def trimmed_through(db: Database, run_id: str) -> int:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT events_trimmed_through FROM ledger.runs WHERE run_id = %s", (run_id,)
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row["events_trimmed_through"])


def seqs(events: list[tuple[int, str]]) -> list[int]:
    return [seq for seq, _ in events]


async def test_retention_trims_from_its_watermark_and_reads_start_above_it(db: Database) -> None:
    # The trim remembers the seq it reached, so later trims and reads never walk what it removed;
    # the events a reader is shown and the first seq it is told are those of the plain rule.
    runlog = RunLog(db, max_events_per_run=3)
    await runlog.open_run("r1")
    assert await trimmed_through(db, "r1") == 0
    await runlog.append("r1", [{"type": "log", "line": str(i)} for i in range(2)])
    assert await trimmed_through(db, "r1") == 0  # one below the limit
    await runlog.append("r1", [{"type": "log", "line": "3"}])
    assert await trimmed_through(db, "r1") == 0  # at the limit: nothing trimmed
    assert seqs(await shown(runlog, "r1")) == [1, 2, 3]
    await runlog.append("r1", [{"type": "log", "line": "4"}])
    assert await trimmed_through(db, "r1") == 1  # one past it
    assert seqs(await shown(runlog, "r1")) == [2, 3, 4]
    await runlog.append("r1", [{"type": "log", "line": str(i)} for i in range(5, 11)])
    assert await trimmed_through(db, "r1") == 7
    page = await runlog.list_events("r1")
    assert page["first_seq"] == 8 and seqs(await shown(runlog, "r1")) == [8, 9, 10]
    # A row put back by hand below the watermark is not an event: no reader is given it.
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, payload)"
            " SELECT run_id, 5, created_at, 'log', '{}' FROM ledger.runs WHERE run_id = 'r1'"
            " ON CONFLICT DO NOTHING"
        )
    assert seqs(await shown(runlog, "r1")) == [8, 9, 10]
    # Retention raised later: the watermark stays, nothing comes back and nothing more goes.
    raised = RunLog(db, max_events_per_run=100)
    await raised.append("r1", [{"type": "log", "line": "11"}])
    assert await trimmed_through(db, "r1") == 7
    assert (await raised.list_events("r1", 7))["first_seq"] == 8
    assert seqs(await shown(runlog, "r1")) == [8, 9, 10, 11]
    await runlog.append("r1", [{"type": "log", "line": "12"}, {"type": "terminal", "status": "completed"}])
    assert await trimmed_through(db, "r1") == 10
    assert await shown(runlog, "r1") == [(11, "log"), (12, "log"), (13, "terminal")]


async def assert_shows_its_newest(runlog: RunLog, run_id: str, cap: int) -> None:
    """What a reader is told and given: the newest `cap` events, gapless, from `first_seq`; a cursor
    just below the oldest is fine, one older is refused (410) with where to resume."""
    latest = (await runlog.get_run(run_id))["last_seq"]
    first = max(1, latest - cap + 1)
    page = await runlog.list_events(run_id, -1, limit=cap)
    assert page["first_seq"] == first
    assert [e["seq"] for e in page["events"]] == list(range(first, latest + 1))
    # The view people query tells the same story, whatever rows still wait for their chunk's delete.
    assert seqs(await logged(runlog.db, run_id)) == list(range(first, latest + 1))
    assert [e["seq"] for e in (await runlog.list_events(run_id, first - 1, limit=1))["events"]] == [first]
    if first > 1:
        with pytest.raises(CursorExpired) as expired:
            await runlog.list_events(run_id, first - 2)
        assert expired.value.first_seq == first


async def test_a_run_at_its_cap_deletes_by_whole_chunks_not_on_every_append(db: Database) -> None:
    # Each append moves the watermark (readers see exactly the newest events), while the rows below
    # it are deleted only once a whole chunk of seqs lies there: at the watermark one short of a
    # chunk, at it, one past it.
    runlog = RunLog(db, max_events_per_run=10)
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": str(i)} for i in range(TRIM_CHUNK + 9)])
    assert await trimmed_through(db, "r1") == TRIM_CHUNK - 1
    assert seqs(await stored(db, "r1")) == list(range(1, TRIM_CHUNK + 10))  # nothing deleted yet
    await assert_shows_its_newest(runlog, "r1", 10)
    await runlog.append("r1", [{"type": "log", "line": "chunk"}])
    assert await trimmed_through(db, "r1") == TRIM_CHUNK
    assert seqs(await stored(db, "r1")) == list(range(TRIM_CHUNK + 1, TRIM_CHUNK + 11))  # one range
    await assert_shows_its_newest(runlog, "r1", 10)
    await runlog.append("r1", [{"type": "log", "line": "past"}])
    assert await trimmed_through(db, "r1") == TRIM_CHUNK + 1
    assert seqs(await stored(db, "r1")) == list(range(TRIM_CHUNK + 1, TRIM_CHUNK + 12))
    await assert_shows_its_newest(runlog, "r1", 10)


@pytest.mark.parametrize("events", [4, 5, 6, 2 * TRIM_CHUNK + 500])
async def test_a_batch_at_and_past_the_cap_shows_its_newest_events_and_stores_less_than_a_chunk_more(
    db: Database, events: int
) -> None:
    runlog = RunLog(db, max_events_per_run=5)
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": f"line {i + 1}"} for i in range(events)])
    await assert_shows_its_newest(runlog, "r1", 5)
    kept = list(range(max(1, events - 4), events + 1))
    assert await runlog.recent_log_lines("r1", 10) == [f"line {seq}" for seq in kept]
    trimmed = max(0, events - 5)
    assert seqs(await stored(db, "r1")) == list(range(trimmed - trimmed % TRIM_CHUNK + 1, events + 1))


async def test_concurrent_appenders_at_the_cap_show_readers_their_newest_events_across_chunks(
    db: Database,
) -> None:
    # Eight appenders on their own connections push one run past its cap and across a chunk while a
    # reader reads from the start: every page it gets is the newest events, gapless, from its
    # first_seq, never a row below the watermark.
    cap, appends_each = 50, 150
    runlog = RunLog(db, max_events_per_run=cap)
    await runlog.open_run("hot")
    done = asyncio.Event()
    pages: list[tuple[int, int, list[int]]] = []

    async def writer(index: int) -> None:
        for i in range(appends_each):
            await runlog.append("hot", [{"type": "log", "line": f"{index}:{i}"}])

    async def reader() -> None:
        while not done.is_set():
            page = await runlog.list_events("hot", -1, limit=1000)
            pages.append((page["first_seq"], page["latest_seq"], [e["seq"] for e in page["events"]]))

    reading = asyncio.create_task(reader())
    await asyncio.gather(*(writer(i) for i in range(WRITERS)))
    done.set()
    await reading
    total = WRITERS * appends_each
    assert pages and total - cap > TRIM_CHUNK
    for first, latest, page in pages:
        assert first == max(1, latest - cap + 1) and page == list(range(first, latest + 1))
    await assert_shows_its_newest(runlog, "hot", cap)
    assert await trimmed_through(db, "hot") == total - cap
    assert seqs(await stored(db, "hot")) == list(range(TRIM_CHUNK + 1, total + 1))


async def test_one_notification_per_transaction_with_the_run_and_seq_it_reached(
    db: Database, listen: psycopg.AsyncConnection[Any]
) -> None:
    runlog = RunLog(db)
    odd = 'run "quoted" \\ été'
    for run_id in ("r1", odd):
        await runlog.open_run(run_id)
    await runlog.append("r1", [{"type": "log", "line": "a"}, {"type": "log", "line": "b"}])
    assert await notes_after(listen) == [notify_payload("r1", 2)]
    await runlog.append(odd, [{"type": "log", "line": "a"}])
    [payload] = await notes_after(listen)
    assert parse_notify_payload(payload) == (odd, 1)
    # The ingestion's shape: two appends and a terminal state in one transaction, one NOTIFY.
    async with db.transaction() as conn:
        run = await lock_run(conn, "r1")
        await append_in_transaction(conn, run, [{"type": "log", "line": "c"}], max_events_per_run=0)
        await append_in_transaction(conn, run, [{"type": "status", "status": "x"}], max_events_per_run=0)
        await set_terminal_in_transaction(conn, run, {"status": "completed"}, max_events_per_run=0)
    assert await notes_after(listen) == [notify_payload("r1", 3)]
    assert (await runlog.get_run("r1"))["last_seq"] == 5


async def test_a_rolled_back_append_delivers_nothing_and_leaves_nothing(
    db: Database, listen: psycopg.AsyncConnection[Any]
) -> None:
    runlog = RunLog(db)
    await runlog.open_run("r1")
    with pytest.raises(RollBack):
        async with db.transaction() as conn:
            run = await lock_run(conn, "r1")
            await append_in_transaction(conn, run, [{"type": "log", "line": "ghost"}], max_events_per_run=0)
            raise RollBack
    # The one-call append inside a shared transaction (an Idempotency-Key request) that fails later.
    with pytest.raises(RollBack):
        async with db.shared_transaction():
            await runlog.append("r1", [{"type": "log", "line": "ghost too"}])
            raise RollBack
    assert await notes_after(listen) == []
    assert await stored(db, "r1") == []
    assert (await runlog.get_run("r1"))["last_seq"] == 0
    # And a committed shared transaction does deliver it.
    async with db.shared_transaction():
        await runlog.append("r1", [{"type": "log", "line": "real"}])
    assert await notes_after(listen) == [notify_payload("r1", 1)]


async def test_the_injected_clock_times_events_the_run_and_its_end(db: Database) -> None:
    clock = ManualClock(datetime(2030, 5, 1, 12, 0, tzinfo=UTC))
    runlog = RunLog(db, clock=clock)
    await runlog.open_run("r1")
    [event] = await runlog.append("r1", [{"type": "log", "line": "a"}])
    assert event["ts"] == to_ms(clock.current)
    clock.advance(1500)
    state = await runlog.set_terminal("r1", "completed")
    assert state["completed_at"] == to_ms(clock.current)
    run = await runlog.get_run("r1")
    assert run["updated_at"] == to_ms(clock.current)


async def test_an_unknown_run_is_not_found_and_gets_nothing(db: Database) -> None:
    runlog = RunLog(db)
    with pytest.raises(NotFound):
        await runlog.append("ghost", [{"type": "log", "line": "a"}])
    with pytest.raises(NotFound):
        await runlog.set_terminal("ghost", "completed")
    async with db.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM ledger.runs")
        assert await cur.fetchone() == {"n": 0}


async def test_payloads_orjson_refuses_are_stored_exactly_too(db: Database) -> None:
    runlog = RunLog(db)
    await runlog.open_run("r1")
    big = 2**70
    [event] = await runlog.append("r1", [{"type": "step.progress", "nodeId": "n", "rows": big}])
    assert event == {"seq": 1, "type": "step.progress", "ts": event["ts"], "nodeId": "n", "rows": big}
    state = await runlog.set_terminal("r1", "completed", result={"total": big, "by_id": {7: "x"}})
    assert state["result"] == {"total": big, "by_id": {"7": "x"}}
    first, last = (await runlog.list_events("r1"))["events"]
    assert first == event
    fields = {key: value for key, value in state.items() if key != "completed_at"}
    assert last == {"seq": 2, "type": "terminal", "ts": state["completed_at"], **fields}
