"""Reading the inspection views (`ledger/sql/`) for the service and the CLI.

`ledger runs` shows `run_overview`; the functions here return JSON-ready `ledger.shapes` (times in
epoch milliseconds, durations in milliseconds) so the HTTP layer can hand them out as they are.

The run list is newest first (`created_at` descending, ties by `run_id`), read in pages: a full page
carries a cursor (`next_before`) naming its last run, and the next page starts after that run. Both
the order and the cursor follow the index `ix_runs_newest_first`, so a page costs the same whether
the ledger holds a thousand runs or millions, and however deep the page is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

from ledger import shapes, validate
from ledger.clock import from_ms, from_us, ms_sql, to_us
from ledger.db import Database
from ledger.errors import InvalidInput

__all__ = [
    "MAX_RUNS_LIMIT",
    "RUN_LIST_CURSOR_PATTERN",
    "RunFilter",
    "cursor_of",
    "list_runs",
    "list_stalled_runs",
    "listing_statement",
    "pool_availability",
    "runs_page",
]

# Runs per listing (an overview for people); an event page has its own, larger bound.
MAX_RUNS_LIMIT = 1000

# Ordered by the view's own timestamp (`o.created_at`, qualified: the bare name would be the
# millisecond output column, an expression no index holds, which sorts every run for each page).
# `position_at` is the exact timestamp the cursor carries; it is not part of the answer.
_LIST_RUNS_TEMPLATE = f"""
SELECT
    o.run_id, o.status, o.play_name,
    {ms_sql("o.created_at")} AS created_at,
    {ms_sql("o.updated_at")} AS updated_at,
    {ms_sql("o.age")} AS age_ms,
    o.last_seq, o.last_event_type,
    o.terminal_status, o.terminal_error, o.terminal_total_rows,
    o.steps_total, o.steps_done, o.steps_failed, o.steps_cancelled, o.steps_skipped,
    o.rows_completed, o.rows_failed, o.rows_total,
    o.created_at AS position_at
FROM ledger.run_overview o
{{where}}
ORDER BY o.created_at DESC, o.run_id
LIMIT %(limit)s
"""

_ROW_SUMS: Final = ("rows_completed", "rows_failed", "rows_total")

# After the cursor's run in the list's order. The `<=` bound is what the index scan starts from;
# the rest drops the cursor's run and the runs created at the same instant that precede it.
_AFTER_CURSOR = """o.created_at <= %(before_at)s
  AND (o.created_at < %(before_at)s OR o.run_id > %(before_run)s)"""

# The list's filters, each an exact match on a column of the view (or a lower bound on its time).
_FILTERS: Final = {
    "status": "o.status = %(status)s",
    "play": "o.play_name = %(play)s",
    "since": "o.created_at >= %(since)s",
}

_LIST_STALLED = f"""
SELECT run_id, status, play_name,
    {ms_sql("updated_at")} AS updated_at,
    {ms_sql("idle")} AS idle_ms,
    last_seq
FROM ledger.stalled_runs
ORDER BY updated_at, run_id
"""

_POOL_AVAILABILITY = f"""
SELECT pool, version, available, warming, stale,
    {ms_sql("newest_ready_at")} AS newest_ready_at
FROM ledger.pool_availability
ORDER BY pool, version
"""


def _check_limit(limit: int) -> int:
    if not validate.is_int(limit):
        raise InvalidInput("limit", "must be an integer")
    if not 1 <= limit <= MAX_RUNS_LIMIT:
        raise InvalidInput("limit", f"must be between 1 and {MAX_RUNS_LIMIT}, got {limit}")
    return limit


# A cursor is `<created_at in epoch microseconds>:<run_id>` of the run the next page follows. The
# microseconds stay within what a datetime holds (about years 1653 to 5138); a NUL is never in a run
# id and Postgres text could not carry it. The same pattern documents `before` in the HTTP API.
RUN_LIST_CURSOR_PATTERN: Final = "^(-?[0-9]{1,16}|[0-9]{17}):[^\\x00]*$"
_CURSOR = re.compile(RUN_LIST_CURSOR_PATTERN[1:-1])


def cursor_of(created_at: datetime, run_id: str) -> str:
    """The cursor of the page that follows the run (`created_at`, `run_id`) in the list."""
    return f"{to_us(created_at)}:{run_id}"


def _parse_cursor(value: object) -> tuple[datetime, str]:
    if not isinstance(value, str) or _CURSOR.fullmatch(value) is None:
        raise InvalidInput("before", "is not a cursor of the run list (a page's next_before)")
    micros, run_id = value.split(":", 1)
    return from_us(int(micros)), run_id


@dataclass(frozen=True, kw_only=True)
class RunFilter:
    """Which runs a listing holds: those with this `status` (the run's, e.g. `running`, `failed`),
    this `play` (its play name), created at or after `since_ms` (epoch ms); None: any."""

    status: str | None = None
    play: str | None = None
    since_ms: int | None = None


def _filter_params(runs: RunFilter) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if runs.status is not None:
        params["status"] = validate.free_text("status", runs.status)
    if runs.play is not None:
        params["play"] = validate.free_text("play", runs.play)
    if runs.since_ms is not None:
        if not validate.is_int(runs.since_ms) or not 0 <= runs.since_ms <= validate.MAX_EPOCH_MS:
            raise InvalidInput("since", f"must be epoch milliseconds between 0 and {validate.MAX_EPOCH_MS}")
        params["since"] = from_ms(runs.since_ms)
    return params


def listing_statement(
    limit: int, before: str | None, runs: RunFilter | None = None
) -> tuple[str, dict[str, Any]]:
    """The statement and parameters of one page of the run list (checked: bad input raises)."""
    _check_limit(limit)
    params: dict[str, Any] = {"limit": limit, **_filter_params(runs or RunFilter())}
    conditions = [_FILTERS[name] for name in _FILTERS if name in params]
    if before is not None:
        params["before_at"], params["before_run"] = _parse_cursor(before)
        conditions.append(_AFTER_CURSOR)
    where = "WHERE " + "\n  AND ".join(conditions) if conditions else ""
    return _LIST_RUNS_TEMPLATE.format(where=where), params


async def runs_page(
    db: Database, limit: int = 50, before: str | None = None, runs: RunFilter | None = None
) -> shapes.RunList:
    """Up to `limit` runs from `ledger.run_overview` that `runs` admits, newest first, after the
    cursor `before`; `next_before` names the page after this one (None once a page comes back
    short), to be read with the same filter."""
    statement, params = listing_statement(limit, before, runs)
    async with db.connection() as conn:
        cur = await conn.execute(statement, params)
        rows = await cur.fetchall()
    next_before = None
    if len(rows) == limit:
        next_before = cursor_of(rows[-1]["position_at"], rows[-1]["run_id"])
    for row in rows:
        del row["position_at"]
        # Numeric in the view (a run's sums may pass the bigint limit): whole numbers all the same.
        for column in _ROW_SUMS:
            row[column] = int(row[column])
    # The other columns are the shape, named and converted (ms) in the SQL.
    return {"runs": cast(list[shapes.RunSummary], rows), "next_before": next_before}


async def list_runs(db: Database, limit: int = 50, before: str | None = None) -> list[shapes.RunSummary]:
    """The newest `limit` runs (after the cursor `before`), newest first."""
    return (await runs_page(db, limit, before))["runs"]


async def list_stalled_runs(db: Database) -> list[shapes.StalledRun]:
    """Non-terminal runs idle past the watchdog's stall limit, longest idle first."""
    async with db.connection() as conn:
        cur = await conn.execute(_LIST_STALLED)
        return cast(list[shapes.StalledRun], await cur.fetchall())


async def pool_availability(db: Database) -> list[shapes.PoolAvailability]:
    """Per pool and version: available, warming and stale unexpired entries."""
    async with db.connection() as conn:
        cur = await conn.execute(_POOL_AVAILABILITY)
        return cast(list[shapes.PoolAvailability], await cur.fetchall())
