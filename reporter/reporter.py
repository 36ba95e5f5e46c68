"""`ProgressReporter`: the runner's events in, progress uploads out, terminal truth at the end.

Feed it synchronously from the worker's event loop (`on_runner_event` never awaits and never does
I/O); it folds the events into node progress and asks its single-flight uploader for throttled
uploads. At the end, `finalize` applies the terminal step transitions, reconciles the map nodes
from the result's checkpoint and then from the sheet outcomes (the reconciliation of record), adds
the terminal log replay and makes one forced upload that must succeed for a terminal status.

Typical use::

    reporter = ProgressReporter(run_id, transport, contract=contract)
    for event in runner_events:
        reporter.on_runner_event(event)
    await reporter.load_terminal_truth()        # sheet outcomes + node observations
    await reporter.finalize(result)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from reporter import reconcile
from reporter.folding import EventFolder, LogMode
from reporter.lifecycle import StepState
from reporter.pipeline import StaticPipeline
from reporter.replay import build_terminal_replay
from reporter.state import DEFAULT_MAX_PENDING_ONE_SHOT, ProgressState
from reporter.transport import Transport
from reporter.uploader import CoalescingUploader, Status, epoch_ms_now, interval_for_total_rows

log = logging.getLogger("reporter")

DEFAULT_FINALIZE_DEADLINE_S = 120.0


class ProgressReporter:
    """The worker-side progress reporter of one run attempt (SPEC 3)."""

    def __init__(
        self,
        run_id: str,
        transport: Transport,
        *,
        contract: object = None,
        mode: LogMode = "progress_reporter",
        producer_attempt: int = 1,
        is_current_attempt: Callable[[], bool | Awaitable[bool]] | None = None,
        initial_live_log_total_count: int = 0,
        initial_upload_seq: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock_ms: Callable[[], int] = epoch_ms_now,
        interval: Callable[[int], float] = interval_for_total_rows,
        trailing_flush: bool = True,
        max_pending_one_shot: int = DEFAULT_MAX_PENDING_ONE_SHOT,
    ) -> None:
        if mode not in ("progress_reporter", "direct_worker"):
            raise ValueError(f"mode: must be progress_reporter or direct_worker, not {mode!r}")
        self.run_id = run_id
        self.transport = transport
        self.mode: LogMode = mode
        self.wall_clock_ms = wall_clock_ms
        self.pipeline = StaticPipeline(contract)
        self.state = ProgressState(
            now_ms=wall_clock_ms,
            initial_live_log_total_count=initial_live_log_total_count,
            max_pending_one_shot=max_pending_one_shot,
        )
        self.uploader = CoalescingUploader(
            run_id=run_id,
            state=self.state,
            transport=transport,
            producer_attempt=producer_attempt,
            is_current_attempt=is_current_attempt,
            clock=clock,
            sleep=sleep,
            wall_clock_ms=wall_clock_ms,
            interval=interval,
            initial_upload_seq=initial_upload_seq,
            trailing_flush=trailing_flush,
        )
        self._sheet_outcomes: list[Mapping[str, Any]] = []
        self.folder = EventFolder(self.state, self.pipeline, mode=mode, schedule=self._schedule)

    def _schedule(self, force: bool) -> None:
        self.uploader.schedule(force)

    # -- the hot path -----------------------------------------------------------------------------

    def on_runner_event(self, event: object) -> None:
        """Fold one raw runner event (synchronous, cheap, never raises on junk)."""
        self.folder.on_runner_event(event)

    # -- terminal truth ---------------------------------------------------------------------------

    @property
    def stopped(self) -> bool:
        """True once the ledger said a newer attempt owns the run; nothing more is uploaded."""
        return self.uploader.stopped

    def step_states(self) -> dict[str, StepState]:
        return self.folder.lifecycle.states()

    def apply_terminal_sheet_outcomes(self, outcomes: Iterable[object]) -> None:
        """Remember the sheet outcomes; `finalize` applies them after the checkpoint frames."""
        self._sheet_outcomes = [o for o in outcomes if isinstance(o, Mapping)]

    def apply_durable_observations(self, observations: Iterable[object]) -> None:
        """Fold durable node observations that are at least as recent as the live node I/O."""
        for node_id, patch in reconcile.observation_patches(
            observations, self.state.nodes, self.wall_clock_ms()
        ):
            self.state.set_node_progress(node_id, patch)

    async def load_terminal_truth(self) -> None:
        """Read sheet outcomes and node observations through the transport (best effort)."""
        try:
            self.apply_terminal_sheet_outcomes(await self.transport.sheet_outcomes(self.run_id))
        except Exception as exc:
            log.warning("run %s: cannot read sheet outcomes: %s", self.run_id, exc)
        try:
            self.apply_durable_observations(await self.transport.node_observations(self.run_id))
        except Exception as exc:
            log.warning("run %s: cannot read node observations: %s", self.run_id, exc)

    def reconcile_terminal(self, result: Mapping[str, Any] | None) -> None:
        """Rewrite map nodes from the checkpoint frames, then from the sheet outcomes (they win)."""
        now = self.wall_clock_ms()
        for node_id, patch in reconcile.checkpoint_patches(result, self.pipeline, self.state.nodes, now):
            self.state.set_node_progress(node_id, patch)
        for node_id, patch in reconcile.sheet_outcome_patches(
            self._sheet_outcomes, self.pipeline, self.state.nodes, now
        ):
            self.state.set_node_progress(node_id, patch)
        self.state.progress_dirty = True

    async def flush(self, *, force: bool = False, required: bool = False) -> None:
        """A running-status upload now (forced) or when the interval allows (best effort)."""
        await self.uploader.flush(force=force, required=required)

    async def finalize(
        self,
        result: Mapping[str, Any] | None = None,
        *,
        status: Status | None = None,
        required: bool = False,
        replay_all_terminal_logs: bool = False,
        skip_terminal_log_replay: bool = False,
        deadline_s: float | None = DEFAULT_FINALIZE_DEADLINE_S,
    ) -> None:
        """Terminal transitions, reconciliation, replay and the final forced upload.

        `status` defaults to the result's ``status`` when that is ``completed``/``failed``, else
        ``running``. The upload is required for a terminal status (or when `required`): its
        failure raises, and so does missing the `deadline_s` (`TimeoutError`); the upload itself
        is not cancelled by the deadline.
        """
        if deadline_s is None:
            await self._finalize(result, status, required, replay_all_terminal_logs, skip_terminal_log_replay)
            return
        async with asyncio.timeout(deadline_s):
            await self._finalize(result, status, required, replay_all_terminal_logs, skip_terminal_log_replay)

    async def _finalize(
        self,
        result: Mapping[str, Any] | None,
        status: Status | None,
        required: bool,
        replay_all: bool,
        skip_replay: bool,
    ) -> None:
        result_status = result.get("status") if isinstance(result, Mapping) else None
        if status is None:
            status = result_status if result_status in ("completed", "failed") else "running"
        if status == "failed" and self.state.has_changes and not self.uploader.stopped:
            # The ledger records a step that first shows completed in a *failed* upload as failed.
            # Steps that finished before the run failed must land in a running upload first.
            await self.uploader.flush(force=True)
        if result_status == "failed":
            self.folder.lifecycle.mark_started_failed()
        elif result_status == "completed":
            self.folder.lifecycle.mark_all_terminal()
        if result_status in ("completed", "failed"):
            self.reconcile_terminal(result)
        replay = None
        logs = result.get("logs") if isinstance(result, Mapping) else None
        if not skip_replay and isinstance(logs, list):
            replay = build_terminal_replay(
                logs,
                mode=self.mode,
                live_logs=self.state.logs,
                live_log_total_count=self.state.log_total_count,
                replay_all=replay_all,
            )
        await self.uploader.flush(
            force=True,
            status=status,
            required=required or status != "running",
            terminal_log_replay=replay,
        )

    async def aclose(self) -> None:
        """Stop the trailing timer and wait for the upload in flight."""
        await self.uploader.aclose()
