"""Out-of-range and unstorable input through the database modules: `InvalidInput` naming the field,
and not one row changed. Before, each of these reached Postgres (int4/bigint overflow, NUL, bad
UTF-8) or raised OverflowError, and only the service's backstop turned it into a 422."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ledger.clock import ManualClock
from ledger.db import Database
from ledger.errors import InvalidInput
from ledger.ingest.observations import list_observations, record_observations
from ledger.ingest.sheets import record_sheet_rows, sheet_outcomes
from ledger.ingest.store import apply_status_upload
from ledger.pool.store import WarmPool
from ledger.runlog.store import RunLog
from ledger.validate import INT32_MAX, INT64_MAX, MAX_EPOCH_MS

HUGE = 10**30
TABLES = ("runs", "run_events", "sheet_rows", "node_observations", "pool_entries", "run_mappings")


async def snapshot(db: Database) -> dict[str, list[dict[str, Any]]]:
    tables: dict[str, list[dict[str, Any]]] = {}
    async with db.connection() as conn:
        for table in TABLES:
            cur = await conn.execute(f"SELECT * FROM ledger.{table}")
            tables[table] = sorted(await cur.fetchall(), key=repr)
    return tables


async def refused(db: Database, field: str, call: Awaitable[object]) -> None:
    before = await snapshot(db)
    with pytest.raises(InvalidInput) as info:
        await call
    assert info.value.field == field
    assert await snapshot(db) == before


@pytest.fixture
async def populated(db: Database) -> Database:
    """A run with an event, a sheet row, an observation and pool rows: something to leave alone."""
    runlog = RunLog(db)
    await runlog.open_run("r1")
    await runlog.append("r1", [{"type": "log", "line": "kept"}])
    await record_sheet_rows(db, "r1", [{"table_namespace": "t", "row_key": "k", "status": "completed"}])
    await record_observations(db, "r1", [{"node_id": "n", "attempt": 1, "status": "started"}])
    pool = WarmPool(db, clock=ManualClock())
    await pool.add("default", "v1", ["i1"], ready=True)
    # Another instance: one in a pool is handed to a run only by a claim.
    await pool.map_run("r1", "i0", "v1")
    return db


async def test_terminal_counts_beyond_bigint(populated: Database) -> None:
    runlog = RunLog(populated)
    terminal = {"type": "terminal", "status": "completed", "total_rows": INT64_MAX + 1}
    await refused(
        populated, "events[1].total_rows", runlog.append("r1", [{"type": "log", "line": "x"}, terminal])
    )
    await refused(populated, "duration_ms", runlog.set_terminal("r1", "completed", duration_ms=HUGE))
    await refused(populated, "total_rows", runlog.set_terminal("r1", "failed", total_rows=INT64_MAX + 1))
    # The bound itself is stored and read back.
    state = await runlog.set_terminal("r1", "completed", total_rows=INT64_MAX, duration_ms=INT64_MAX)
    assert (state["total_rows"], state["duration_ms"]) == (INT64_MAX, INT64_MAX)


async def test_run_log_refuses_a_nul_run_id_on_reads_and_a_nul_play_name(populated: Database) -> None:
    runlog = RunLog(populated)
    await refused(populated, "play_name", runlog.open_run("r2", play_name="p\x00"))
    await refused(populated, "play_name", runlog.open_run("r1", play_name="\ud800"))
    await refused(populated, "run_id", runlog.get_run("r1\x00"))
    await refused(populated, "run_id", runlog.get_terminal("\x00"))
    await refused(populated, "run_id", runlog.list_events("r\x00", after=-1))
    await refused(populated, "run_id", runlog.list_events("r\ud800", after=-1))
    await refused(populated, "after", runlog.list_events("r1", after=INT64_MAX + 1))


async def test_observation_numbers_beyond_int4_and_times_beyond_datetime(populated: Database) -> None:
    def batch(**fields: Any) -> list[dict[str, Any]]:
        # A good observation first: the bad one must reject the whole batch.
        good = {"node_id": "m", "attempt": 1, "status": "completed"}
        return [good, {"node_id": "n", "attempt": 2, "status": "completed", **fields}]

    cases: list[tuple[str, list[dict[str, Any]]]] = [
        ("observations[1].attempt", batch(attempt=INT32_MAX + 1)),
        ("observations[1].invocation_seq", batch(invocation_seq=HUGE)),
        ("observations[1].invocation_id", batch(invocation_id=f"n:2:{INT32_MAX + 1}")),
        ("observations[1].started_at", batch(started_at=HUGE)),
        ("observations[1].settled_at", batch(settled_at=float(MAX_EPOCH_MS + 1000))),
        ("observations[1].outputs", batch(outputs={"x": "\ud800"})),
    ]
    for field, observations in cases:
        await refused(populated, field, record_observations(populated, "r1", observations))
        await refused(populated, field, record_observations(populated, "new-run", observations))
    assert len(await list_observations(populated, "r1")) == 1


async def test_sheet_rows_that_are_not_valid_utf8(populated: Database) -> None:
    rows = [
        {"table_namespace": "t", "row_key": "k2", "status": "completed"},
        {"table_namespace": "t", "row_key": "k\ud800", "status": "failed"},
    ]
    await refused(populated, "rows[1].row_key", record_sheet_rows(populated, "r1", rows))
    await refused(populated, "run_id", sheet_outcomes(populated, "r1\x00"))


async def test_status_upload_numbers_beyond_their_columns(populated: Database) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("producer_attempt", {"producer_attempt": INT32_MAX + 1}),  # int4 column
        ("upload_seq", {"upload_seq": INT64_MAX + 1}),
        ("live_log_total_count", {"live_logs": ["a"], "live_log_total_count": HUGE}),
        ("live_node_progress.n.total", {"live_node_progress": {"n": {"total": INT64_MAX + 1}}}),
        ("live_node_progress.n.completed_at", {"live_node_progress": {"n": {"completed_at": HUGE}}}),
    ]
    for field, body in cases:
        await refused(populated, field, apply_status_upload(populated, "r1", {"status": "running", **body}))


async def test_pool_names_and_ids_with_nul(populated: Database) -> None:
    pool = WarmPool(populated, clock=ManualClock())
    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("version", lambda: pool.add("default", "v\x00", ["i2"])),
        ("pool", lambda: pool.add("p\x00", "v1", ["i2"])),
        ("ids[1]", lambda: pool.promote("default", "v1", ["i1", "\x00"])),
        ("instance_id", lambda: pool.map_run("r1", "i\x00", "v1")),
        ("run_id", lambda: pool.block_run("r\x00", "i1", "v1")),
        ("version", lambda: pool.claim("default", "\ud800", "r2")),
    ]
    for field, call in calls:
        await refused(populated, field, call())
