"""Reading the inspection views (migration 0002) for the service and the CLI.

`ledger runs` shows `run_overview`; the functions here return JSON-ready `ledger.shapes` (times in
epoch milliseconds, durations in milliseconds) so the HTTP layer can hand them out as they are.
"""

from __future__ import annotations

from typing import cast

from ledger import shapes, validate
from ledger.db import Database
from ledger.errors import InvalidInput

# Runs per listing (an overview for people); an event page has its own, larger bound.
MAX_RUNS_LIMIT = 1000

_MS = "(extract(epoch FROM {col}) * 1000)::bigint"

LIST_RUNS = f"""
SELECT
    run_id, status, play_name,
    {_MS.format(col="created_at")} AS created_at,
    {_MS.format(col="updated_at")} AS updated_at,
    {_MS.format(col="age")} AS age_ms,
    last_seq, last_event_type,
    terminal_status, terminal_error, terminal_total_rows,
    steps_total, steps_done, rows_completed, rows_failed, rows_total
FROM ledger.run_overview
ORDER BY created_at DESC, run_id
LIMIT %(limit)s
"""

LIST_STALLED = f"""
SELECT run_id, status, play_name,
    {_MS.format(col="updated_at")} AS updated_at,
    {_MS.format(col="idle")} AS idle_ms,
    last_seq
FROM ledger.stalled_runs
ORDER BY updated_at, run_id
"""

POOL_AVAILABILITY = f"""
SELECT pool, version, available, warming, stale,
    {_MS.format(col="newest_ready_at")} AS newest_ready_at
FROM ledger.pool_availability
ORDER BY pool, version
"""


def _check_limit(limit: int) -> int:
    if not validate.is_int(limit):
        raise InvalidInput("limit", "must be an integer")
    if not 1 <= limit <= MAX_RUNS_LIMIT:
        raise InvalidInput("limit", f"must be between 1 and {MAX_RUNS_LIMIT}, got {limit}")
    return limit


async def list_runs(db: Database, limit: int = 50) -> list[shapes.RunSummary]:
    """The newest `limit` runs from `ledger.run_overview`, newest first."""
    _check_limit(limit)
    async with db.connection() as conn:
        cur = await conn.execute(LIST_RUNS, {"limit": limit})
        # The statement's columns are the shape, named and converted (ms) in the SQL.
        return cast(list[shapes.RunSummary], await cur.fetchall())


async def list_stalled_runs(db: Database) -> list[shapes.StalledRun]:
    """Non-terminal runs idle past the watchdog's default limit, longest idle first."""
    async with db.connection() as conn:
        cur = await conn.execute(LIST_STALLED)
        return cast(list[shapes.StalledRun], await cur.fetchall())


async def pool_availability(db: Database) -> list[shapes.PoolAvailability]:
    """Per pool and version: available, warming and stale unexpired entries."""
    async with db.connection() as conn:
        cur = await conn.execute(POOL_AVAILABILITY)
        return cast(list[shapes.PoolAvailability], await cur.fetchall())
