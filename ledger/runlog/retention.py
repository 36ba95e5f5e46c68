"""Run retention: finished runs older than the retention are deleted with everything they own.

A run is expired when it has a terminal state and completed before `now - retention`; a running run
is never expired, however old. Deleting its `ledger.runs` row takes its events (a trigger), sheet rows
and node observations (their foreign keys cascade) with it; its run mapping has no foreign key, so the same
statement deletes it, unless another transaction holds it (a claim reusing the run id): then the
mapping is left to the mapping sweep, which takes it once it expires. Durable Streams' run streams
read `run_events` and store nothing of their own.

Each batch locks its runs with `FOR UPDATE SKIP LOCKED`: a run whose row another transaction holds
(an append in flight) is skipped, never waited on, and deleted by a later batch. The batches are
small because one run may own hundreds of event rows, and each batch is one transaction that must
finish well within the service's statement timeout.

Runs are deleted one by one only once their event log partition is due
(`ledger.runlog.partitions`): most runs' events go with their partition, dropped whole.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from ledger.db import Conn
from ledger.errors import ConfigError
from ledger.tokens import ttl_seconds

__all__ = [
    "DEFAULT_RETENTION",
    "DEFAULT_RETENTION_BATCH_SIZE",
    "DEFAULT_RETENTION_PASS_CAP",
    "RETENTION_VAR",
    "count_expired_runs",
    "cutoff",
    "delete_expired_runs",
    "describe",
    "is_expired",
    "parse_retention",
]

RETENTION_VAR: Final = "LEDGER_RUN_RETENTION"
DEFAULT_RETENTION: Final = timedelta(days=30)
# Runs per batch: ~200 events each makes a batch ~20,000 cascaded rows, well under a second.
DEFAULT_RETENTION_BATCH_SIZE: Final = 100
# Runs one maintenance pass deletes at most, so a backlog (retention just turned on over a year
# of runs) is worked off over several passes instead of holding up the watchdog's other work.
DEFAULT_RETENTION_PASS_CAP: Final = 10_000

_OFF = ("off", "none", "never", "false")

# `boundary` (`ledger.runlog.partitions.per_run_boundary`): runs created after it wait for their
# event log partition to be dropped whole. A deleted run's events go with it (a trigger on `runs`
# deletes them from the run's one partition; none are left once the partition was dropped).
_DELETE_EXPIRED_RUNS = """
WITH doomed AS (
    SELECT run_id FROM ledger.runs
    WHERE terminal_status IS NOT NULL AND completed_at < %(cutoff)s AND created_at < %(boundary)s
    ORDER BY completed_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), mappings AS (
    DELETE FROM ledger.run_mappings WHERE run_id IN (
        SELECT m.run_id FROM ledger.run_mappings m JOIN doomed d ON d.run_id = m.run_id
        FOR UPDATE OF m SKIP LOCKED
    )
), gone AS (
    DELETE FROM ledger.runs r USING doomed d WHERE r.run_id = d.run_id RETURNING r.run_id
)
SELECT count(*) AS deleted FROM gone
"""

_COUNT_EXPIRED_RUNS = """
SELECT count(*) AS expired FROM ledger.runs
WHERE terminal_status IS NOT NULL AND completed_at < %(cutoff)s AND created_at < %(boundary)s
"""


def parse_retention(text: str | None, *, source: str = RETENTION_VAR) -> timedelta | None:
    """`30d`, `720h`, `90m`, `3600s` (or bare seconds) as a retention; `0` or `off`: None (keep
    every run). Empty or None: the default. Anything else is a `ConfigError` naming `source`."""
    raw = (text or "").strip().lower()
    if not raw:
        return DEFAULT_RETENTION
    if raw in _OFF:
        return None
    try:
        seconds = ttl_seconds(raw)
    except ValueError:
        raise ConfigError(
            f"{source} must be a duration like 30d, 720h or 90m, or off (got {text!r})"
        ) from None
    return timedelta(seconds=seconds) if seconds > 0 else None


def describe(retention: timedelta) -> str:
    """A retention the way `parse_retention` reads it back: `30d`, `12h`, `90m`, `45s`."""
    seconds = int(retention.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def cutoff(now: datetime, retention: timedelta) -> datetime:
    """Runs that completed before this instant are expired."""
    return now - retention


def is_expired(terminal_status: str | None, completed_at: datetime | None, cutoff_at: datetime) -> bool:
    """The rule `_DELETE_EXPIRED_RUNS` restates in SQL: finished, and finished before the cutoff.
    (The statement also leaves the runs created after its `boundary`: they are expired, but wait
    for their event log partition to go whole.)"""
    return terminal_status is not None and completed_at is not None and completed_at < cutoff_at


async def delete_expired_runs(conn: Conn, cutoff_at: datetime, boundary: datetime, *, limit: int) -> int:
    """Delete up to `limit` runs expired at `cutoff_at` and created before `boundary` (oldest
    first), with their events, sheet rows, observations and mapping, skipping runs another
    transaction holds; how many."""
    cur = await conn.execute(
        _DELETE_EXPIRED_RUNS, {"cutoff": cutoff_at, "boundary": boundary, "limit": limit}
    )
    row = await cur.fetchone()
    return int(row["deleted"]) if row else 0


async def count_expired_runs(conn: Conn, cutoff_at: datetime, boundary: datetime) -> int:
    """How many runs expired at `cutoff_at` and created before `boundary` (locked or not): what a
    sweep would delete."""
    cur = await conn.execute(_COUNT_EXPIRED_RUNS, {"cutoff": cutoff_at, "boundary": boundary})
    row = await cur.fetchone()
    return int(row["expired"]) if row else 0
