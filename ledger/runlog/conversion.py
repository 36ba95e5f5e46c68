"""Converting a filled event log to partitions: a batched copy, beside live appends.

Migration 0013 moves a filled `ledger.run_events` aside (a rename, instant) as
`ledger_partitions.run_events_unpartitioned` and puts the partitioned table in its place: appends
go there at once. `convert` then copies the old rows over in key order, one short transaction per
batch (`ON CONFLICT DO NOTHING`, so a batch that is repeated after a crash changes nothing),
locking the batch's runs `FOR SHARE` so a run deleted meanwhile (retention) cannot leave
copied events behind. An append meanwhile trims its run past the event cap in the new table and
moves the run's trim watermark (`events_trimmed_through`); the old rows at or below it are not
copied (the terminal event excepted, which is never trimmed), so the watermark carries the
trims of both logs and a page's `first_seq` is the first event it holds. The append waits for
the batch that copies its run (its `UPDATE` against the batch's `FOR SHARE`: `FOR KEY SHARE` would
let an update that changes no key through), so a batch and an append never disagree about the
watermark. Each batch holds row locks only: writes to the runs it copies wait for its commit,
nothing else waits. Last, the old table's foreign key is
dropped (that takes `ACCESS EXCLUSIVE` on `ledger.runs` for the moment its triggers are removed,
under a short `lock_timeout`, retried), then the table, which no one else uses any more.

While the old table exists (`pending`), reads of a run's events would miss the rows not copied
yet: this release answers them 503 with Retry-After (`CONVERTING_SQL`, `converting_error`) and
keeps taking appends. A service of the release before partitioning reads `ledger.run_events`
without knowing of the old table, so it must not run during the window at all: the upgrade that
moves the log aside refuses while one is connected (`refuse_beside_previous_release`, called by
the migration environment inside the upgrade's transaction), and that release refuses to start
on a database past its own revisions.

Conversion and retention's partition drops exclude each other: retention drops no partition
while the old table exists (the copy needs every partition it made), and `convert` refuses to
start while a partition is being dropped (its session, named `run-ledger detach ...`, is in
`pg_stat_activity`), naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

from ledger.db import driver_errors
from ledger.errors import ConfigError, DatabaseUnavailable, HeldBySession

__all__ = [
    "CONVERTING_SQL",
    "COPY_BATCH_SQL",
    "DEFAULT_BATCH",
    "OLD_TABLE",
    "Progress",
    "convert",
    "converting_error",
    "pending",
    "refuse_beside_previous_release",
]

OLD_TABLE: Final = "ledger_partitions.run_events_unpartitioned"
DEFAULT_BATCH: Final = 10_000
# How long dropping the old table may wait for `ledger.runs`, per attempt: appends queue behind
# a waiting ACCESS EXCLUSIVE request, so it gives up quickly and tries again.
_DROP_LOCK_TIMEOUT_MS: Final = 200
_DROP_ATTEMPTS: Final = 50

# An expression a read adds to its own statement (no round trip more): true while the copy runs.
CONVERTING_SQL: Final = f"to_regclass('{OLD_TABLE}') IS NOT NULL"
_PENDING_SQL: Final = f"SELECT {CONVERTING_SQL} AS pending"

# A service of any release names its pooled sessions and its one listener so (`ledger.db`,
# `ledger.runlog.listener`): the listener is connected for as long as the service runs. A release
# that can read the database past the upgrade has migrated it already, so at the upgrade's moment
# these are the previous release's.
_PREVIOUS_RELEASE_SQL: Final = """
SELECT pid, application_name, state FROM pg_stat_activity
WHERE application_name IN ('run-ledger', 'run-ledger-listener')
  AND datname = current_database() AND pid <> pg_backend_pid()
ORDER BY pid
"""

# Retention dropping a partition (`ledger.runlog.partitions` names its sessions so) in this
# database: another ledger's database on the same server has partitions of the same names.
_DROPPING_SQL: Final = """
SELECT pid, application_name, state FROM pg_stat_activity
WHERE application_name LIKE 'run-ledger detach %%'
  AND datname = current_database() AND pid <> pg_backend_pid()
ORDER BY pid
"""

# Every period the runs were created in gets its partition before any row is copied.
_PERIODS_SQL: Final = """
SELECT DISTINCT date_trunc(
    (SELECT period FROM ledger.run_event_partitioning), created_at, 'UTC'
) AS at
FROM ledger.runs ORDER BY 1
"""

# One batch of the copy (`after_run`, `after_seq`: where the last one ended; `limit`): its rows, its
# runs locked `FOR SHARE` for the watermark each copies above, and what it read and copied.
COPY_BATCH_SQL: Final = f"""
WITH batch AS (
    SELECT o.run_id, o.seq, o.type, o.ts, o.payload FROM {OLD_TABLE} o
    WHERE (o.run_id, o.seq) > (%(after_run)s, %(after_seq)s)
    ORDER BY o.run_id, o.seq
    LIMIT %(limit)s
), runs AS (
    SELECT r.run_id, r.created_at, r.events_trimmed_through FROM ledger.runs r
    WHERE r.run_id IN (SELECT DISTINCT run_id FROM batch)
    FOR SHARE
), copied AS (
    INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, ts, payload)
    SELECT b.run_id, b.seq, r.created_at, b.type, b.ts, b.payload
    FROM batch b JOIN runs r ON r.run_id = b.run_id
    WHERE b.seq > r.events_trimmed_through OR b.type = 'terminal'
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM batch) AS read, (SELECT count(*) FROM copied) AS copied,
       (SELECT run_id FROM batch ORDER BY run_id DESC, seq DESC LIMIT 1) AS last_run,
       (SELECT seq FROM batch ORDER BY run_id DESC, seq DESC LIMIT 1) AS last_seq
"""


@dataclass(kw_only=True)
class Progress:
    batches: int = 0
    read: int = 0
    copied: int = 0
    # The longest a batch's transaction took, and the drop's wait for `ledger.runs`.
    longest_batch_s: float = 0.0
    drop_s: float = 0.0
    drop_attempts: int = 0


def converting_error(run_id: str) -> DatabaseUnavailable:
    """What a read of a run's events answers while the copy runs (503 with Retry-After)."""
    return DatabaseUnavailable(
        f"the event log is being converted to partitions (`ledger db convert`): the events of run"
        f" {run_id!r} are readable again once it is done"
    )


def _sessions(rows: list[dict[str, object]]) -> str:
    return ", ".join(
        f"pid {row['pid']} (application_name {row['application_name']!r}, state {row['state']!r})"
        for row in rows
    )


def refuse_beside_previous_release(conn: psycopg.Connection[Any], version_table: str) -> None:
    """Raise `HeldBySession` (the caller's transaction then rolls back whole) when a session of
    the release before partitioning is connected: it would read pages without the rows not copied
    yet. Called inside the transaction that moved the old log aside, after taking the version
    table: a previous release starting from now on waits for that transaction, then finds a
    revision it does not know and refuses to start."""
    conn.execute(f"LOCK TABLE {version_table} IN ACCESS EXCLUSIVE MODE")
    cur = conn.cursor(row_factory=dict_row)
    rows = cur.execute(_PREVIOUS_RELEASE_SQL).fetchall()
    if rows:
        raise HeldBySession(
            f"a service of the previous release is connected ({_sessions(rows)}): it would read the"
            " event log without the rows its conversion has not copied yet; stop it, then upgrade"
            " (nothing was changed)"
        )


def pending(url: str) -> bool:
    """Whether the event log still has rows to convert (`ledger db convert` not done)."""
    with driver_errors(), psycopg.connect(url, row_factory=dict_row) as conn:
        row = conn.execute(_PENDING_SQL).fetchone()
    return bool(row and row["pending"])


def convert(
    url: str, *, batch: int = DEFAULT_BATCH, report: Callable[[Progress], None] | None = None
) -> Progress:
    """Copy the old event log into the partitions, batch by batch, then drop it."""
    progress = Progress()
    with driver_errors(), psycopg.connect(url, row_factory=dict_row, autocommit=True) as conn:
        if not conn.execute(_PENDING_SQL).fetchone()["pending"]:  # type: ignore[index]
            return progress
        dropping = conn.execute(_DROPPING_SQL).fetchall()
        if dropping:
            raise HeldBySession(
                f"retention is dropping an event log partition ({_sessions(dropping)}); run the"
                " conversion again once it is done (`ledger gc` and the watchdog drop none while a"
                " conversion is pending)"
            )
        for row in conn.execute(_PERIODS_SQL).fetchall():
            conn.execute("SELECT ledger.ensure_run_events_partition(%(at)s)", {"at": row["at"]})
        after_run, after_seq = "", 0
        while True:
            started = time.monotonic()
            with conn.transaction():
                done = conn.execute(
                    COPY_BATCH_SQL, {"after_run": after_run, "after_seq": after_seq, "limit": batch}
                ).fetchone()
            progress.longest_batch_s = max(progress.longest_batch_s, time.monotonic() - started)
            assert done is not None
            if not done["read"]:
                break
            progress.batches += 1
            progress.read += done["read"]
            progress.copied += done["copied"]
            after_run, after_seq = done["last_run"], done["last_seq"]
            if report is not None:
                report(progress)
        _drop_old_table(conn, progress)
    return progress


def _drop_old_table(conn: psycopg.Connection[dict[str, object]], progress: Progress) -> None:
    for _ in range(_DROP_ATTEMPTS):
        progress.drop_attempts += 1
        started = time.monotonic()
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = {_DROP_LOCK_TIMEOUT_MS}")
                # The foreign key first, alone: its transaction holds `runs` only for the catalog
                # change, not for the removal of the table's files.
                conn.execute(f"ALTER TABLE {OLD_TABLE} DROP CONSTRAINT IF EXISTS fk_run_events_run_id_runs")
        except psycopg.errors.LockNotAvailable:
            time.sleep(0.5)
            continue
        progress.drop_s = time.monotonic() - started
        conn.execute(f"DROP TABLE {OLD_TABLE}")
        return
    raise ConfigError(
        f"could not drop {OLD_TABLE}: ledger.runs stayed busy; every row is copied, run it again"
    )
