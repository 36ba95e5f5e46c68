"""The run log on real Postgres: runs, appends, batches, terminal state, retention, building blocks."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from ledger.db import Database
from ledger.errors import Conflict, CursorExpired, InvalidInput, NotFound
from ledger.runlog.events import WATCHDOG_ERROR
from ledger.runlog.listener import CHANNEL
from ledger.runlog.store import (
    RunLog,
    append_in_transaction,
    lock_run,
    set_terminal_in_transaction,
)


@pytest.fixture
def runlog(db: Database) -> RunLog:
    return RunLog(db)


async def stored_events(db: Database, run_id: str) -> list[dict[str, Any]]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT seq, type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        )
        return list(await cur.fetchall())


async def test_open_run_is_idempotent_and_fills_a_missing_play_name(runlog: RunLog) -> None:
    first = await runlog.open_run("r1")
    assert first["run_id"] == "r1"
    assert first["status"] == "running"
    assert first["last_seq"] == 0
    assert first["terminal"] is None
    assert first["play_name"] is None
    await runlog.append("r1", [{"type": "log", "line": "a"}])
    again = await runlog.open_run("r1", play_name="enrich")
    # Re-opening keeps the log and the creation time, and only fills a play name that was missing.
    assert again["last_seq"] == 1
    assert again["created_at"] == first["created_at"]
    assert again["play_name"] == "enrich"
    assert (await runlog.open_run("r1", play_name="other"))["play_name"] == "enrich"
    assert await runlog.get_run("r1") == {**again, "updated_at": again["updated_at"]}


async def test_unknown_run_is_not_found_everywhere(runlog: RunLog) -> None:
    with pytest.raises(NotFound):
        await runlog.get_run("nope")
    with pytest.raises(NotFound):
        await runlog.append("nope", [{"type": "log", "line": "x"}])
    with pytest.raises(NotFound):
        await runlog.set_terminal("nope", "completed")
    with pytest.raises(NotFound):
        await runlog.get_terminal("nope")
    with pytest.raises(NotFound):
        await runlog.list_events("nope")


async def test_append_assigns_gapless_seqs_and_moves_the_run(runlog: RunLog, db: Database) -> None:
    await runlog.open_run("r1")
    one = await runlog.append("r1", [{"type": "status", "status": "queued"}])
    batch = await runlog.append(
        "r1",
        [
            {"type": "log", "line": "hello"},
            {"type": "progress", "status": "mapping", "active_node_id": "n1", "updated_at": 5},
            {"type": "step.started", "nodeId": "n1", "detail": {"a": [1, 2]}},
            {"type": "log.gap", "missing": 3},
        ],
    )
    assert [e["seq"] for e in one + batch] == [1, 2, 3, 4, 5]
    assert batch[0] == {"seq": 2, "type": "log", "ts": batch[0]["ts"], "line": "hello"}
    assert len({e["ts"] for e in batch}) == 1  # one transaction, one time
    assert batch[0]["ts"] >= one[0]["ts"]
    run = await runlog.get_run("r1")
    assert run["last_seq"] == 5
    assert run["status"] == "mapping"  # the last status-bearing event wins
    assert run["updated_at"] == batch[0]["ts"]
    rows = await stored_events(db, "r1")
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[3]["payload"] == {"nodeId": "n1", "detail": {"a": [1, 2]}}
    listed = await runlog.list_events("r1")
    assert listed["events"] == one + batch


async def test_a_bad_event_rejects_the_whole_batch(runlog: RunLog, db: Database) -> None:
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": "kept"}])
    bad_batches: list[tuple[list[Any], str]] = [
        ([{"type": "log", "line": "a"}, {"type": "log", "line": 7}], "events[1].line"),
        ([{"type": "log", "line": "a"}, {"type": "nope"}], "events[1].type"),
        ([{"type": "log.gap", "missing": 0}], "events[0].missing"),
        ([{"type": "log", "line": "a", "seq": 9}], "events[0].seq"),
        ([{"type": "status", "status": "completed"}], "events[0].status"),
        ([{"type": "terminal", "status": "failed"}, {"type": "log", "line": "late"}], "events[0]"),
        ([{"type": "step.progress", "bad": float("nan")}], "events[0]"),
        ([], "events"),
    ]
    for batch, field in bad_batches:
        with pytest.raises(InvalidInput) as info:
            await runlog.append("r1", batch)
        assert info.value.field == field
    # Also when the building block is used directly: nothing written, the row stays put.
    async with db.transaction() as conn:
        run = await lock_run(conn, "r1")
        with pytest.raises(InvalidInput):
            await append_in_transaction(
                conn, run, [{"type": "log", "line": "a"}, {"type": "x"}], max_events_per_run=0
            )
        assert run["last_seq"] == 1
    assert [r["seq"] for r in await stored_events(db, "r1")] == [1]
    assert (await runlog.get_run("r1"))["last_seq"] == 1
    assert (await runlog.append("r1", [{"type": "log", "line": "next"}]))[0]["seq"] == 2


async def test_building_blocks_continue_the_sequence_and_notify_once(
    db: Database, clean_database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(clean_database_url, autocommit=True) as listen:
        await listen.execute(f"LISTEN {CHANNEL}")
        async with db.transaction() as conn:
            run = await lock_run(conn, "r1", create=True, play_name="p")
            assert run["last_seq"] == 0 and run["play_name"] == "p"
            first = await append_in_transaction(
                conn, run, [{"type": "log", "line": "a"}, {"type": "log", "line": "b"}], max_events_per_run=0
            )
            second = await append_in_transaction(
                conn, run, [{"type": "status", "status": "running"}], max_events_per_run=0
            )
            state, newly = await set_terminal_in_transaction(
                conn, run, {"status": "completed", "total_rows": 3}, max_events_per_run=0
            )
        assert [e["seq"] for e in first + second] == [1, 2, 3]
        assert newly and state["status"] == "completed" and state["total_rows"] == 3
        assert run["last_seq"] == 4
        # The commit delivers exactly one notification for the whole transaction.
        notes = [n async for n in listen.notifies(timeout=0.5)]
    assert len(notes) == 1
    assert notes[0].channel == CHANNEL
    assert '"run_id":"r1"' in notes[0].payload
    async with db.connection() as conn:
        cur = await conn.execute("SELECT last_seq, terminal_status FROM ledger.runs WHERE run_id = 'r1'")
        assert await cur.fetchone() == {"last_seq": 4, "terminal_status": "completed"}


async def test_lock_run_without_create_is_not_found(db: Database) -> None:
    async with db.transaction() as conn:
        with pytest.raises(NotFound):
            await lock_run(conn, "ghost")
    with pytest.raises(InvalidInput):
        async with db.transaction() as conn:
            await lock_run(conn, "", create=True)


async def test_first_terminal_wins(runlog: RunLog, db: Database) -> None:
    await runlog.open_run("r1", play_name="p")
    await runlog.append("r1", [{"type": "log", "line": "working"}])
    state = await runlog.set_terminal("r1", "completed", result={"rows": 2}, total_rows=2, duration_ms=40)
    assert state["status"] == "completed" and state["result"] == {"rows": 2}
    assert state["play_name"] is None and isinstance(state["completed_at"], int)
    # The same again (all or fewer fields) is a no-op with no second event.
    assert await runlog.set_terminal("r1", "completed", result={"rows": 2}, total_rows=2) == state
    assert await runlog.set_terminal("r1", "completed") == state
    # A different one is refused, and so is any more event.
    with pytest.raises(Conflict):
        await runlog.set_terminal("r1", "failed", error="boom")
    with pytest.raises(Conflict):
        await runlog.set_terminal("r1", "completed", total_rows=3)
    with pytest.raises(Conflict):
        await runlog.append("r1", [{"type": "log", "line": "after the end"}])
    with pytest.raises(Conflict):
        await runlog.append("r1", [{"type": "terminal", "status": "completed"}])
    rows = await stored_events(db, "r1")
    assert [r["type"] for r in rows] == ["log", "terminal"]
    assert rows[1]["payload"] == {
        "status": "completed",
        "result": {"rows": 2},
        "error": None,
        "total_rows": 2,
        "duration_ms": 40,
        "play_name": None,
    }
    run = await runlog.get_run("r1")
    assert run["status"] == "completed" and run["last_seq"] == 2
    assert run["terminal"] == state == await runlog.get_terminal("r1")
    assert run["terminal"]["completed_at"] == run["updated_at"]
    page = await runlog.list_events("r1")
    assert page["terminal"] == state
    assert page["events"][-1]["ts"] == state["completed_at"]


async def test_terminal_event_in_a_batch_sets_the_terminal_state(runlog: RunLog, db: Database) -> None:
    await runlog.open_run("r1")
    events = await runlog.append(
        "r1", [{"type": "log", "line": "last words"}, {"type": "terminal", "status": "failed", "error": "x"}]
    )
    assert [e["type"] for e in events] == ["log", "terminal"]
    terminal = await runlog.get_terminal("r1")
    assert terminal is not None and terminal["status"] == "failed" and terminal["error"] == "x"
    assert (await runlog.get_run("r1"))["status"] == "failed"
    async with db.connection() as conn:
        cur = await conn.execute("SELECT terminal_result IS NULL AS no_result FROM ledger.runs")
        assert await cur.fetchone() == {"no_result": True}  # SQL NULL, not a JSON null
    assert await runlog.set_terminal("r1", "failed", error="x") == terminal
    with pytest.raises(Conflict) as info:
        await runlog.set_terminal("r1", "failed", error=WATCHDOG_ERROR)
    assert "already ended failed" in info.value.message


async def test_bad_terminal_state_is_refused_and_writes_nothing(runlog: RunLog) -> None:
    await runlog.open_run("r1")
    for kwargs, field in [
        ({"status": "done"}, "status"),
        ({"status": "completed", "total_rows": -1}, "total_rows"),
        ({"status": "completed", "duration_ms": True}, "duration_ms"),
        ({"status": "failed", "error": 5}, "error"),
    ]:
        with pytest.raises(InvalidInput) as info:
            await runlog.set_terminal("r1", **kwargs)
        assert info.value.field == field
    run = await runlog.get_run("r1")
    assert run["terminal"] is None and run["last_seq"] == 0


async def test_retention_trims_oldest_never_the_terminal_event(db: Database) -> None:
    runlog = RunLog(db, max_events_per_run=5)
    await runlog.open_run("r1")
    for i in range(8):
        await runlog.append("r1", [{"type": "log", "line": f"l{i}"}])
    page = await runlog.list_events("r1")
    assert [e["seq"] for e in page["events"]] == [4, 5, 6, 7, 8]
    assert page["first_seq"] == 4 and page["latest_seq"] == 8
    # A batch bigger than the limit trims itself too.
    await runlog.append("r1", [{"type": "log", "line": f"b{i}"} for i in range(7)])
    page = await runlog.list_events("r1")
    assert [e["seq"] for e in page["events"]] == [11, 12, 13, 14, 15]
    assert page["first_seq"] == 11
    # Cursors: just before first_seq is fine, anything older is refused with where to resume.
    assert [e["seq"] for e in (await runlog.list_events("r1", after=10))["events"]] == [11, 12, 13, 14, 15]
    for stale in (0, 9):
        with pytest.raises(CursorExpired) as info:
            await runlog.list_events("r1", after=stale)
        assert info.value.first_seq == 11
    # The terminal event survives even the tightest retention.
    tight = RunLog(db, max_events_per_run=1)
    await tight.append("r1", [{"type": "log", "line": "x"}, {"type": "log", "line": "y"}])
    await tight.set_terminal("r1", "completed")
    page = await tight.list_events("r1")
    assert [(e["seq"], e["type"]) for e in page["events"]] == [(18, "terminal")]
    assert page["first_seq"] == 18


async def test_unlimited_retention_keeps_everything(db: Database) -> None:
    runlog = RunLog(db, max_events_per_run=0)
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": str(i)} for i in range(50)])
    await runlog.append("r1", [{"type": "log", "line": "more"}])
    page = await runlog.list_events("r1", limit=100)
    assert page["first_seq"] == 1 and len(page["events"]) == 51


async def test_list_pages_and_cursors(runlog: RunLog) -> None:
    await runlog.open_run("r1")
    empty = await runlog.list_events("r1")
    assert empty == {"events": [], "latest_seq": 0, "first_seq": 1, "terminal": None}
    await runlog.append("r1", [{"type": "log", "line": str(i)} for i in range(10)])
    page = await runlog.list_events("r1", after=-1, limit=4)
    assert [e["seq"] for e in page["events"]] == [1, 2, 3, 4]
    assert page["latest_seq"] == 10
    page = await runlog.list_events("r1", after="4", limit=4)
    assert [e["seq"] for e in page["events"]] == [5, 6, 7, 8]
    assert (await runlog.list_events("r1", after="now"))["events"] == []
    # A cursor past the end simply has nothing yet.
    assert (await runlog.list_events("r1", after=99))["events"] == []
    for bad in ({"after": -2}, {"after": "x"}, {"limit": 0}, {"timeout_ms": "5"}):
        with pytest.raises(InvalidInput):
            await runlog.list_events("r1", **bad)
