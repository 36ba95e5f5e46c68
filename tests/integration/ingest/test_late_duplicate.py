"""A late duplicate upload is recognized from one read of the run's upload position, without the
run row's lock: answered while another transaction holds the row, with the same answer, and the
attempt fence still applies."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from ledger.db import Database
from ledger.errors import InvalidInput, RunTerminal, StaleAttempt
from ledger.ingest.store import apply_status_upload

# Far above a duplicate's few round trips; the run row stays locked for longer than this.
WAIT_S = 20.0


def progress(seq: int) -> dict[str, object]:
    return {
        "status": "running",
        "upload_seq": seq,
        "producer_attempt": 1,
        "live_logs": [f"line {n}" for n in range(1, seq + 1)],
        "live_log_total_count": seq,
        "live_node_progress": {"n": {"started_at": 1, "completed": seq, "total": 10}},
    }


async def test_a_late_duplicate_is_answered_while_the_run_row_is_locked(
    db: Database, clean_database_url: str
) -> None:
    await apply_status_upload(db, "r", progress(1))
    await apply_status_upload(db, "r", progress(2))
    unlocked = await apply_status_upload(db, "r", progress(1))
    with psycopg.connect(clean_database_url) as holder:
        holder.execute("SELECT 1 FROM ledger.runs WHERE run_id = 'r' FOR UPDATE")
        locked = await asyncio.wait_for(apply_status_upload(db, "r", progress(1)), WAIT_S)
        # The heartbeat is a write: it waits for the row like any write (here: until released).
        beat = asyncio.create_task(apply_status_upload(db, "r", {**progress(2), "last_checkpoint_at": 5}))
        holder.rollback()
    assert (await asyncio.wait_for(beat, WAIT_S))["duplicate"] is True
    assert locked == unlocked
    async with db.connection() as conn:
        cur = await conn.execute("SELECT last_seq, last_heartbeat_at FROM ledger.runs WHERE run_id = 'r'")
        row = await cur.fetchone()
    assert row is not None and row["last_heartbeat_at"] is not None
    assert unlocked == {
        "duplicate": True,
        "events_appended": {},
        "steps_changed": [],
        "logs_appended": 0,
        "log_gap": 0,
        "terminal_set": False,
        "last_seq": row["last_seq"],
        "producer_attempt": 1,
        "last_upload_seq": 2,
        "live_log_count": 2,
    }


async def test_an_older_attempts_late_duplicate_is_still_stale(db: Database) -> None:
    await apply_status_upload(db, "r", progress(1))
    await apply_status_upload(db, "r", {**progress(1), "producer_attempt": 2})
    with pytest.raises(StaleAttempt):
        await apply_status_upload(db, "r", {**progress(1), "last_checkpoint_at": 5})
    async with db.connection() as conn:
        row = await (
            await conn.execute("SELECT last_heartbeat_at FROM ledger.runs WHERE run_id = 'r'")
        ).fetchone()
    assert row is not None and row["last_heartbeat_at"] is None


async def events_and_position(db: Database, run_id: str) -> tuple[int, int, int]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM ledger.run_events WHERE run_id = r.run_id), last_upload_seq,"
            " producer_attempt FROM ledger.runs r WHERE run_id = %s",
            (run_id,),
        )
        row = await cur.fetchone()
    assert row is not None
    count, seq, attempt = row.values()
    return int(count), int(seq), int(attempt)


async def test_a_late_duplicate_is_answered_before_its_body_is_validated(db: Database) -> None:
    # The uploader resends an upload's unchanged bytes: an applied (attempt, upload_seq) is a
    # duplicate whatever the rest of the body holds, and nothing of that rest is looked at.
    await apply_status_upload(db, "r", progress(1))
    await apply_status_upload(db, "r", progress(2))
    expected = await apply_status_upload(db, "r", progress(1))
    before = await events_and_position(db, "r")
    garbled = {**progress(1), "status": "sleeping", "live_node_progress": {"n": {"completed": -5}}}
    assert await apply_status_upload(db, "r", garbled) == expected
    assert await events_and_position(db, "r") == before
    # The same body as a first delivery is refused, naming the field, and changes nothing.
    with pytest.raises(InvalidInput) as refused:
        await apply_status_upload(db, "r", {**garbled, "upload_seq": 3})
    assert refused.value.field == "status"
    assert await events_and_position(db, "r") == before


async def test_a_refused_upload_sent_again_is_refused_again_not_a_duplicate(db: Database) -> None:
    await apply_status_upload(db, "r", progress(1))
    bad = {**progress(2), "live_logs": "not a list"}
    for _ in range(2):
        with pytest.raises(InvalidInput) as refused:
            await apply_status_upload(db, "r", bad)
        assert refused.value.field == "live_logs"
    # A run made terminal refuses an upload that would add events; its resend is refused the same.
    await apply_status_upload(db, "t", {**progress(1), "status": "completed"})
    for _ in range(2):
        with pytest.raises(RunTerminal):
            await apply_status_upload(db, "t", progress(2))
    assert (await events_and_position(db, "t"))[1] == 1


async def test_an_older_attempts_resend_of_an_applied_upload_is_stale_not_a_duplicate(db: Database) -> None:
    await apply_status_upload(db, "r", progress(1))
    await apply_status_upload(db, "r", progress(2))
    await apply_status_upload(db, "r", {**progress(1), "producer_attempt": 2})
    before = await events_and_position(db, "r")
    # (attempt 1, upload 1) was applied once; attempt 2 holds the run now.
    with pytest.raises(StaleAttempt):
        await apply_status_upload(db, "r", progress(1))
    assert await events_and_position(db, "r") == before


async def test_a_duplicate_whose_order_fields_are_malformed_is_validated_whole(db: Database) -> None:
    await apply_status_upload(db, "r", progress(2))
    for field, value in (("upload_seq", "1"), ("producer_attempt", 1.5), ("last_checkpoint_at", -1)):
        with pytest.raises(InvalidInput) as refused:
            await apply_status_upload(db, "r", {**progress(1), field: value})
        assert refused.value.field == field
    # A body naming another run is refused even when its (attempt, upload_seq) was applied here.
    with pytest.raises(InvalidInput) as refused:
        await apply_status_upload(db, "r", {**progress(1), "run_id": "elsewhere"})
    assert refused.value.field == "run_id"
