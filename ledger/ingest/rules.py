"""Status ingestion rules: decide what a checked reporter upload changes. No I/O here.

`plan_upload(run_id, state, upload)` takes the run's ingestion state (`IngestState`, read from the
locked runs row) and a `StatusUpload` checked by `ledger.ingest.upload`, and returns an
`IngestPlan`: the events to append, in order, and the state to store. `ledger.ingest.store` runs it
inside the transaction that holds the row.

Design notes:

- **Attempt fence.** An upload from an attempt older than the run's raises `StaleAttempt`; a newer
  one is adopted and gets a fresh positional log channel and a fresh upload counter. An upload
  without `producer_attempt` belongs to the run's current attempt (it is not fenced). A newer
  attempt more than `max_attempt_step` above the current one is refused (`InvalidInput`): one
  upload claiming attempt 2^31-1 would otherwise fence every real producer out of the run for good.
- **Upload order.** Per attempt, an upload whose `upload_seq` is not above the last applied one is a
  late duplicate: the plan is `duplicate=True` with no events and the state unchanged.
- **Positional logs.** The live tail covers positions `total - len(tail) + 1 … total` of the
  attempt's channel; `delivered` (runs.live_log_count) says how far the ledger already holds. Only
  positions beyond it are appended; positions that are neither held nor in the tail are reported as
  one `log.gap`. The count never goes down.
- **Terminal log replay** is placed on the same channel: in `exact` mode (a recovered run whose
  replay is the attempt's complete log buffer) at offset 0, i.e. positions `1 … N`; in `positional`
  mode right after the upload's `live_log_total_count` (the replayed lines continue after the
  lines the live stream carried). An explicit `total_count` (the attempt's line count including
  the replay) overrides either offset to `total_count - N`. In exact mode a replay whose digest
  (attempt + lines) equals the last replay applied is absorbed whole.
- **Steps.** The uploaded nodes are diffed against the stored snapshot (missing nodes are kept, an
  uploaded node replaces its stored entry): newly `started_at` → `step.started`; any count changed
  → `step.progress`; a state newly settled → `step.completed|failed|cancelled|skipped`. Each node
  is stored with its `state`: the one it carries, else the one `ledger.runlog.steps` derives from
  its fields (a node completing in an upload whose status is `failed`, or whose `node_io.error` is
  set, failed; one completed in an earlier upload stays completed). An upload with a terminal
  status settles every step still open (a running one takes the run's outcome, a pending one is
  skipped) and announces each (`steps.settle_steps`).
- **Pipeline steps.** `pipeline_steps` is the contract's step list, in pipeline order: each step
  gets an entry in the snapshot from the first upload on (a `pending` one while it has not started:
  the views count it in `steps_total`, the dashboard shows it pending) and its index as `position`,
  kept when an uploaded node replaces its entry, so readers can list the steps in pipeline order.
  An uploaded node never sets `position` itself.
- **Activity.** Per `activityId` the newest `observedAt` wins; an observation that is not newer
  than the watermark (equal included: a re-delivery) appends nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ledger import validate
from ledger.errors import InvalidInput, StaleAttempt
from ledger.ingest.upload import (
    INTERRUPTED,
    TERMINAL_UPLOAD_STATUSES,
    Interruption,
    NodeSnapshot,
    StatusUpload,
    replay_end,
)
from ledger.runlog import steps
from ledger.runlog.events import TERMINAL_STATUSES

__all__ = [
    "DEFAULT_MAX_ATTEMPT_STEP",
    "IngestPlan",
    "IngestState",
    "LogSource",
    "diff_steps",
    "fence_attempt",
    "in_runner_order",
    "interruption_events",
    "is_late_duplicate",
    "newer_activities",
    "place_logs",
    "place_steps",
    "plan_upload",
    "replay_digest",
    "settle_upload",
    "step_counts",
    "with_pipeline",
]

# How far above the run's current producer attempt an upload may jump (retries that never
# uploaded are skipped over; a forged or corrupted attempt number is not).
DEFAULT_MAX_ATTEMPT_STEP = 10

_COUNT_FIELDS = validate.NODE_COUNT_FIELDS
_TEXT_FIELDS: tuple[str, ...] = ("message", "artifact_table_namespace")
# What a `step.progress` event carries of its node.
_PROGRESS_FIELDS = (*_COUNT_FIELDS, *_TEXT_FIELDS)

_Event = dict[str, Any]


def with_pipeline(snapshot: NodeSnapshot, pipeline: Sequence[str], stored: Mapping[str, Any]) -> NodeSnapshot:
    """`snapshot` with an entry for every step of the pipeline and each one's `position`; a node
    the upload replaced keeps the position its `stored` entry had."""
    for node_id, node in list(snapshot.items()):
        old = stored.get(node_id)
        if "position" not in node and isinstance(old, Mapping) and "position" in old:
            snapshot[node_id] = {**node, "position": old["position"]}
    for position, node_id in enumerate(pipeline):
        entry = snapshot.get(node_id)
        if entry is None:
            snapshot[node_id] = {"position": position, "state": "pending"}
        elif entry.get("position") != position:
            snapshot[node_id] = {**entry, "position": position}
    return snapshot


# -- the run's ingestion state and the plan ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class IngestState:
    """The ingestion columns of a runs row."""

    producer_attempt: int = 0
    last_upload_seq: int = 0
    live_log_count: int = 0
    live_node_progress: NodeSnapshot = field(default_factory=dict)
    activity_watermarks: dict[str, float | int] = field(default_factory=dict)
    replay_digest: str | None = None
    status: str = "running"  # the run's status (`interrupted` while it waits for a resume)


@dataclass(frozen=True, kw_only=True)
class IngestPlan:
    """What one upload changes: `events` to append in order, and the `state` to store."""

    duplicate: bool
    state: IngestState
    events: tuple[_Event, ...] = ()
    steps_changed: tuple[str, ...] = ()
    logs_appended: int = 0
    log_gap: int = 0


def fence_attempt(
    run_id: str, current: int, uploaded: int | None, max_step: int = DEFAULT_MAX_ATTEMPT_STEP
) -> tuple[int, bool]:
    """The attempt the upload belongs to and whether it is newly adopted; older → `StaleAttempt`,
    more than `max_step` newer → `InvalidInput`."""
    if uploaded is None or uploaded == current:
        return current, False
    if uploaded < current:
        raise StaleAttempt(run_id, uploaded, current)
    if uploaded - current > max_step:
        raise InvalidInput(
            "producer_attempt",
            f"{uploaded} is more than {max_step} above the run's current attempt {current}",
        )
    return uploaded, True


def is_late_duplicate(last_upload_seq: int, upload_seq: int | None) -> bool:
    """True when an upload was already applied or superseded within its attempt."""
    return upload_seq is not None and upload_seq <= last_upload_seq


def replay_digest(attempt: int, lines: Sequence[str]) -> str:
    """A digest of a terminal replay, bound to the attempt that sent it."""
    return hashlib.sha256(json.dumps([attempt, list(lines)]).encode()).hexdigest()


def step_counts(node: Mapping[str, Any]) -> list[Any]:
    """The node's counts (`validate.NODE_COUNT_FIELDS`, in order, None where absent): a node whose
    counts equal its stored entry's makes no progress event."""
    # `map` over the bound method: no Python frame per node (a comprehension has one).
    return list(map(node.get, _COUNT_FIELDS))


def diff_steps(
    stored: Mapping[str, dict[str, Any]],
    uploaded: Mapping[str, dict[str, Any]],
    run_status: str,
    error: str | None = None,
) -> tuple[list[_Event], list[str], NodeSnapshot]:
    """Step events for the uploaded nodes, the ids of the nodes that changed, and the new snapshot
    (each uploaded node stored with its state; `error` is the upload's terminal error)."""
    events: list[_Event] = []
    changed: list[str] = []
    # Node dicts are never changed in place (an uploaded node replaces its entry): a shallow copy.
    snapshot: NodeSnapshot = dict(stored)
    for node_id, uploaded_node in uploaded.items():
        old = stored.get(node_id, {})
        # The upload's status speaks for the nodes completing in it, not those completed before.
        node = steps.with_state(uploaded_node, run_status if old.get("completed_at") is None else None, error)
        # A node that is its stored entry (but for the `position` the pipeline gave the entry) has
        # the stored start, counts and state: no event.
        if node == old or ("position" in old and {**node, "position": old["position"]} == old):
            snapshot[node_id] = node
            continue
        node_events: list[_Event] = []
        if node.get("started_at") is not None and old.get("started_at") is None:
            node_events.append({"type": "step.started", "node_id": node_id, "started_at": node["started_at"]})
        if step_counts(node) != step_counts(old):
            progress: _Event = {"type": "step.progress", "node_id": node_id}
            for key in _PROGRESS_FIELDS:
                value = node.get(key)
                if value is not None:
                    progress[key] = value
            node_events.append(progress)
        state = node["state"]
        if state in steps.SETTLED_STATES and state != steps.derived_state(old):
            node_events.append(steps.settlement_event(node_id, node))
        if node_events:
            changed.append(node_id)
            events.extend(node_events)
        snapshot[node_id] = node
    return events, changed, snapshot


def settle_upload(
    stored: Mapping[str, Any], snapshot: NodeSnapshot, upload: StatusUpload
) -> tuple[list[_Event], NodeSnapshot]:
    """An upload with a terminal status settles the steps it leaves open (`steps.settle_steps`):
    the run ends in the transaction that applies it. Any other upload settles nothing."""
    if upload.status not in TERMINAL_UPLOAD_STATUSES:
        return [], snapshot
    return steps.settle_steps(stored, snapshot, upload.status, upload.error)


def newer_activities(
    watermarks: Mapping[str, float | int], observations: Sequence[Mapping[str, Any]]
) -> tuple[list[_Event], dict[str, float | int]]:
    """`activity.observed` events for observations newer than their activity's watermark."""
    marks = dict(watermarks)
    events: list[_Event] = []
    for observation in observations:
        activity_id = observation["activityId"]
        observed_at = observation["observedAt"]
        mark = marks.get(activity_id)
        if mark is not None and observed_at <= mark:
            continue
        marks[activity_id] = observed_at
        events.append(
            {
                "type": "activity.observed",
                "activity_id": activity_id,
                "observed_at": observed_at,
                "observation": dict(observation),
            }
        )
    return events, marks


def _gap_event(missing: int, after: int, attempt: int) -> _Event:
    return {"type": "log.gap", "missing": missing, "after_position": after, "producer_attempt": attempt}


# Where an event goes in the upload's order: after the log line at `position` (`rank` _AFTER),
# before it (`rank` _BEFORE: a gap that starts there), or it is that line (`rank` _AT).
_Placed = tuple[int, int, _Event]
_BEFORE, _AT, _AFTER = -1, 0, 1


@dataclass(frozen=True)
class LogSource:
    """Lines at consecutive channel positions, the first at `start`."""

    start: int
    lines: Sequence[str]

    @property
    def end(self) -> int:
        return self.start + len(self.lines) - 1


def place_logs(
    delivered: int, sources: Sequence[LogSource], attempt: int
) -> tuple[list[_Placed], int, int, int]:
    """The log lines of `sources` the channel does not hold yet (it holds `delivered`), each once,
    in position order, and one `log.gap` per run of positions no source carries; a position two
    sources carry is taken from the first. Returns the placed events, the lines appended, the
    positions missing and the channel's new count."""
    placed: list[_Placed] = []
    # An empty source still says how far the channel reaches (a tail that lost all its lines).
    end = max((source.end for source in sources), default=delivered)
    cursor = delivered + 1
    appended = missing = 0
    while cursor <= end:
        covering = next((s for s in sources if s.lines and s.start <= cursor <= s.end), None)
        if covering is None:
            following = min((s.start for s in sources if s.lines and s.start > cursor), default=end + 1)
            placed.append((cursor, _BEFORE, _gap_event(following - cursor, cursor - 1, attempt)))
            missing += following - cursor
            cursor = following
            continue
        for index in range(cursor - covering.start, len(covering.lines)):
            placed.append((covering.start + index, _AT, {"type": "log", "line": covering.lines[index]}))
        appended += covering.end - cursor + 1
        cursor = covering.end + 1
    return placed, appended, missing, max(delivered, end)


def _step_position_key(kind: str) -> str:
    if kind == "step.started":
        return "started"
    if kind == "step.progress":
        return "progress"
    return "settled"


def place_steps(
    step_events: Sequence[_Event], positions: Mapping[str, Mapping[str, int]], default: int
) -> list[_Placed]:
    """Each step event after the log line its transition followed (`positions`, by node), or
    after line `default` when the reporter did not say; a node's events keep their order."""
    placed: list[_Placed] = []
    last: dict[str, int] = {}
    for event in step_events:
        node_id = str(event.get("node_id"))
        position = positions.get(node_id, {}).get(_step_position_key(str(event["type"])), default)
        position = max(position, last.get(node_id, position))
        last[node_id] = position
        placed.append((position, _AFTER, event))
    return placed


def in_runner_order(*placed: list[_Placed]) -> list[_Event]:
    """The events of `placed` by position (stable: equal places keep their given order)."""
    merged = [item for group in placed for item in group]
    merged.sort(key=lambda item: (item[0], item[1]))
    return [event for _, _, event in merged]


def interruption_events(stored_status: str, upload: StatusUpload) -> tuple[list[_Event], list[_Event]]:
    """The events that go before and after the upload's own when it changes whether the run is
    interrupted: `reporter.resumed` first when an interrupted run hears from a reporter again,
    `reporter.interrupted` last when the reporter says it stopped."""
    if stored_status == INTERRUPTED and upload.status != INTERRUPTED:
        return [{"type": "reporter.resumed", "status": upload.status}], []
    if upload.status == INTERRUPTED and stored_status != INTERRUPTED:
        why = upload.interruption or Interruption()
        return [], [{"type": "reporter.interrupted", "reason": why.reason, "signal": why.signal}]
    return [], []


def plan_upload(
    run_id: str,
    state: IngestState,
    upload: StatusUpload,
    *,
    max_attempt_step: int = DEFAULT_MAX_ATTEMPT_STEP,
) -> IngestPlan:
    """Decide what `upload` changes on a run in `state` (see the module docstring)."""
    attempt, adopted = fence_attempt(
        run_id, state.producer_attempt, upload.producer_attempt, max_attempt_step
    )
    if adopted:
        state = replace(state, producer_attempt=attempt, last_upload_seq=0, live_log_count=0)
    if is_late_duplicate(state.last_upload_seq, upload.upload_seq):
        return IngestPlan(duplicate=True, state=state)
    delivered = state.live_log_count
    sources = [LogSource(upload.live_log_total_count - len(upload.live_logs) + 1, upload.live_logs)]
    digest = state.replay_digest
    replay = upload.terminal_log_replay
    if replay is not None and replay.lines:
        new_digest = replay_digest(attempt, replay.lines)
        if not (replay.dedupe_mode == "exact" and new_digest == state.replay_digest):
            end = replay_end(replay, upload.live_log_total_count)
            sources.append(LogSource(end - len(replay.lines) + 1, replay.lines))
        digest = new_digest
    # A position the live tail and the replay both carry is the same line; where the tail lost
    # lines the replay fills them, so only what neither carries is a gap.
    log_events, logs_appended, gap, delivered = place_logs(delivered, sources, attempt)

    step_events, changed, snapshot = diff_steps(
        state.live_node_progress, upload.live_node_progress, upload.status, upload.error
    )
    snapshot = with_pipeline(snapshot, upload.pipeline_steps, state.live_node_progress)
    settle_events, snapshot = settle_upload(state.live_node_progress, snapshot, upload)
    changed.extend(e["node_id"] for e in settle_events if e["node_id"] not in changed)
    before, after = interruption_events(state.status, upload)
    # Log lines and step transitions in the order the runner wrote them: each transition after
    # the line it followed; a transition without a position after this upload's live lines.
    events: list[_Event] = [
        *before,
        *in_runner_order(
            log_events,
            place_steps(step_events, upload.step_positions, upload.live_log_total_count),
        ),
    ]
    events.extend({"type": "dataset.lifecycle", "event": dict(e)} for e in upload.dataset_lifecycle_events)
    activity_events, marks = newer_activities(state.activity_watermarks, upload.activity_observations)
    events.extend(activity_events)
    events.extend(after)
    # The steps the run's end settles come last, right before its terminal event.
    events.extend(settle_events)

    new_state = IngestState(
        producer_attempt=attempt,
        last_upload_seq=upload.upload_seq if upload.upload_seq is not None else state.last_upload_seq,
        live_log_count=delivered,
        live_node_progress=snapshot,
        activity_watermarks=marks,
        replay_digest=digest,
        status=state.status if state.status in TERMINAL_STATUSES else upload.status,
    )
    return IngestPlan(
        duplicate=False,
        state=new_state,
        events=tuple(events),
        steps_changed=tuple(changed),
        logs_appended=logs_appended,
        log_gap=gap,
    )
