"""The watchdog: fail runs whose orchestrator went quiet (SPEC 2.6, the third seed's failStalledRun).

A non-terminal run with no event for `stall_after_s` is failed with `WATCHDOG_ERROR` through the
normal first-terminal-wins path, so its readers stop waiting. Every replica of the service may run
it: each pass locks the stalled runs with `FOR UPDATE SKIP LOCKED`, so two watchdogs never work on
the same run at once, and a run that got an event or a terminal state meanwhile no longer matches
(Postgres re-checks the condition on the newest row version when it locks it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Final

from ledger.clock import Clock, DatabaseClock
from ledger.db import Database
from ledger.events import WATCHDOG_ERROR, TerminalState
from ledger.runlog import DEFAULT_MAX_EVENTS_PER_RUN, RunLog, lock_stalled_runs, set_terminal_in_transaction

log = logging.getLogger(__name__)

DEFAULT_STALL_AFTER_S: Final = 300.0
DEFAULT_INTERVAL_S: Final = 30.0
DEFAULT_BATCH_SIZE: Final = 100

Sleep = Callable[[float], Awaitable[None]]


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
        batch_size: int = DEFAULT_BATCH_SIZE,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.db = db
        self.stall_after = timedelta(seconds=stall_after_s)
        self.interval_s = interval_s
        self.clock: Clock = clock or (runlog.clock if runlog and runlog.clock else DatabaseClock())
        self.max_events_per_run = runlog.max_events_per_run if runlog else DEFAULT_MAX_EVENTS_PER_RUN
        self.batch_size = batch_size
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        self.failed_total = 0

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
            log.warning("watchdog failed %d stalled run(s): %s", len(failed), ", ".join(failed))
        return failed

    async def run_forever(self) -> None:
        """Run a pass every `interval_s`; a failing pass is logged and retried next interval."""
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("watchdog pass failed")
            await self._sleep(self.interval_s)

    def start(self) -> None:
        """Run `run_forever` in the background (in the running event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self.run_forever(), name="ledger-watchdog")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
