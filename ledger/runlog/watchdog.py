"""The watchdog: fail runs whose orchestrator went quiet, and sweep what has expired.

A non-terminal run with neither an event nor a heartbeat (a status upload carrying
`last_checkpoint_at`) for `stall_after_s` is failed with `WATCHDOG_ERROR` through the normal
first-terminal-wins path (which settles its open steps), so its readers stop waiting. The limit
has one home in the database, `ledger.watchdog_settings`, written when a watchdog starts
(`record_stall_limit`): the view `ledger.stalled_runs` reads it, so it lists what the watchdog
fails. Every replica of the service may run it:
each pass locks the stalled runs with `FOR UPDATE SKIP LOCKED`, so two watchdogs never work on the
same run at once, and a run that got an event, a heartbeat or a terminal state meanwhile no longer
matches (Postgres re-checks the condition on the newest row version when it locks it).

Its loop also makes the event log's partitions ahead of time and reclaims rows nothing reads any
more: expired run mappings (they already count as absent), Idempotency-Key answers past their
lifetime, and finished runs older than the run retention (`ledger.runlog.retention`). Each is
deleted in batches, one transaction each, skipping rows another transaction holds; runs in
smaller batches and at most `retention_pass_cap` a pass, after the event log partitions whose
runs have all expired were dropped whole (`ledger.runlog.partitions`).

Retention runs in a loop of its own (`start()` starts both): dropping a partition waits for every
transaction that has the event log open, and a reader someone left open (a BI query, a `pg_dump`,
a psql session idle in a transaction) must never delay failing a stalled run or making the
partitions ahead. Each detach and drop is given `detach_wait_s`, enforced from the client side
(`partitions.drop_partition`); one that cannot finish is cancelled, its holder named in the log,
and finished on a later pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from ledger import idempotency, tracing
from ledger.clock import Clock, DatabaseClock
from ledger.db import Conn, Database
from ledger.errors import ConfigError, HeldBySession, LedgerFailure, SchemaMissing
from ledger.pool.store import sweep_expired_mappings
from ledger.runlog import partitions
from ledger.runlog import retention as run_retention
from ledger.runlog.events import WATCHDOG_ERROR, TerminalState
from ledger.runlog.store import (
    DEFAULT_MAX_EVENTS_PER_RUN,
    RunLog,
    lock_stalled_runs,
    set_terminal_in_transaction,
)

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_STALL_AFTER_S",
    "Swept",
    "Watchdog",
]

_log = logging.getLogger(__name__)

DEFAULT_STALL_AFTER_S: Final = 300.0
DEFAULT_INTERVAL_S: Final = 30.0
_DEFAULT_BATCH_SIZE: Final = 100
# Deleting a row costs far less than failing a run: sweeps take bigger bites.
_DEFAULT_SWEEP_BATCH_SIZE: Final = 1000

# The stall limit's one home (one row): the view of stalled runs reads it.
_RECORD_STALL_LIMIT_SQL: Final = """
INSERT INTO ledger.watchdog_settings (id, stall_after, updated_at) VALUES (true, %(stall_after)s, now())
ON CONFLICT (id) DO UPDATE SET stall_after = EXCLUDED.stall_after, updated_at = EXCLUDED.updated_at
"""

_Sleep = Callable[[float], Awaitable[None]]
_Sweep = Callable[[Conn, datetime, int], Awaitable[int]]


@dataclass(frozen=True, kw_only=True)
class Swept:
    """What one sweep removed."""

    mappings: int = 0
    idempotency_keys: int = 0
    runs: int = 0
    # Event log partitions dropped whole (their runs are counted in `runs`).
    partitions: int = 0


@dataclass(frozen=True)
class _RetentionPlan:
    """What a retention sweep would do now: the partitions it would drop whole (each with how many
    runs it holds) and how many more expired runs it would delete one by one."""

    partitions: list[tuple[partitions.Partition, int]]
    per_run: int

    @property
    def runs(self) -> int:
        return sum(runs for _, runs in self.partitions) + self.per_run


class Watchdog:
    """Fails stalled runs; `run_once()` is one pass, `start()`/`stop()` run it every `interval_s`."""

    def __init__(
        self,
        db: Database,
        runlog: RunLog | None = None,
        *,
        stall_after_s: float = DEFAULT_STALL_AFTER_S,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Clock | None = None,
        batch_size: int = _DEFAULT_BATCH_SIZE,
        sweep_batch_size: int = _DEFAULT_SWEEP_BATCH_SIZE,
        retention: timedelta | None = run_retention.DEFAULT_RETENTION,
        retention_batch_size: int = run_retention.DEFAULT_RETENTION_BATCH_SIZE,
        retention_pass_cap: int | None = run_retention.DEFAULT_RETENTION_PASS_CAP,
        detach_wait_s: float = partitions.DEFAULT_DETACH_WAIT_S,
        sleep: _Sleep = asyncio.sleep,
    ) -> None:
        self.db = db
        self.stall_after = timedelta(seconds=stall_after_s)
        self.interval_s = interval_s
        self.clock: Clock = clock or (runlog.clock if runlog and runlog.clock else DatabaseClock())
        self.max_events_per_run = runlog.max_events_per_run if runlog else DEFAULT_MAX_EVENTS_PER_RUN
        self.batch_size = batch_size
        self.sweep_batch_size = sweep_batch_size
        # None keeps every run; the cap (None: none) bounds the runs one sweep deletes.
        self.retention = retention
        self.retention_batch_size = retention_batch_size
        self.retention_pass_cap = retention_pass_cap
        self.detach_wait_s = detach_wait_s
        self._sleep = sleep
        self.key_lifetime = idempotency.KEY_LIFETIME
        self._tasks: list[asyncio.Task[None]] = []
        self.passes = 0
        self.failed_total = 0
        self.swept_total = Swept()
        self.partitions_dropped = 0
        # Why the last `drop_partitions` left a partition for later (a session held it), or None.
        self.retention_blocked: HeldBySession | None = None
        self._limit_recorded = False

    async def record_stall_limit(self) -> None:
        """Write this watchdog's stall limit to its one home in the database
        (`ledger.watchdog_settings`), which `ledger.stalled_runs` reads: the view lists the runs
        this watchdog fails, under any limit."""
        async with self.db.transaction() as conn:
            await conn.execute(_RECORD_STALL_LIMIT_SQL, {"stall_after": self.stall_after})
        self._limit_recorded = True

    async def run_once(self) -> list[str]:
        """One pass: fail every run stalled now (in batches); returns the ids this pass failed."""
        failed: list[str] = []
        while True:
            async with self.db.transaction() as conn:
                now = await self.clock.now(conn)
                stalled = await lock_stalled_runs(conn, now - self.stall_after, limit=self.batch_size)
                for run in stalled:
                    _, newly = await set_terminal_in_transaction(
                        conn,
                        run,
                        TerminalState(status="failed", error=WATCHDOG_ERROR),
                        max_events_per_run=self.max_events_per_run,
                        now=now,
                    )
                    if newly:
                        failed.append(run["run_id"])
            if len(stalled) < self.batch_size:
                break
        self.passes += 1
        self.failed_total += len(failed)
        if failed:
            _log.warning("watchdog failed %d stalled run(s): %s", len(failed), ", ".join(failed))
        return failed

    async def sweep(self) -> Swept:
        """Delete expired run mappings, expired Idempotency-Key answers and expired runs, in
        batches."""
        expired = await self.sweep_expired()
        dropped_before = self.partitions_dropped
        runs = await self.sweep_runs()
        return dataclasses.replace(expired, runs=runs, partitions=self.partitions_dropped - dropped_before)

    async def sweep_expired(self) -> Swept:
        """Delete expired run mappings and expired Idempotency-Key answers, in batches."""
        swept = Swept(
            mappings=await self._sweep_batches(
                lambda conn, now, limit: sweep_expired_mappings(conn, now, limit=limit)
            ),
            idempotency_keys=await self._sweep_batches(
                lambda conn, now, limit: idempotency.sweep_expired(
                    conn, now, lifetime=self.key_lifetime, limit=limit
                )
            ),
        )
        self._count(swept)
        if swept.mappings or swept.idempotency_keys:
            _log.info(
                "watchdog swept %d expired run mapping(s) and %d expired idempotency key(s)",
                swept.mappings,
                swept.idempotency_keys,
            )
        return swept

    def _count(self, swept: Swept) -> None:
        self.swept_total = Swept(
            mappings=self.swept_total.mappings + swept.mappings,
            idempotency_keys=self.swept_total.idempotency_keys + swept.idempotency_keys,
            runs=self.swept_total.runs + swept.runs,
            partitions=self.swept_total.partitions + swept.partitions,
        )

    async def sweep_runs(self) -> int:
        """Delete finished runs older than the retention (with all they own); how many. None
        retention: none.

        First every droppable event log partition goes whole (`ledger.runlog.partitions`), then
        the expired runs of due partitions go one by one (those of the dropped partitions with no
        events left), in batches of `retention_batch_size`, at most `retention_pass_cap`.
        """
        retention = self.retention
        if retention is None:
            return 0
        dropped = await self.drop_partitions()
        runs = await self._sweep_batches(
            lambda conn, now, limit: self._delete_expired(conn, now, retention, limit),
            batch_size=self.retention_batch_size,
            cap=self.retention_pass_cap,
        )
        self._count(Swept(runs=runs, partitions=len(dropped)))
        if runs:
            _log.info(
                "watchdog deleted %d finished run(s) past retention"
                " (%d event log partition(s) dropped whole)",
                runs,
                len(dropped),
            )
        return runs

    async def _delete_expired(self, conn: Conn, now: datetime, retention: timedelta, limit: int) -> int:
        cutoff = run_retention.cutoff(now, retention)
        boundary = await partitions.per_run_boundary(conn, cutoff)
        return await run_retention.delete_expired_runs(conn, cutoff, boundary, limit=limit)

    async def drop_partitions(self) -> list[partitions.Partition]:
        """Drop every event log partition whose runs have all ended before the retention cutoff
        (and any a cancelled drop left detached); the ones dropped.

        A session that keeps a detach or drop waiting past `detach_wait_s` stops this pass's
        drops (the next would wait for it too): `retention_blocked` names it until a later pass
        gets through."""
        self.retention_blocked = None
        if self.retention is None:
            return []
        async with self.db.connection() as conn:
            if await partitions.conversion_pending(conn):
                self.retention_blocked = HeldBySession(
                    "the event log is being converted (`ledger db convert`): no partition is dropped"
                    " until it is done"
                )
                return []
            now = await self.clock.now(conn)
            due = await partitions.due_partitions(conn, run_retention.cutoff(now, self.retention))
            leftovers = await partitions.detached_leftovers(conn)
        steps: list[tuple[str, Callable[[], Awaitable[partitions.Partition | None]]]] = [
            (name, functools.partial(self._drop_detached, name)) for name in leftovers
        ]
        steps += [
            (d.partition.name, functools.partial(self._drop_counted, d.partition)) for d in due if not d.held
        ]
        dropped: list[partitions.Partition] = []
        for name, step in steps:
            try:
                result = await step()
            except HeldBySession as exc:
                self.retention_blocked = exc
                _log.warning("watchdog left event log partition %s for a later pass: %s", name, exc)
                break
            except SchemaMissing:
                # Another replica's retention dropped it first.
                continue
            except (LedgerFailure, ConfigError) as exc:
                # Its runs then wait for the next pass; the per-run delete goes on meanwhile.
                _log.warning("watchdog could not drop event log partition %s: %s", name, exc)
                continue
            if result is not None:
                dropped.append(result)
        return dropped

    async def _drop_detached(self, name: str) -> None:
        await partitions.drop_detached(self.db, name, wait_s=self.detach_wait_s)
        _log.info("watchdog dropped the detached event log partition %s", name)

    async def _drop_counted(self, partition: partitions.Partition) -> partitions.Partition:
        await partitions.drop_partition(self.db, partition, wait_s=self.detach_wait_s)
        self.partitions_dropped += 1
        _log.info("watchdog dropped event log partition %s whole", partition.name)
        return partition

    async def plan_retention(self) -> _RetentionPlan:
        """What `sweep_runs` would delete now (uncapped), deleting nothing."""
        if self.retention is None:
            return _RetentionPlan([], 0)
        async with self.db.connection() as conn:
            now = await self.clock.now(conn)
            cutoff = run_retention.cutoff(now, self.retention)
            due = await partitions.due_partitions(conn, cutoff)
            whole = [(d.partition, await partitions.runs_in(conn, d.partition)) for d in due if not d.held]
            boundary = await partitions.per_run_boundary(conn, cutoff)
            expired = await run_retention.count_expired_runs(conn, cutoff, boundary)
        return _RetentionPlan(whole, expired - sum(runs for _, runs in whole))

    async def count_expired_runs(self) -> int:
        """How many finished runs `sweep_runs` would delete now (uncapped)."""
        return (await self.plan_retention()).runs

    async def make_partitions(self) -> list[str]:
        """Make the event log partition of now and the next ones ahead (`partitions.ensure_ahead`)."""
        async with self.db.connection() as conn:
            now = await self.clock.now(conn)
        return await partitions.ensure_ahead(self.db, now)

    async def _sweep_batches(
        self, sweep: _Sweep, *, batch_size: int | None = None, cap: int | None = None
    ) -> int:
        total = 0
        while True:
            limit = batch_size or self.sweep_batch_size
            if cap is not None:
                limit = min(limit, cap - total)
                if limit <= 0:
                    return total
            async with self.db.transaction() as conn:
                deleted = await sweep(conn, await self.clock.now(conn), limit)
            total += deleted
            # A short batch means the rest is gone or held by others (skipped): done for this pass.
            if deleted < limit:
                return total

    async def run_forever(self) -> None:
        """Run a pass, make the event log partitions ahead and sweep expired mappings and keys
        every `interval_s`; a failing one is logged and retried next interval. Retention is
        `retain_forever`'s, apart from this loop."""
        while True:
            if not self._limit_recorded:
                try:
                    await self.record_stall_limit()
                except Exception:
                    _log.exception("watchdog could not record its stall limit (next pass retries)")
            try:
                await self.run_once()
            except Exception:
                _log.exception("watchdog pass failed")
            try:
                await self.make_partitions()
            except Exception:
                _log.exception("watchdog could not make the event log partitions ahead")
            try:
                await self.sweep_expired()
            except Exception:
                _log.exception("watchdog sweep failed")
            await self._sleep(self.interval_s)

    async def retain_forever(self) -> None:
        """Delete finished runs past retention every `interval_s` (`sweep_runs`); a failing sweep is
        logged and retried next interval."""
        while True:
            try:
                await self.sweep_runs()
            except Exception:
                _log.exception("watchdog retention sweep failed")
            await self._sleep(self.interval_s)

    def start(self) -> None:
        """Run `run_forever` and, with a retention, `retain_forever` in the background (in the
        running event loop)."""
        if self._tasks:
            return
        # Ticks of the service's own: not traced unless asked (`ledger.tracing.upkeep`).
        with tracing.upkeep():
            self._tasks.append(asyncio.create_task(self.run_forever(), name="ledger-watchdog"))
            if self.retention is not None:
                self._tasks.append(asyncio.create_task(self.retain_forever(), name="ledger-retention"))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
