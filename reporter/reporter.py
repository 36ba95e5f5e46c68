"""`ProgressReporter`: the runner's events in, progress uploads out, terminal truth at the end.

Feed it synchronously from the worker's event loop (`on_runner_event` never awaits and never does
I/O); it folds the events into node progress and asks its single-flight uploader for throttled
uploads. At the end, `finalize` applies the terminal step transitions (steps still open fail with
a run that failed or was cancelled, complete with one that completed), then reconciles the map
nodes from the result's checkpoint and then from the sheet outcomes (the reconciliation of record:
it settles counts, not whether a step failed), adds the terminal log replay and makes one forced
upload that must succeed for a terminal status.

A reporter stopped before its input ended (a signal) lands what it holds with `interrupt`: the run
is then ``interrupted`` (it stays in flight, its steps as they were) until a reporter continues it
with `resume`, or it ends it failed or cancelled.

A result's status is one of the ledger's terminal statuses (``completed``, ``failed``,
``cancelled``: the run ends so) or ``suspended`` (the run stays in flight: end the batch instead,
`end_batch`); `result_status_problem` says what is wrong with any other.

The end of a run is where faults cost the most, so there the reporter does not give up on a fault
it can outlast: a lost connection, a timeout or a 503 is retried (with backoff) until the finalize
deadline, for the final upload and for the reads of the terminal truth alike. The retrying is the
transport's, by the ledger's one retry policy: the reporter passes its deadline down
(`Transport.deadline`) and keeps no loop of its own, so one try never outlasts the deadline. What
the ledger refuses stops it at once: a newer attempt (`StaleAttempt`), a run someone else ended
(`RunTerminal`), another reporter's uploads of this attempt (`DuplicateUpload`).

Typical use::

    reporter = ProgressReporter(run_id, transport, contract=contract)
    await reporter.resume()                     # only when continuing an attempt's earlier batch
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
from typing import Any, cast

from ledger.errors import LedgerError, LedgerFailure, RunTerminal, StaleAttempt
from ledger.validate import LIVE_LOG_TAIL_LIMIT, TERMINAL_STATUSES
from reporter.folding import EventFolder
from reporter.lifecycle import StepState
from reporter.pipeline import StaticPipeline
from reporter.replay import build_terminal_replay
from reporter.state import DEFAULT_MAX_PENDING_ONE_SHOT, ProgressState
from reporter.transports.protocol import Transport, terminal_message
from reporter.uploader import CoalescingUploader, Status, epoch_ms_now, interval_for_total_rows
from reporter.wire import LogMode

__all__ = [
    "DEFAULT_FINALIZE_DEADLINE_S",
    "INTERRUPT_ENDS",
    "IN_FLIGHT_RESULT_STATUSES",
    "NO_RESULT_ERROR",
    "RESULT_STATUSES",
    "ProgressReporter",
    "interrupted_error",
    "result_status_problem",
]

_log = logging.getLogger("reporter")

DEFAULT_FINALIZE_DEADLINE_S = 120.0

# How an interrupted reporter may end its run instead of leaving it resumable, and the status each
# gives the run.
INTERRUPT_ENDS: dict[str, Status] = {"fail": "failed", "cancel": "cancelled"}

# A result status that leaves the run in flight: the batch ends, a later reporter continues it.
IN_FLIGHT_RESULT_STATUSES = ("suspended",)
RESULT_STATUSES = (*TERMINAL_STATUSES, *IN_FLIGHT_RESULT_STATUSES)


def result_status_problem(result: Mapping[str, Any]) -> str | None:
    """Why a runner's result cannot end the run as it says (its status is missing or not one of
    `RESULT_STATUSES`): the run's terminal error, or None when it can."""
    status = result.get("status")
    if isinstance(status, str) and status in RESULT_STATUSES:
        return None
    return f"the runner reported status {_shown(status)}, which the ledger does not take"


# The run's terminal error when the runner's output ends without a result line.
NO_RESULT_ERROR = "the runner's output ended without a result line"


def interrupted_error(signal_name: str) -> str:
    """The run's terminal error when an interrupted reporter ends it."""
    return f"the reporter was interrupted ({signal_name})"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ProgressReporter:
    """The worker-side progress reporter of one run attempt: fed synchronously, uploads in the background."""

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
            pipeline_steps=[node.node_id for node in self.pipeline.nodes],
        )
        self._sheet_outcomes: list[Mapping[str, Any]] = []
        self.folder = EventFolder(
            self.state,
            self.pipeline,
            mode=mode,
            schedule=self.uploader.schedule,
            sanitizer=self.uploader.sanitizer,
        )
        # The hot path: fold one raw runner event (synchronous, cheap, never raises on junk). The
        # folder's own method, not a method of ours calling it: one call less on every event.
        self.on_runner_event: Callable[[object], None] = self.folder.on_runner_event

    # -- terminal truth ---------------------------------------------------------------------------

    @property
    def stopped(self) -> bool:
        """True once the ledger said a newer attempt owns the run; nothing more is uploaded."""
        return self.uploader.stopped

    def step_states(self) -> dict[str, StepState]:
        return self.folder.step_states()

    def apply_terminal_sheet_outcomes(self, outcomes: Iterable[object]) -> None:
        """Remember the sheet outcomes; `finalize` applies them after the checkpoint frames."""
        self._sheet_outcomes = [o for o in outcomes if isinstance(o, Mapping)]

    def apply_durable_observations(self, observations: Iterable[object]) -> None:
        """Fold durable node observations that are at least as recent as the live node I/O."""
        self.folder.apply_observations(observations)

    async def resume(self, *, deadline_s: float | None = DEFAULT_FINALIZE_DEADLINE_S) -> None:
        """Continue this attempt where the ledger has it: after its last applied ``upload_seq``,
        its log count and its steps' progress. Call it before feeding the first event.

        A run the ledger does not know yet starts from the beginning. A newer attempt raises
        `StaleAttempt`, a run already ended `RunTerminal`; the reporter then stops.
        """
        if self.uploader.busy or self.uploader.upload_seq or self.uploader.has_unacked:
            raise RuntimeError("resume() must come before this reporter uploads anything")
        with self.transport.deadline(deadline_s):
            run = await self.transport.run_state(self.run_id)
        if run is None:
            return
        attempt = int(run.get("producer_attempt") or 0)
        try:
            if isinstance(run.get("terminal"), dict):
                raise RunTerminal(
                    terminal_message(self.run_id, run["terminal"]), self.run_id, run["terminal"]
                )
            if attempt > self.uploader.producer_attempt:
                raise StaleAttempt(
                    self.run_id,
                    self.uploader.producer_attempt,
                    attempt,
                    f"run {self.run_id} is on attempt {attempt}, newer than {self.uploader.producer_attempt}",
                )
        except LedgerError as exc:
            self.uploader.stop(exc)
            raise
        if attempt < self.uploader.producer_attempt:
            return  # this reporter's attempt is new to the ledger: it starts from the beginning
        self.uploader.upload_seq = max(self.uploader.upload_seq, int(run.get("last_upload_seq") or 0))
        delivered = int(run.get("live_log_count") or 0)
        self.folder.restore(run.get("live_node_progress"))
        if delivered:
            # The live tail as the first reporter left it: the terminal replay drops what it holds.
            with self.transport.deadline(deadline_s):
                tail = await self.transport.recent_log_lines(self.run_id, min(delivered, LIVE_LOG_TAIL_LIMIT))
            self.state.restore_logs(tail, delivered)

    async def load_terminal_truth(self, *, deadline_s: float | None = DEFAULT_FINALIZE_DEADLINE_S) -> None:
        """Read sheet outcomes and node observations through the transport.

        Failed reads are retried until `deadline_s`; if they still fail, this raises rather than
        let `finalize` reconcile from partial truth.
        """
        with self.transport.deadline(deadline_s):
            outcomes = await self.transport.sheet_outcomes(self.run_id)
            observations = await self.transport.node_observations(self.run_id)
        self.apply_terminal_sheet_outcomes(outcomes)
        self.apply_durable_observations(observations)

    def reconcile_terminal(self, result: Mapping[str, Any] | None) -> None:
        """Rewrite map nodes from the checkpoint frames, then from the sheet outcomes (they win)."""
        self.folder.reconcile(result, self._sheet_outcomes)

    async def flush(self, *, force: bool = False, required: bool = False, whole_tail: bool = False) -> None:
        """A running-status upload now (forced) or when the interval allows (best effort);
        `whole_tail` makes it carry the live tail past a hole in it, as a batch's last does."""
        await self.uploader.flush(force=force, required=required, whole_tail=whole_tail)

    async def end_batch(self, *, deadline_s: float | None = DEFAULT_FINALIZE_DEADLINE_S) -> None:
        """End this reporter's batch without finalizing the run: one forced running upload that
        must land (retried until `deadline_s`). A later reporter continues with `resume`."""
        with self.transport.deadline(deadline_s):
            await self.uploader.flush(force=True, required=True, whole_tail=True)

    async def finalize(
        self,
        result: Mapping[str, Any] | None = None,
        *,
        status: Status | None = None,
        required: bool = False,
        replay_all_terminal_logs: bool = False,
        skip_terminal_log_replay: bool = False,
        deadline_s: float | None = DEFAULT_FINALIZE_DEADLINE_S,
        error: str | None = None,
    ) -> None:
        """Terminal transitions, reconciliation, replay and the final forced upload.

        `status` defaults to the result's ``status`` when that is a terminal status (completed,
        failed, cancelled), else ``running``; `error` is the run's terminal error. The upload is
        required for a terminal status (or when `required`): a fault of unknown outcome is retried
        until `deadline_s` (`TimeoutError` then), a refusal raises at once; the upload in flight is
        not cancelled by the deadline.
        """
        finalizing = self._finalize(
            result, status, required, replay_all_terminal_logs, skip_terminal_log_replay, error
        )
        # The transport's retries end by the deadline; the timeout ends a call that hangs.
        with self.transport.deadline(deadline_s):
            async with asyncio.timeout(deadline_s):
                await finalizing

    async def _finalize(
        self,
        result: Mapping[str, Any] | None,
        status: Status | None,
        required: bool,
        replay_all: bool,
        skip_replay: bool,
        error: str | None,
    ) -> None:
        result_status = result.get("status") if isinstance(result, Mapping) else None
        outcome = cast(Status, result_status) if result_status in TERMINAL_STATUSES else None
        final: Status = status or outcome or "running"
        required = required or final != "running"
        if outcome is not None:
            # The steps' ends first: a step the run left open ends as the run did, whatever counts
            # reconciliation then gives it (a map whose own end was lost still failed with the run).
            self.folder.finish(outcome)
            self.reconcile_terminal(result)
        if final == "failed" and self.state.has_changes and not self.uploader.stopped:
            # The ledger records a step that first shows completed in a *failed* upload as failed.
            # Steps that finished before the run failed (or that reconciliation shows settled)
            # must land in a running upload first.
            await self.uploader.flush(force=True, required=required)
        replay = None
        logs = result.get("logs") if isinstance(result, Mapping) else None
        if not skip_replay and isinstance(logs, list):
            replay = build_terminal_replay(
                logs,
                mode=self.mode,
                live_logs=self.state.logs,
                live_log_total_count=self.state.log_total_count,
                replay_all=replay_all,
                line_bytes=self.state.bounds.log_line_bytes,
            )
        try:
            # Even a running finalize outlasts faults within the deadline: it is the last upload
            # this reporter makes, and an unacknowledged one would never be sent again.
            await self.uploader.flush(
                force=True,
                status=final,
                required=True,
                terminal_log_replay=replay,
                error=error,
                whole_tail=True,
            )
        except LedgerFailure as exc:
            if required or isinstance(exc, LedgerError):
                raise
            _log.warning("run %s: the final progress upload failed: %s", self.run_id, exc)

    async def interrupt(
        self, signal_name: str, *, end: str | None = None, deadline_s: float = DEFAULT_FINALIZE_DEADLINE_S
    ) -> None:
        """The reporter was stopped (by `signal_name`) before its input ended: land what it holds
        within `deadline_s` (`TimeoutError` after). By default the run is left ``interrupted``,
        its steps as they are, for a reporter that resumes it (`resume`); `end` (``fail`` or
        ``cancel``, `INTERRUPT_ENDS`) ends it instead, its open steps with it."""
        reason = interrupted_error(signal_name)
        if end is not None:
            await self.finalize(
                {"type": "result", "status": INTERRUPT_ENDS[end]}, error=reason, deadline_s=deadline_s
            )
            return
        with self.transport.deadline(deadline_s):
            async with asyncio.timeout(deadline_s):
                await self.uploader.flush(
                    force=True,
                    status="interrupted",
                    required=True,
                    interruption={"reason": reason, "signal": signal_name},
                )

    async def aclose(self, *, timeout_s: float | None = None) -> None:
        """Stop the trailing timer and wait for the upload in flight (at most `timeout_s`, then it
        is cancelled)."""
        await self.uploader.aclose(timeout_s=timeout_s)
