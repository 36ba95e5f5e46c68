"""The event log's partitions: one per UTC day or month of run creation, made ahead, dropped whole.

`ledger.run_events` is partitioned by `run_created_at` (the run's `created_at`, copied onto each of
its events), so every statement about one run reads or writes one partition, and retention can
drop a partition with one catalog operation instead of deleting its rows one by one (each delete
writes WAL, leaves a dead tuple for vacuum and bloats the indexes).

- Making: `ledger.ensure_run_events_partition(at)` (`ledger/sql/`) makes the partition holding
  `at` when it is missing. A statement trigger on `runs` calls it for the runs each insert makes
  (opening a run, or any other insert); `ensure_ahead` (the watchdog's loop and `ledger db
  partitions`) makes the next ones before they are needed, so opening a run normally finds its
  partition with one catalog lookup.
- Dropping: a partition is *due* once its whole range lies before the retention cutoff (every run
  created in it is at least that old), and *droppable* when, besides, every run created in it has
  ended before the cutoff. A droppable partition is detached `CONCURRENTLY` (appends and reads of
  other runs never wait on it) and dropped; its runs' rows in `ledger.runs` then go through the
  per-run delete, which finds no events left to delete. A due partition some run still holds (a
  long-running run that straddles the cutoff) keeps its expired runs going one by one, as before
  partitions. A run in a partition not due yet waits for it: a run is deleted between the
  retention and the retention plus one partition period after it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import psycopg
from psycopg import sql

from ledger.db import Conn, Database, driver_errors, sever
from ledger.errors import ConfigError, HeldBySession, LedgerFailure
from ledger.runlog.conversion import OLD_TABLE

__all__ = [
    "DEFAULT_AHEAD",
    "DEFAULT_DETACH_WAIT_S",
    "PERIODS",
    "PERIOD_VAR",
    "Partition",
    "apply_period_setting",
    "blocking_sessions",
    "conversion_pending",
    "detached_leftovers",
    "drop_detached",
    "drop_partition",
    "due_partitions",
    "ensure_ahead",
    "ensure_partition",
    "list_partitions",
    "parse_period",
    "per_run_boundary",
    "period",
    "runs_in",
    "set_period",
]

PERIOD_VAR: Final = "LEDGER_PARTITION_INTERVAL"
PERIODS: Final = ("day", "month")
# Partitions made ahead of the current one: a day boundary (or a month's) never has the first
# run of the new period create its partition while appends wait behind it.
DEFAULT_AHEAD: Final = 2
# A detach waits for every transaction that has the event log open to end; one left open (a psql
# session idle in a transaction, a `pg_dump`) must not hold retention for longer than this. Past
# it the statement is cancelled from the client side (a server-side `statement_timeout` would be
# a session setting, which a transaction-mode pooler hands on to other clients); an interrupted
# detach stays pending and the next attempt finishes it (`FINALIZE`).
DEFAULT_DETACH_WAIT_S: Final = 10.0
# After the cancel request, how long the statement may take to end before the connection is cut.
_CANCEL_GRACE_S: Final = 2.0
# Finishing a pending detach and dropping a table take `ACCESS EXCLUSIVE` on the partition: while
# that waits in the lock queue behind a reader, every statement that touches the partition (a
# cached generic plan over the whole event log locks all of them) queues behind it. So each try
# waits this long at most (`lock_timeout`, local to its transaction), and tries are spaced.
_LOCK_TRY_MS: Final = 100
# How long making a partition ahead may wait for the parent's lock (see `ensure_ahead`).
_ATTACH_LOCK_TIMEOUT_MS: Final = 1000
_LOCK_RETRY_S: Final = 0.25
# The detach's session is named after its partition, so the sessions it waits for can be found
# from another connection even through a pooler (which hides the server's pid).
_APPLICATION_PREFIX: Final = "run-ledger detach "

# Who the detach (or drop) of a partition waits for: the sessions blocking the backend that runs
# it, and those holding a lock on the partition itself, oldest transaction first. Only sessions of
# this database: another ledger's database on the same server has partitions, and detach sessions,
# of the same names, and a relation's OID means nothing in another database's locks.
_BLOCKERS_SQL: Final = """
SELECT b.pid, b.application_name, b.state, b.xact_start
FROM pg_stat_activity b
WHERE b.pid <> pg_backend_pid() AND b.datname = current_database()
  AND b.application_name IS DISTINCT FROM %(application_name)s AND (
    b.pid IN (
        SELECT unnest(pg_blocking_pids(w.pid)) FROM pg_stat_activity w
        WHERE w.application_name = %(application_name)s AND w.datname = current_database()
    )
    OR b.pid IN (
        SELECT l.pid FROM pg_locks l
        WHERE l.granted AND l.relation = to_regclass(%(table)s)
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    )
)
ORDER BY b.xact_start NULLS LAST, b.pid
"""

# Tables a detach left behind without their drop (the drop was cancelled): detached partitions
# are no partition any more, so only their name says what they were.
_DETACHED_SQL: Final = r"""
SELECT c.relname AS name FROM pg_class c
WHERE c.relnamespace = 'ledger_partitions'::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
  AND c.relname ~ '^run_events_\d{8}_\d{8}$'
ORDER BY c.relname
"""

_LIST_SQL: Final = """
SELECT name, from_at, to_at, detach_pending FROM ledger.run_event_partitions ORDER BY from_at
"""

_ENSURE_SQL: Final = "SELECT ledger.ensure_run_events_partition(%(at)s) AS name"

_PERIOD_SQL: Final = "SELECT period FROM ledger.run_event_partitioning"

_SET_PERIOD_SQL: Final = """
INSERT INTO ledger.run_event_partitioning (period) VALUES (%(period)s)
ON CONFLICT (id) DO UPDATE SET period = EXCLUDED.period
"""

# Due partitions (their range ends at or before the cutoff), oldest first, each with whether a
# run still holds it: a running run (found through the small partial index of running runs), or
# one that ended at or after the cutoff.
_DUE_SQL: Final = """
SELECT p.name, p.from_at, p.to_at, p.detach_pending,
       EXISTS (
           SELECT 1 FROM ledger.runs r
           WHERE r.terminal_status IS NULL AND r.created_at >= p.from_at AND r.created_at < p.to_at
       ) OR EXISTS (
           SELECT 1 FROM ledger.runs r
           WHERE r.created_at >= p.from_at AND r.created_at < p.to_at
             AND r.terminal_status IS NOT NULL AND r.completed_at >= %(cutoff)s
       ) AS held
FROM ledger.run_event_partitions p
WHERE p.to_at <= %(cutoff)s
ORDER BY p.from_at
"""

_RUNS_IN_SQL: Final = """
SELECT count(*) AS runs FROM ledger.runs WHERE created_at >= %(from_at)s AND created_at < %(to_at)s
"""

# Runs created before this instant are in a due partition (or in none): the per-run delete may
# take them once expired. Runs after it wait for their partition.
_BOUNDARY_SQL: Final = """
SELECT COALESCE(
    (SELECT p.from_at FROM ledger.run_event_partitions p
     WHERE p.from_at <= %(cutoff)s AND %(cutoff)s < p.to_at),
    %(cutoff)s::timestamptz
) AS boundary
"""


@dataclass(frozen=True, kw_only=True)
class Partition:
    """One partition of `ledger.run_events`: runs created in [from_at, to_at)."""

    name: str
    from_at: datetime
    to_at: datetime
    detach_pending: bool = False


@dataclass(frozen=True)
class _DuePartition:
    partition: Partition
    # A run created in it has not ended, or ended at or after the cutoff.
    held: bool


def parse_period(text: str | None, *, source: str = PERIOD_VAR) -> str | None:
    """`day` or `month`; empty or None: None (keep what the database has). Else `ConfigError`."""
    raw = (text or "").strip().lower()
    if not raw:
        return None
    if raw not in PERIODS:
        raise ConfigError(f"{source} must be day or month (got {text!r})")
    return raw


def apply_period_setting(url: str, text: str | None) -> str | None:
    """Store `LEDGER_PARTITION_INTERVAL` (`text`) as the period of partitions made from now on;
    the period stored, or None when the variable is unset. `ConfigError` for a bad value."""
    value = parse_period(text)
    if value is not None:
        with driver_errors(), psycopg.connect(url) as conn:
            conn.execute(_SET_PERIOD_SQL, {"period": value})
    return value


async def period(conn: Conn) -> str:
    cur = await conn.execute(_PERIOD_SQL)
    row = await cur.fetchone()
    return str(row["period"]) if row else "day"


async def set_period(conn: Conn, value: str) -> None:
    """Partitions made from now on cover a UTC `day` or `month`; existing ones keep their range."""
    await conn.execute(_SET_PERIOD_SQL, {"period": value})


async def list_partitions(conn: Conn) -> list[Partition]:
    cur = await conn.execute(_LIST_SQL)
    return [Partition(**row) for row in await cur.fetchall()]


async def ensure_partition(conn: Conn, at: datetime) -> str:
    """The partition holding runs created at `at`, made first if missing."""
    cur = await conn.execute(_ENSURE_SQL, {"at": at})
    row = await cur.fetchone()
    assert row is not None
    return str(row["name"])


async def ensure_ahead(db: Database, now: datetime, *, ahead: int = DEFAULT_AHEAD) -> list[str]:
    """Make the partition holding `now` and the `ahead` after it; their names. One transaction
    each: attaching holds a lock on the parent (one appends never wait on) until it commits."""
    names: list[str] = []
    at = now
    for _ in range(ahead + 1):
        async with db.transaction() as conn:
            # Attaching waits for a detach in its wait for readers (both take SHARE UPDATE
            # EXCLUSIVE on the parent): the watchdog's loop gives up quickly and tries next pass.
            await conn.execute("SELECT set_config('lock_timeout', %s, true)", (str(_ATTACH_LOCK_TIMEOUT_MS),))
            names.append(await ensure_partition(conn, at))
            cur = await conn.execute(
                "SELECT to_at FROM ledger.run_event_partitions WHERE name = %(name)s", {"name": names[-1]}
            )
            row = await cur.fetchone()
        assert row is not None
        at = row["to_at"]
    return names


async def due_partitions(conn: Conn, cutoff: datetime) -> list[_DuePartition]:
    """Partitions whose whole range lies before `cutoff`, oldest first, and whether a run holds each."""
    cur = await conn.execute(_DUE_SQL, {"cutoff": cutoff})
    return [
        _DuePartition(
            Partition(
                name=row["name"],
                from_at=row["from_at"],
                to_at=row["to_at"],
                detach_pending=row["detach_pending"],
            ),
            bool(row["held"]),
        )
        for row in await cur.fetchall()
    ]


async def runs_in(conn: Conn, partition: Partition) -> int:
    cur = await conn.execute(_RUNS_IN_SQL, {"from_at": partition.from_at, "to_at": partition.to_at})
    row = await cur.fetchone()
    return int(row["runs"]) if row else 0


async def per_run_boundary(conn: Conn, cutoff: datetime) -> datetime:
    """Expired runs created before this instant may be deleted one by one; later ones wait for
    their partition to be dropped whole."""
    cur = await conn.execute(_BOUNDARY_SQL, {"cutoff": cutoff})
    row = await cur.fetchone()
    assert row is not None
    boundary = row["boundary"]
    assert isinstance(boundary, datetime)
    return boundary


async def conversion_pending(conn: Conn) -> bool:
    """Whether a filled event log is still being converted (`ledger.runlog.conversion`): its copy
    needs every partition it made, so none is dropped until it is done."""
    cur = await conn.execute("SELECT to_regclass(%(old)s) IS NOT NULL AS pending", {"old": OLD_TABLE})
    row = await cur.fetchone()
    return bool(row and row["pending"])


async def detached_leftovers(conn: Conn) -> list[str]:
    """Tables of the event log detached whole whose drop did not happen (it was cancelled)."""
    cur = await conn.execute(_DETACHED_SQL)
    return [str(row["name"]) for row in await cur.fetchall()]


async def drop_partition(
    db: Database, partition: Partition, *, wait_s: float = DEFAULT_DETACH_WAIT_S
) -> None:
    """Detach the partition concurrently (or finish an interrupted detach) and drop it.

    `DETACH ... CONCURRENTLY` runs outside any transaction and holds only `SHARE UPDATE
    EXCLUSIVE` on the parent, so appends and reads go on; its second phase waits for every
    transaction that has the event log open to end. Each statement gets `wait_s`, enforced from
    here: past it, the sessions it waits for are looked up, the statement is cancelled, and
    `HeldBySession` names them; the detach is left pending (or the detached table undropped:
    `detached_leftovers`) for the next attempt, which finishes it. Nothing is set on the session,
    so nothing outlives it on a pooler's server connection. Another fault (the connection lost,
    another detach under way) raises `DatabaseUnavailable`; a partition already gone,
    `SchemaMissing`.
    """
    mode = "FINALIZE" if partition.detach_pending else "CONCURRENTLY"
    await _detach_and_drop(db, partition.name, mode, wait_s=wait_s)


async def drop_detached(db: Database, name: str, *, wait_s: float = DEFAULT_DETACH_WAIT_S) -> None:
    """Drop a table of the event log that was detached whole but whose drop was cancelled
    (`detached_leftovers`), bounded as `drop_partition` is."""
    await _detach_and_drop(db, name, None, wait_s=wait_s)


async def _detach_and_drop(db: Database, name: str, mode: str | None, *, wait_s: float) -> None:
    table = sql.Identifier("ledger_partitions", name)
    application_name = _APPLICATION_PREFIX + name
    bound = functools.partial(_bounded_lock, db, wait_s=wait_s, application_name=application_name, name=name)
    # A connection of its own in autocommit: the pool's may be in a transaction (a transaction
    # pooler's), where a concurrent detach is refused.
    with driver_errors():
        async with await psycopg.AsyncConnection.connect(
            db.url, autocommit=True, application_name=application_name, connect_timeout=2
        ) as conn:
            if mode == "CONCURRENTLY":
                await _within(
                    db,
                    conn,
                    sql.SQL("ALTER TABLE ledger.run_events DETACH PARTITION {} CONCURRENTLY").format(table),
                    wait_s=wait_s,
                    application_name=application_name,
                    name=name,
                    what=f"detaching event log partition {name}",
                )
            elif mode == "FINALIZE":
                await bound(
                    conn,
                    sql.SQL("ALTER TABLE ledger.run_events DETACH PARTITION {} FINALIZE").format(table),
                    what=f"finishing the detach of event log partition {name}",
                )
            await bound(
                conn,
                sql.SQL("DROP TABLE {}").format(table),
                what=f"dropping the detached event log partition {name}",
            )


async def _bounded_lock(
    db: Database,
    conn: psycopg.AsyncConnection[Any],
    statement: sql.Composed,
    *,
    wait_s: float,
    application_name: str,
    name: str,
    what: str,
) -> None:
    """Run `statement` (which takes `ACCESS EXCLUSIVE` on the partition) in short tries, each in a
    transaction of its own under a `lock_timeout` local to it, until `wait_s` has passed: then
    `HeldBySession`, naming the sessions that hold the partition."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            async with conn.transaction():
                await conn.execute("SELECT set_config('lock_timeout', %s, true)", (str(_LOCK_TRY_MS),))
                await conn.execute(statement)
            return
        except psycopg.errors.LockNotAvailable:
            if time.monotonic() >= deadline:
                break
        await asyncio.sleep(_LOCK_RETRY_S)
    holders = await _holders(db, application_name, name)
    raise HeldBySession(f"{what} waited {wait_s:g} s for {holders}; the next attempt finishes it")


async def _holders(db: Database, application_name: str, name: str) -> str:
    try:
        return await blocking_sessions(db, application_name, name)
    except LedgerFailure as exc:
        return f"sessions that could not be named ({exc})"


async def _within(
    db: Database,
    conn: psycopg.AsyncConnection[Any],
    statement: sql.Composed,
    *,
    wait_s: float,
    application_name: str,
    name: str,
    what: str,
) -> None:
    """Run `statement` on `conn` (whose session is `application_name`), cancelling it when it has
    not ended within `wait_s`: then `HeldBySession`, naming the sessions it waited for."""
    task = asyncio.ensure_future(conn.execute(statement))
    try:
        done, _ = await asyncio.wait({task}, timeout=wait_s)
    except BaseException:
        # Stopped from outside: psycopg cancels the statement on the server as the task ends.
        task.cancel()
        await asyncio.wait({task})
        raise
    if done:
        await task
        return
    holders = await _holders(db, application_name, name)
    # The cancel request reaches the right server session through a pooler too; a server that
    # never answers it gets its connection cut.
    with contextlib.suppress(psycopg.Error):
        await conn.cancel_safe(timeout=_CANCEL_GRACE_S)
    done, _ = await asyncio.wait({task}, timeout=_CANCEL_GRACE_S)
    if not done:
        sever(conn)
        await asyncio.wait({task})
    with contextlib.suppress(psycopg.Error):
        task.result()
    raise HeldBySession(
        f"{what} waited {wait_s:g} s for {holders}, and was cancelled; the next attempt finishes it"
    )


async def blocking_sessions(db: Database, application_name: str, name: str) -> str:
    """The sessions the ledger session named `application_name` waits for, or that hold partition
    `name`, as one phrase: pid, application name, state and how long its transaction has been
    open."""
    async with db.connection() as conn:
        cur = await conn.execute(
            _BLOCKERS_SQL,
            {
                "application_name": application_name,
                "table": 'ledger_partitions."' + name.replace('"', '""') + '"',
            },
        )
        rows = await cur.fetchall()
        now_cur = await conn.execute("SELECT now() AS now")
        now_row = await now_cur.fetchone()
    if not rows:
        return "a session that ended meanwhile"
    now = now_row["now"] if now_row else None
    described = []
    for row in rows:
        opened = ""
        if row["xact_start"] is not None and now is not None:
            opened = f", transaction open {(now - row['xact_start']).total_seconds():.0f} s"
        described.append(
            f"pid {row['pid']} (application_name {row['application_name']!r}, state {row['state']!r}{opened})"
        )
    return ("session " if len(described) == 1 else "sessions ") + ", ".join(described)
