"""A late duplicate upload is recognized from one read of the run's upload position, without the
run row's lock: answered while another transaction holds the row, with the same answer, and the
attempt fence still applies."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from ledger.db import Database
from ledger.errors import StaleAttempt
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
