"""A run as the API shows it, and the one-statement read of a page of its events.

The read side of the run log (`ledger.runlog.store`): `read_page` reads the run, its oldest
retained seq and a page after the cursor in one statement (one snapshot), so `latest_seq`,
`first_seq` and the page always agree; `run_from_row` and `terminal_from_row` give a `runs` row
the API's shape. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from ledger import shapes
from ledger.clock import to_ms
from ledger.db import Conn, Row
from ledger.errors import CursorExpired, NotFound
from ledger.runlog import conversion
from ledger.runlog.events import cursor_expired, event_to_wire
from ledger.runlog.fanout import SharedPage
from ledger.runlog.steps import with_states

__all__ = [
    "read_page",
    "run_from_row",
    "terminal_from_row",
]

# One snapshot: the run, its oldest retained seq and a page after the cursor (NULL cursor = `now`).
# Both start above the run's trim watermark: the rows at or below it are trimmed, and are deleted
# by chunk (`ledger/sql/append_events_v3.sql`), so some may still be stored.
# No row at all means no such run; one row with a NULL seq means an empty page. The run's
# `created_at` reaches the event reads only as a parameter of the executor: the planner keeps, and
# the executor locks and sets up, every partition before pruning all but one at run time, a cost
# that grows with the partitions kept (about 3 ms more at 102 than at 12). Only the fallback of
# `read_page` for a run opened again between its two statements.
_READ_PAGE_SQL: Final = f"""
WITH run AS (
    SELECT last_seq, created_at, events_trimmed_through, terminal_status, terminal_result,
           terminal_error, terminal_total_rows, terminal_duration_ms, terminal_play_name, completed_at,
           {conversion.CONVERTING_SQL} AS converting
    FROM ledger.runs WHERE run_id = %(run_id)s
), bounds AS (
    SELECT min(seq) AS first_seq FROM ledger.run_events
    WHERE run_id = %(run_id)s AND run_created_at = (SELECT created_at FROM run)
      AND seq > (SELECT events_trimmed_through FROM run)
), page AS (
    SELECT seq, type, ts, payload FROM ledger.run_events
    WHERE run_id = %(run_id)s AND run_created_at = (SELECT created_at FROM run)
      AND seq > GREATEST(COALESCE(%(after)s::bigint, (SELECT last_seq FROM run)),
                         (SELECT events_trimmed_through FROM run))
    ORDER BY seq
    LIMIT %(limit)s
)
SELECT run.*, bounds.first_seq, page.seq, page.type, page.ts, page.payload
FROM run CROSS JOIN bounds LEFT JOIN page ON true
ORDER BY page.seq
"""

# The same read for a run whose `created_at` the reader knows (it never changes): given as a
# parameter, the planner keeps the one partition and the executor opens no other, however many
# there are. The answer carries the run's `created_at`; a different one means the run was deleted
# and opened again since, and the read is made anew.
_READ_KNOWN_PAGE_SQL: Final = _READ_PAGE_SQL.replace(
    "(SELECT created_at FROM run)", "%(run_created_at)s::timestamptz"
)

# A run's first read looks its `created_at` up first: one more round trip, which costs the same at
# any size, where setting up every partition of the event log to prune them at run time grows
# with the partitions retention keeps (it overtakes the round trip at a few dozen).
_RUN_CREATED_AT_SQL: Final = "SELECT created_at FROM ledger.runs WHERE run_id = %(run_id)s"


def terminal_from_row(row: Mapping[str, Any]) -> shapes.TerminalStateBody | None:
    """The terminal state of a run row in API shape, or None while the run is live."""
    if row["terminal_status"] is None:
        return None
    return {
        "status": row["terminal_status"],
        "result": row["terminal_result"],
        "error": row["terminal_error"],
        "total_rows": row["terminal_total_rows"],
        "duration_ms": row["terminal_duration_ms"],
        "play_name": row["terminal_play_name"],
        "completed_at": to_ms(row["completed_at"]),
    }


def run_from_row(row: Mapping[str, Any]) -> shapes.Run:
    """A run row in API shape (`GET /v1/runs/{run_id}`).

    `producer_attempt`, `last_upload_seq` and `live_log_count` are what a reporter resuming the
    attempt continues from: its next upload_seq and log position come after them.
    """
    return {
        "run_id": row["run_id"],
        "play_name": row["play_name"],
        "status": row["status"],
        "created_at": to_ms(row["created_at"]),
        "updated_at": to_ms(row["updated_at"]),
        "last_seq": row["last_seq"],
        "producer_attempt": row["producer_attempt"],
        "last_upload_seq": row["last_upload_seq"],
        "live_log_count": row["live_log_count"],
        "last_heartbeat_at": to_ms(row["last_heartbeat_at"]),
        "terminal": terminal_from_row(row),
        # Every step with its state (derived for one stored without, by an older ledger).
        "live_node_progress": with_states(row["live_node_progress"]),
    }


async def read_page(
    conn: Conn, run_id: str, after: int | None, limit: int, *, created_at: datetime | None = None
) -> tuple[SharedPage, datetime]:
    """One page after the cursor (None = `now`): `{events, latest_seq, first_seq, terminal}` and
    the cursor resolved (a `now` becomes the run's last seq), with the run's `created_at` (pass it
    back as `created_at` to the run's next read).

    Raises `NotFound` for an unknown run and `CursorExpired` for a cursor before `first_seq`.
    """
    if created_at is None:
        cur = await conn.execute(_RUN_CREATED_AT_SQL, {"run_id": run_id})
        run = await cur.fetchone()
        if run is None:
            raise NotFound(f"unknown run {run_id!r}")
        created_at = run["created_at"]
    params = {"run_id": run_id, "after": after, "limit": limit, "run_created_at": created_at}
    cur = await conn.execute(_READ_KNOWN_PAGE_SQL, params)
    rows: list[Row] = await cur.fetchall()
    if not rows:
        raise NotFound(f"unknown run {run_id!r}")
    if rows[0]["created_at"] != created_at:
        cur = await conn.execute(_READ_PAGE_SQL, params)
        rows = await cur.fetchall()
    if not rows:
        raise NotFound(f"unknown run {run_id!r}")
    head = rows[0]
    if head["converting"]:
        raise conversion.converting_error(run_id)
    latest_seq = int(head["last_seq"])
    first_seq = int(head["first_seq"]) if head["first_seq"] is not None else latest_seq + 1
    resolved = latest_seq if after is None else after
    if cursor_expired(resolved, first_seq):
        raise CursorExpired(run_id, resolved, first_seq)
    events: list[shapes.Event] = []
    for row in rows:
        if row["seq"] is not None:
            ts_ms = to_ms(row["ts"])
            assert ts_ms is not None
            events.append(event_to_wire(int(row["seq"]), row["type"], ts_ms, row["payload"]))
    page: shapes.EventPage = {
        "events": events,
        "latest_seq": latest_seq,
        "first_seq": first_seq,
        "terminal": terminal_from_row(head),
    }
    return SharedPage(page, resolved), head["created_at"]
