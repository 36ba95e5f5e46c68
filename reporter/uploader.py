"""The coalescing single-flight uploader.

Design. At most one upload is in flight, run by one *pump* task; nobody awaits that task, so a
caller that is cancelled never cancels the upload the other callers are waiting for. A flush
request that arrives while an upload is in flight merges into the one pending request:

* a terminal status (``completed``/``failed``/``cancelled``) beats ``interrupted``, which beats
  ``running``;
* each caller keeps its own ``required``: a failed upload rejects the required callers it carried,
  whatever they merged with, and resolves the best-effort ones;
* a terminal log replay, once asked for, is kept;
* every caller's future is resolved (or, for required callers, rejected) by the merged upload.

The pump takes a `Snapshot` of the state *when it starts the upload*, so a pending request always
carries everything folded up to then. Best-effort flushes are throttled by an adaptive interval
(1.5 s below 10k rows, 8 s below 100k, 15 s below 1M, 30 s from 1M on); forced ones are not. A
throttled request that leaves changes behind arms one *trailing* timer so a quiet stream still
lands within an interval (without it, its last changes would wait for the next event or the final
flush).

Exactly once. Every upload carries ``upload_seq`` (1, 2, … within the attempt) and is built once:
an upload whose outcome is unknown (a lost connection, a lost answer, a timeout) is kept *unacked*
and sent again, byte for byte under the same ``upload_seq``, before anything newer. The ledger
absorbs it as a late duplicate if the first delivery was applied, or applies it now; either way its
one-shot events (dataset lifecycle, activity observations) land once, which resending them inside a
newer upload could not promise. A ``duplicate`` answer to an upload that was never delivered before
means another reporter already used that ``upload_seq`` of the attempt (one that was not started
with resume): it raises `DuplicateUpload` instead of passing for a success.

Size. Every upload stays under the service's body limit: the uploader asks the transport for it
once before its first upload (`body_limit`, when the transport can tell), keeps its items under the
bounds of that limit (`reporter.sanitize`) and, when the items together are still too big, splits
the upload into successive ones (`reporter.bounded.split_upload`), each with its own
``upload_seq``, the status in the last. They are all kept *unacked* until each has landed, so a
fault in the middle loses none of them. A 413 (`PayloadTooLarge`) teaches a smaller limit: the one it
names, else half of the body it refused; the uploads not yet applied are split again under it.

Every loop here ends. No body larger than the limit in force is ever sent: an upload that cannot be
split to fit it (its fixed part alone is too big) stops the uploader with `UploadCannotFit`, naming
why, before a request is made. So each 413 at least halves the limit (or adopts a smaller one the
service names), and after `MAX_REFUSED_AS_TOO_LARGE` of them for one upload, or a limit below
`_MIN_BODY_BYTES`, the uploader stops the same way: an upload costs a bounded number of requests.
The contract's step list (``pipeline_steps``, bounded in bytes by `reporter.sanitize`) travels only
until an upload carrying it has landed: the ledger keeps it from then on.

An upload the ledger refused (a `LedgerError`: nothing was written) gives its one-shot events back
to the state. Failures reject only the required callers. `StaleAttempt` (another attempt owns
the run), `RunTerminal` (someone else ended the run) and `DuplicateUpload` stop the
uploader for good: nothing more is sent. ``is_current_attempt()`` is asked before every new upload;
a stale attempt uploads nothing. Each upload is made storable first (`reporter.sanitize`). Clock and
sleep are injectable so tests never wait for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ledger import validate
from ledger.errors import (
    DuplicateUpload,
    LedgerError,
    LedgerFailure,
    PayloadTooLarge,
    RunTerminal,
    StaleAttempt,
    Unauthorized,
)
from ledger.validate import UploadBounds, encode_body
from reporter.bounded import split_upload
from reporter.sanitize import Sanitizer, sanitize_upload
from reporter.state import ProgressState, Snapshot
from reporter.transports.protocol import Transport, terminal_message

__all__ = [
    "IN_FLIGHT_WAIT_S",
    "MAX_REFUSED_AS_TOO_LARGE",
    "CoalescingUploader",
    "FlushRequest",
    "Status",
    "UploadCannotFit",
    "epoch_ms_now",
    "interval_for_total_rows",
    "pipeline_step_list",
]

Status = Literal["running", "interrupted", "completed", "failed", "cancelled"]
# How a merged request's status is chosen: the later in this order wins.
_STATUS_RANK: Final[dict[str, int]] = {"running": 0, "interrupted": 1}
# The statuses that leave the run in flight (every other one ends it).
_IN_FLIGHT: Final = frozenset(_STATUS_RANK)
# Below this a 413 is not answered by splitting further: no useful upload is that small.
_MIN_BODY_BYTES = 4_096
# The 413s one upload may draw before the uploader stops: each at least halves the limit, and from
# the default limit to `_MIN_BODY_BYTES` takes 8 halvings.
MAX_REFUSED_AS_TOO_LARGE: Final = 12
# Once `aclose`'s time is up, how long the request in flight still has before it is cancelled.
IN_FLIGHT_WAIT_S: Final = 10.0


class UploadCannotFit(PayloadTooLarge):
    """An upload that fits the service's body limit in no split: the uploader stops."""


# The refusals that stop the uploader for good; any other refusal costs only the upload it refused.
# A refused token is one: every later upload would be refused the same way.
_STOPPING: Final = (StaleAttempt, RunTerminal, DuplicateUpload, Unauthorized, UploadCannotFit)

_log = logging.getLogger("reporter.uploader")


def interval_for_total_rows(total_rows: int) -> float:
    """Seconds between best-effort uploads for a run of `total_rows` rows."""
    if total_rows >= 1_000_000:
        return 30.0
    if total_rows >= 100_000:
        return 15.0
    if total_rows >= 10_000:
        return 8.0
    return 1.5


def epoch_ms_now() -> int:
    """Epoch milliseconds now: the default time source for `updated_at` stamps."""
    return time.time_ns() // 1_000_000  # no float on the way: stamped on every folded event


@dataclass(kw_only=True)
class FlushRequest:
    status: Status = "running"
    terminal_log_replay: dict[str, Any] | None = None
    # Each caller's future with its own `required`: that, not the merged request, decides whether a
    # failure rejects it.
    waiters: list[tuple[asyncio.Future[None], bool]] = field(default_factory=list)
    error: str | None = None  # the run's terminal error, with a terminal status
    interruption: dict[str, Any] | None = None  # why the reporter stopped, with `interrupted`
    whole_tail: bool = False  # the last upload of a batch: it carries the tail past any hole

    def merge(self, other: FlushRequest) -> FlushRequest:
        """This pending request with `other` folded in (see the module docstring)."""
        rank = _STATUS_RANK.get
        final = other if rank(other.status, 2) >= rank(self.status, 2) else self
        return FlushRequest(
            status=final.status,
            terminal_log_replay=other.terminal_log_replay or self.terminal_log_replay,
            waiters=self.waiters + other.waiters,
            error=final.error,
            interruption=final.interruption,
            whole_tail=self.whole_tail or other.whole_tail,
        )


@dataclass(slots=True)
class _Unacked:
    """An upload built but not acknowledged: its body (resent as is), whether it was sent yet,
    and the replay that its request carried. Its one-shot events go back to the state if the
    ledger refuses it."""

    body: dict[str, Any]
    replay: dict[str, Any] | None
    sent: bool = False

    def one_shot(self) -> Snapshot:
        """The one-shot events this body carries, as a snapshot to give back to the state."""
        return Snapshot(
            live_node_progress={},
            live_logs=[],
            live_log_total_count=0,
            dataset_lifecycle_events=list(self.body["dataset_lifecycle_events"]),
            activity_observations=list(self.body["activity_observations"]),
            dropped_one_shot_events=int(self.body.get("dropped_one_shot_events") or 0),
        )


class CoalescingUploader:
    """Sends `ProgressState` snapshots through a `Transport`, one at a time."""

    # Set once the ledger answered an upload of ours that ends the run: it takes nothing after it,
    # so a running request that came meanwhile (a trailing flush while the transport was still
    # retrying the final upload) is not sent after it.
    ended = False
    # Until when the last flush's interval runs, for the run's rows then: set by every flush, read
    # by `schedule` only while a trailing flush is armed, which only a flush does.
    _quiet_rows: int
    _quiet_until: float

    def __init__(
        self,
        *,
        run_id: str,
        state: ProgressState,
        transport: Transport,
        producer_attempt: int = 1,
        is_current_attempt: Callable[[], bool | Awaitable[bool]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock_ms: Callable[[], int] = epoch_ms_now,
        interval: Callable[[int], float] = interval_for_total_rows,
        initial_upload_seq: int = 0,
        trailing_flush: bool = True,
        sanitizer: Sanitizer | None = None,
        pipeline_steps: Sequence[str] = (),
    ) -> None:
        self.run_id = run_id
        # The contract's steps, in every upload until one carrying them has landed: the ledger shows
        # them all from then on.
        self.pipeline_steps = pipeline_step_list(pipeline_steps)
        self.pipeline_steps_landed = False
        self.state = state
        self.transport = transport
        self.producer_attempt = producer_attempt
        self._is_current_attempt = is_current_attempt
        self._clock = clock
        self._sleep = sleep
        self._wall_clock_ms = wall_clock_ms
        self._interval = interval
        self._trailing_enabled = trailing_flush
        self.upload_seq = initial_upload_seq
        self.uploads_made = 0
        self.failed_uploads = 0
        self.stopped = False
        self.stop_reason: LedgerError | None = None
        # Set when the uploader stops for good, so whoever feeds it can stop too.
        self.stopped_event = asyncio.Event()
        self.sanitizer = sanitizer or Sanitizer(run_id, state.bounds)
        # The uploads built but not acknowledged (the first one's outcome may be unknown), sent in
        # order before anything newer.
        self._unacked: list[_Unacked] = []
        self._limit_asked = False
        self._last_flush_at: float | None = None
        self._pending: FlushRequest | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._trailing_task: asyncio.Task[None] | None = None
        self._idle_waiters: list[asyncio.Future[None]] = []
        # Set by `aclose` once its time is up: no request starts from then on.
        self.halted = False
        self.cancelled_in_flight = False

    # -- requests ---------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """True while an upload is in flight or pending."""
        return self._pump_task is not None or self._pending is not None

    def schedule(self, force: bool = False) -> None:
        """A best-effort flush nobody waits for (the synchronous event path calls this).

        Without a running event loop (a synchronous caller) it does nothing: the state keeps the
        change and the next flush from async code, or finalize, sends it.
        """
        # The common case on the event path, decided without the loop: a flush was made within
        # the interval and the trailing flush that will carry this change is already armed. (The
        # interval is the one for the run's rows at that flush; with other rows `_request`
        # decides.)
        if (
            not force
            and self._trailing_task is not None
            and self.state.total_rows == self._quiet_rows
            and self._clock() < self._quiet_until
        ):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._request(force=force, status="running", required=False, replay=None, waiter=False)

    async def flush(
        self,
        *,
        force: bool = False,
        status: Status = "running",
        required: bool = False,
        terminal_log_replay: dict[str, Any] | None = None,
        error: str | None = None,
        interruption: dict[str, Any] | None = None,
        whole_tail: bool = False,
    ) -> None:
        """Request an upload and wait until the upload that carries it is done.

        Raises the transport's error only when `required` (or a merged request was required and
        this caller asked for `required` too); best-effort callers always return normally.
        """
        future = self._request(
            force=force,
            status=status,
            required=required,
            replay=terminal_log_replay,
            waiter=True,
            error=error,
            interruption=interruption,
            whole_tail=whole_tail or status != "running" or terminal_log_replay is not None,
        )
        if future is not None:
            await future

    def _request(
        self,
        *,
        force: bool,
        status: Status,
        required: bool,
        replay: dict[str, Any] | None,
        waiter: bool,
        error: str | None = None,
        interruption: dict[str, Any] | None = None,
        whole_tail: bool = False,
    ) -> asyncio.Future[None] | None:
        loop = asyncio.get_running_loop()
        if self.stopped:
            if required and waiter:
                failed: asyncio.Future[None] = loop.create_future()
                failed.set_exception(self._stopped_error())
                return failed
            return None
        if not force and not self.state.has_changes and not self._unacked:
            return self._idle_future(loop) if waiter else None
        now = self._clock()
        if (
            not force
            and self._last_flush_at is not None
            and now - self._last_flush_at < self._interval(self.state.total_rows)
        ):
            self._arm_trailing(self._last_flush_at + self._interval(self.state.total_rows) - now)
            return self._idle_future(loop) if waiter else None
        self._last_flush_at = now
        self._quiet_rows = self.state.total_rows
        self._quiet_until = now + self._interval(self._quiet_rows)
        request = FlushRequest(
            status=status,
            terminal_log_replay=replay,
            error=error,
            interruption=interruption,
            whole_tail=whole_tail,
        )
        future: asyncio.Future[None] | None = None
        if waiter:
            future = loop.create_future()
            request.waiters.append((future, required))
        self._pending = request if self._pending is None else self._pending.merge(request)
        if self._pump_task is None:
            self._pump_task = loop.create_task(self._pump(), name=f"reporter-upload-{self.run_id}")
        return future

    def _idle_future(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """Resolves when the uploads in flight are done (at once when there are none)."""
        future: asyncio.Future[None] = loop.create_future()
        if self._pump_task is None:
            future.set_result(None)
        else:
            self._idle_waiters.append(future)
        return future

    def _arm_trailing(self, delay: float) -> None:
        if not self._trailing_enabled or self._trailing_task is not None:
            return
        self._trailing_task = asyncio.get_running_loop().create_task(self._trailing(max(0.0, delay)))

    async def _trailing(self, delay: float) -> None:
        try:
            await self._sleep(delay)
        finally:
            self._trailing_task = None
        # A flush that an event triggered meanwhile re-arms the timer (through the throttle)
        # instead of doubling up with it.
        self._request(force=False, status="running", required=False, replay=None, waiter=False)

    # -- the pump ---------------------------------------------------------------------------------

    async def _pump(self) -> None:
        try:
            while self._pending is not None and not self.halted:
                request, self._pending = self._pending, None
                if self.ended and request.status in _IN_FLIGHT:
                    _settle(request, None)
                else:
                    await self._upload(request)
        finally:
            self._pump_task = None
            idle, self._idle_waiters = self._idle_waiters, []
            for future in idle:
                if not future.done():
                    future.set_result(None)
            if self._pending is not None and not self.stopped and not self.halted:
                self._pump_task = asyncio.get_running_loop().create_task(self._pump())

    async def _current_attempt(self) -> bool:
        if self._is_current_attempt is None:
            return True
        answer = self._is_current_attempt()
        if inspect.isawaitable(answer):
            answer = await answer
        return bool(answer)

    def _stopped_error(self) -> LedgerError:
        if self.stop_reason is not None:
            return self.stop_reason
        return StaleAttempt(
            self.run_id,
            self.producer_attempt,
            self.producer_attempt,
            f"reporter for run {self.run_id!r} was stopped",
        )

    @property
    def has_unacked(self) -> bool:
        """True while an upload whose outcome is unknown waits to be sent again."""
        return bool(self._unacked)

    @property
    def bounds(self) -> UploadBounds:
        return self.state.bounds

    def adopt_body_limit(self, max_body_bytes: int) -> None:
        """Keep every upload from now on under `max_body_bytes` (the service's limit)."""
        bounds = UploadBounds.for_body_limit(max_body_bytes)
        self.state.bounds = self.sanitizer.bounds = bounds
        self.state.trim_logs()

    async def learn_body_limit(self) -> None:
        """Ask the transport for the service's body limit, once (a transport that cannot tell, or
        a failed answer, leaves the default; a 413 still teaches it)."""
        if self._limit_asked:
            return
        self._limit_asked = True
        ask = getattr(self.transport, "body_limit", None)
        if ask is None:
            return
        try:
            limit = await ask()
        except LedgerFailure as exc:
            _log.warning("run %s: cannot read the service's limits (%s); using the default", self.run_id, exc)
            return
        if isinstance(limit, int) and limit > 0:
            self.adopt_body_limit(limit)

    async def _upload(self, request: FlushRequest) -> None:
        if self.stopped:
            _settle(request, self._stopped_error())
            return
        try:
            await self.learn_body_limit()
            if self._unacked and await self._resend_covers(request):
                _settle(request, None)
                return
            if await self._current_attempt():
                snapshot = self.state.snapshot(whole_tail=request.whole_tail)
                body = self.payload(request, snapshot, self.upload_seq + 1)
                self._unacked = self._numbered(body, request.terminal_log_replay)
                await self._send_unacked()
        except LedgerError as exc:
            self._refused(exc)
            _settle(request, exc)
            return
        except asyncio.CancelledError:
            for future, _ in request.waiters:
                future.cancel()
            raise
        except Exception as exc:
            # Outcome unknown: the unacked upload stays, and the next request sends it again.
            self.failed_uploads += 1
            _log.warning("run %s: progress upload failed: %s", self.run_id, exc)
            _settle(request, exc)
            return
        _settle(request, None)

    def _numbered(self, body: dict[str, Any], replay: dict[str, Any] | None) -> list[_Unacked]:
        """`body` split to fit the body limit, each part numbered with the next ``upload_seq`` and
        kept with the `replay` its request carried."""
        parts: list[_Unacked] = []
        limit = self.bounds.max_body_bytes
        for part in split_upload(body, limit, shrunk=self._shrunk):
            self.upload_seq += 1
            numbered = {**part, "upload_seq": self.upload_seq}
            size = len(encode_body(numbered))
            if size > limit:
                # What is left is the part no split can shrink (ids, the step list, the error).
                self.upload_seq -= len(parts) + 1
                raise UploadCannotFit(
                    f"an upload of run {self.run_id} cannot fit the service's body limit of {limit} "
                    f"bytes in any split (its smallest part takes {size} bytes)",
                    limit,
                )
            parts.append(_Unacked(numbered, replay))
        return parts

    def _shrunk(self, kind: str) -> None:
        self.sanitizer.counts[f"oversized {kind}"] += 1

    async def _send_unacked(self) -> None:
        """Send the unacknowledged uploads in order; a 413 naming a smaller limit splits those not
        yet applied again under it (nothing of a 413 was applied) and goes on."""
        refused = 0
        while self._unacked and not self.halted:
            first = self._unacked[0]
            redelivery, first.sent = first.sent, True
            try:
                await self._deliver(first.body, redelivery=redelivery)
            except PayloadTooLarge as exc:
                refused += 1
                limit = exc.max_body_bytes
                if limit is None or limit >= self.bounds.max_body_bytes:
                    # A 413 naming no smaller limit (a proxy's, say): half of what it refused.
                    limit = len(encode_body(first.body)) // 2
                if limit < _MIN_BODY_BYTES or refused > MAX_REFUSED_AS_TOO_LARGE:
                    raise UploadCannotFit(
                        f"the service refused {refused} upload(s) of run {self.run_id} as too large, the "
                        f"last of {len(encode_body(first.body))} bytes ({exc}); no split fits",
                        exc.max_body_bytes,
                    ) from exc
                self._split_again(limit)
                continue
            self._unacked.pop(0)
            self.uploads_made += 1
            if "pipeline_steps" in first.body:
                self.pipeline_steps_landed = True

    def _split_again(self, max_body_bytes: int) -> None:
        _log.warning("run %s: the ledger takes bodies of at most %d bytes", self.run_id, max_body_bytes)
        self.adopt_body_limit(max_body_bytes)
        pending, self._unacked = self._unacked, []
        self.upload_seq = pending[0].body["upload_seq"] - 1  # none of them was applied
        for unacked in pending:
            # The body carries its status and error; the parts split from it carry them on.
            body = sanitize_upload(unacked.body, self.sanitizer)
            self._unacked.extend(self._numbered(body, unacked.replay))

    async def _resend_covers(self, request: FlushRequest) -> bool:
        """Send the unacked uploads again; True when they already carry all `request` asks for."""
        last = self._unacked[-1]
        await self._send_unacked()
        # They were built from the state as it then was: if nothing changed since and they had
        # the same status and replay, another upload would only repeat them.
        return (
            not self.state.has_changes
            and not (request.whole_tail and self.state.log_hole_after is not None)
            and last.body["status"] == request.status
            and (request.terminal_log_replay is None or last.replay is request.terminal_log_replay)
        )

    async def _deliver(self, payload: dict[str, Any], *, redelivery: bool) -> None:
        answer = await self.transport.upload(payload)
        self.ended = self.ended or payload["status"] not in _IN_FLIGHT
        if redelivery or answer.get("redelivered"):
            return  # an earlier delivery of this very upload may be what the answer found
        terminal = answer.get("terminal")
        if isinstance(terminal, dict):
            # The run had ended before this upload, which changed nothing: someone else ended it.
            raise RunTerminal(terminal_message(self.run_id, terminal), self.run_id, terminal)
        if answer.get("duplicate") is True:
            raise DuplicateUpload(
                f"the ledger already holds upload {payload['upload_seq']} of attempt "
                f"{self.producer_attempt} of run {self.run_id} from another reporter: this one "
                "changed nothing (start a reporter that continues an attempt with resume)"
            )

    def _refused(self, exc: LedgerError) -> None:
        stops = isinstance(exc, _STOPPING)
        if not stops and self._unacked:
            # Refused whole, nothing written (nor was anything after it sent): their one-shot
            # events go out with a later upload.
            for unacked in reversed(self._unacked):
                self.state.requeue(unacked.one_shot())
            self._unacked = []
            self.failed_uploads += 1
            _log.warning("run %s: progress upload refused: %s", self.run_id, exc)
            return
        if not stops:
            self.failed_uploads += 1
            return
        self.stop(exc)
        # Not a warning: every caller that waits for an upload from now on gets `exc` itself.
        if isinstance(exc, StaleAttempt):
            _log.info("run %s: stale producer attempt %s, reporter stops", self.run_id, self.producer_attempt)
        else:
            _log.info("run %s: reporter stops: %s", self.run_id, exc)

    def stop(self, reason: LedgerError) -> None:
        """Upload nothing more: the ledger refused this reporter for good (`reason`)."""
        self.stopped, self.stop_reason = True, reason
        self.stopped_event.set()

    def payload(self, request: FlushRequest, snapshot: Snapshot, upload_seq: int) -> dict[str, Any]:
        """The status upload (the ledger's snake_case body) for one snapshot."""
        body: dict[str, Any] = {
            "run_id": self.run_id,
            "upload_seq": upload_seq,
            "status": request.status,
            "producer_attempt": self.producer_attempt,
            "live_node_progress": snapshot.live_node_progress,
            "live_logs": snapshot.live_logs,
            "live_log_total_count": snapshot.live_log_total_count,
            "dataset_lifecycle_events": snapshot.dataset_lifecycle_events,
            "activity_observations": snapshot.activity_observations,
            "terminal_log_replay": request.terminal_log_replay,
            "last_checkpoint_at": self._wall_clock_ms(),
        }
        if snapshot.dropped_one_shot_events:
            body["dropped_one_shot_events"] = snapshot.dropped_one_shot_events
        if self.pipeline_steps and not self.pipeline_steps_landed:
            body["pipeline_steps"] = self.pipeline_steps
        if snapshot.step_positions:
            body["step_positions"] = snapshot.step_positions
        if request.error is not None and request.status not in ("running", "interrupted"):
            body["error"] = request.error
        if request.interruption is not None and request.status == "interrupted":
            body["interruption"] = request.interruption
        return sanitize_upload(body, self.sanitizer)

    async def aclose(self, *, timeout_s: float | None = None) -> None:
        """Stop the trailing timer and wait for the uploads in flight: for as long as they take, or
        (`timeout_s`) that long; then no further request starts, the one in flight has
        `IN_FLIGHT_WAIT_S` more to end, and is cancelled after that (`cancelled_in_flight`: its
        outcome is unknown, the ledger may still apply it)."""
        if self._trailing_task is not None:
            self._trailing_task.cancel()
            self._trailing_task = None
        if await self._pumped_within(timeout_s):
            return
        self.halted = True
        if await self._pumped_within(IN_FLIGHT_WAIT_S):
            return
        pump = self._pump_task
        if pump is not None:
            self.cancelled_in_flight = True
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _pumped_within(self, timeout_s: float | None) -> bool:
        """Whether the pump has nothing left to do within `timeout_s` (None: however long)."""
        try:
            async with asyncio.timeout(timeout_s):
                while self._pump_task is not None:
                    await asyncio.shield(self._pump_task)
        except TimeoutError:
            return False
        return True


def pipeline_step_list(node_ids: Sequence[str]) -> list[str]:
    """The step ids the ledger takes as `pipeline_steps`: valid, each once, at most its limit (in
    count; `reporter.sanitize` bounds them in bytes for each upload)."""
    steps: dict[str, None] = {}
    for node_id in node_ids:
        if len(steps) == validate.MAX_PIPELINE_STEPS:
            break
        if node_id not in steps and _valid_node_id(node_id):
            steps[node_id] = None
    return list(steps)


def _valid_node_id(node_id: object) -> bool:
    try:
        validate.node_id("pipeline_steps", node_id)
    except validate.InvalidInput:
        return False
    return True


def _settle(request: FlushRequest, error: BaseException | None) -> None:
    for future, required in request.waiters:
        if future.done():
            continue  # that caller was cancelled; the others still get their answer
        if error is not None and required:
            future.set_exception(error)
        else:
            future.set_result(None)
