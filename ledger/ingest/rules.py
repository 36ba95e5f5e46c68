"""Status ingestion rules: validate a reporter upload and decide what it changes. No I/O here.

`plan_upload(run_id, state, upload)` takes the run's ingestion state (`IngestState`, read from the
locked runs row) and a validated `StatusUpload`, and returns an `IngestPlan`: the events to append,
in order, and the state to store. `ledger.ingest.store` runs it inside the transaction that holds the row.

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
from typing import Any, Literal

from ledger import validate
from ledger.errors import InvalidInput, StaleAttempt
from ledger.runlog import steps
from ledger.runlog.events import TERMINAL_STATUSES
from ledger.validate import INT32_MAX, INT64_MAX, LIVE_LOG_TAIL_LIMIT, MAX_PIPELINE_STEPS

__all__ = [
    "DEFAULT_MAX_ATTEMPT_STEP",
    "TERMINAL_UPLOAD_STATUSES",
    "UPLOAD_STATUSES",
    "IngestPlan",
    "IngestState",
    "LogReplay",
    "StatusUpload",
    "UploadKey",
    "diff_steps",
    "fence_attempt",
    "is_late_duplicate",
    "newer_activities",
    "node_failed",
    "parse_node",
    "parse_upload",
    "plan_upload",
    "positional_slice",
    "replay_digest",
    "replay_end",
    "settle_upload",
    "upload_key",
    "with_pipeline",
]

# An upload's status: still running, or one of the ledger's terminal statuses (which end the run).
TERMINAL_UPLOAD_STATUSES = TERMINAL_STATUSES
UPLOAD_STATUSES = ("running", *TERMINAL_UPLOAD_STATUSES)
_REPLAY_MODES = ("exact", "positional")
# How far above the run's current producer attempt an upload may jump (retries that never
# uploaded are skipped over; a forged or corrupted attempt number is not).
DEFAULT_MAX_ATTEMPT_STEP = 10

_COUNT_FIELDS = validate.NODE_COUNT_FIELDS
_TEXT_FIELDS: tuple[str, ...] = ("message", "artifact_table_namespace")

_Event = dict[str, Any]
_NodeSnapshot = dict[str, dict[str, Any]]


# -- the validated upload ------------------------------------------------------------------------


@dataclass(frozen=True)
class LogReplay:
    """`terminal_log_replay`: lines placed on the attempt's positional channel."""

    lines: tuple[str, ...]
    dedupe_mode: Literal["exact", "positional"] = "positional"
    total_count: int | None = None


@dataclass(frozen=True, kw_only=True)
class StatusUpload:
    """One reporter upload, validated; unknown extra fields were dropped."""

    status: str
    upload_seq: int | None = None
    producer_attempt: int | None = None
    live_node_progress: _NodeSnapshot = field(default_factory=dict)
    live_logs: tuple[str, ...] = ()
    live_log_total_count: int = 0
    dataset_lifecycle_events: tuple[dict[str, Any], ...] = ()
    activity_observations: tuple[dict[str, Any], ...] = ()
    terminal_log_replay: LogReplay | None = None
    last_checkpoint_at: int | None = None
    dropped_one_shot_events: int = 0
    pipeline_steps: tuple[str, ...] = ()
    error: str | None = None  # the run's terminal error, with a terminal status


def _int(name: str, value: object, *, minimum: int = 0, maximum: int | None = INT64_MAX) -> int:
    # JSON from JavaScript may carry integral floats (3.0); anything else is a type error.
    return validate.required_integer(name, value, minimum=minimum, maximum=maximum, integral_float=True)


def _optional_int(
    name: str, value: object, *, minimum: int = 0, maximum: int | None = INT64_MAX
) -> int | None:
    return None if value is None else _int(name, value, minimum=minimum, maximum=maximum)


def _list(name: str, value: object) -> list[Any]:
    return [] if value is None else validate.items(name, value, "items")


def _object(name: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(name, f"must be an object, got {type(value).__name__}")
    return value


def _lines(name: str, value: object) -> tuple[str, ...]:
    # Log lines are free text: repaired and bounded (`validate.log_line`), never refused.
    return tuple(validate.log_line_list(name, value))


# The bounds `validate.node_field` checks an integer field against: a plain int within them is
# what it would return unchanged, so it is taken as is (the common case, most fields of every node).
_INT_FIELD_BOUNDS: dict[str, int] = {
    **dict.fromkeys(validate.NODE_COUNT_FIELDS, INT64_MAX),
    **dict.fromkeys(validate.NODE_TIME_FIELDS, validate.MAX_EPOCH_MS),
}


def parse_node(name: str, value: object) -> dict[str, Any]:
    """One node's progress with only the known fields, `None`s dropped (unknown keys ignored)."""
    raw = _object(name, value)
    node: dict[str, Any] = {}
    for key in validate.NODE_FIELDS:
        item = raw.get(key)
        if item is None:
            continue
        bound = _INT_FIELD_BOUNDS.get(key)
        if bound is not None and type(item) is int and 0 <= item <= bound:
            node[key] = item
        else:
            node[key] = validate.node_field(f"{name}.{key}", key, item)
    return node


def _parse_replay(value: object) -> LogReplay | None:
    if value is None:
        return None
    raw = _object("terminal_log_replay", value)
    lines = _lines("terminal_log_replay.lines", raw.get("lines"))
    mode = raw.get("dedupe_mode")
    # Absent, null or empty means the default; any other value must name a mode.
    if mode is None or mode == "":
        mode = "positional"
    if mode not in _REPLAY_MODES:
        raise InvalidInput("terminal_log_replay.dedupe_mode", f"must be one of {', '.join(_REPLAY_MODES)}")
    total = _optional_int("terminal_log_replay.total_count", raw.get("total_count"))
    if total is not None and total < len(lines):
        raise InvalidInput("terminal_log_replay.total_count", "is smaller than the number of lines")
    return LogReplay(lines=lines, dedupe_mode="exact" if mode == "exact" else "positional", total_count=total)


def parse_upload(run_id: str, body: object) -> StatusUpload:
    """Validate a status upload; `InvalidInput` names the first bad field and nothing is applied.

    The URL's `run_id` wins; a body `run_id` that differs is an error. Unknown top-level fields are
    ignored (forward compatibility with newer reporters).
    """
    raw = _object("body", body)
    body_run_id = raw.get("run_id")
    if body_run_id is not None and body_run_id != run_id:
        raise InvalidInput("run_id", f"{body_run_id!r} does not match the run {run_id!r} in the URL")
    status = raw.get("status")
    if status not in UPLOAD_STATUSES:
        raise InvalidInput("status", f"must be one of {', '.join(UPLOAD_STATUSES)}, got {status!r}")
    raw_progress = raw.get("live_node_progress")
    progress = {} if raw_progress is None else _object("live_node_progress", raw_progress)
    nodes: _NodeSnapshot = {}
    for node_id, node in progress.items():
        try:
            validate.node_id("live_node_progress", node_id)
        except InvalidInput:
            raise InvalidInput(
                "live_node_progress", "node ids must be non-empty strings without NUL or lone surrogates"
            ) from None
        nodes[node_id] = parse_node(f"live_node_progress.{node_id}", node)
    logs = _lines("live_logs", raw.get("live_logs"))
    if len(logs) > LIVE_LOG_TAIL_LIMIT:
        raise InvalidInput("live_logs", f"holds {len(logs)} lines; the tail is at most {LIVE_LOG_TAIL_LIMIT}")
    total = _optional_int("live_log_total_count", raw.get("live_log_total_count"))
    if total is None:
        total = len(logs)
    if total < len(logs):
        raise InvalidInput("live_log_total_count", f"{total} is smaller than the {len(logs)}-line tail")
    lifecycle = tuple(
        validate.dataset_lifecycle_event(f"dataset_lifecycle_events[{i}]", event)
        for i, event in enumerate(_list("dataset_lifecycle_events", raw.get("dataset_lifecycle_events")))
    )
    observations = tuple(
        validate.activity_observation(f"activity_observations[{i}]", obs)
        for i, obs in enumerate(_list("activity_observations", raw.get("activity_observations")))
    )
    steps = _pipeline_steps(raw.get("pipeline_steps"))
    replay = _parse_replay(raw.get("terminal_log_replay"))
    if replay is not None and replay_end(replay, total) > INT64_MAX:  # runs.live_log_count is bigint
        raise InvalidInput("terminal_log_replay", f"would place lines beyond log position {INT64_MAX}")
    return StatusUpload(
        status=status,
        upload_seq=_optional_int("upload_seq", raw.get("upload_seq"), minimum=1),
        # runs.producer_attempt is an int4 column (last_upload_seq and live_log_count are bigint).
        producer_attempt=_optional_int("producer_attempt", raw.get("producer_attempt"), maximum=INT32_MAX),
        live_node_progress=nodes,
        live_logs=logs,
        live_log_total_count=total,
        dataset_lifecycle_events=lifecycle,
        activity_observations=observations,
        terminal_log_replay=replay,
        # Neither of these two is stored: no column bound applies.
        last_checkpoint_at=_optional_int("last_checkpoint_at", raw.get("last_checkpoint_at"), maximum=None),
        dropped_one_shot_events=_optional_int(
            "dropped_one_shot_events", raw.get("dropped_one_shot_events"), maximum=None
        )
        or 0,
        pipeline_steps=steps,
        error=_error(raw.get("error")),
    )


def _pipeline_steps(value: object) -> tuple[str, ...]:
    """`pipeline_steps`: distinct node ids in pipeline order (absent or null: none)."""
    listed = _list("pipeline_steps", value)
    if len(listed) > MAX_PIPELINE_STEPS:
        raise InvalidInput("pipeline_steps", f"holds {len(listed)} steps; at most {MAX_PIPELINE_STEPS}")
    steps = tuple(validate.node_id(f"pipeline_steps[{i}]", step) for i, step in enumerate(listed))
    if len(set(steps)) != len(steps):
        repeated = next(step for i, step in enumerate(steps) if step in steps[:i])
        raise InvalidInput("pipeline_steps", f"names step {repeated!r} twice")
    return steps


def with_pipeline(
    snapshot: _NodeSnapshot, pipeline: Sequence[str], stored: Mapping[str, Any]
) -> _NodeSnapshot:
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


def _error(value: object) -> str | None:
    # Free text, like a log line: repaired and bounded, never refused.
    return validate.bounded_text("error", value, optional=True)


@dataclass(frozen=True)
class UploadKey:
    """What places an upload in its run's order, read before the rest of the body is validated."""

    upload_seq: int
    producer_attempt: int | None
    heartbeat: bool  # it carries `last_checkpoint_at`


def upload_key(run_id: str, body: object) -> UploadKey | None:
    """The upload's `(producer_attempt, upload_seq)` and whether it carries a heartbeat, read from
    the body's top level only; None when it has no `upload_seq` or when any field read here is
    malformed (the full validation then names that field, as it would have without this look).

    This is what lets a late duplicate be answered before the body is validated: the uploader
    resends an upload's unchanged bytes, so an upload whose `(producer_attempt, upload_seq)` the
    run already applied is answered as a duplicate whatever the rest of it holds, even if that
    rest would not validate.
    """
    if not isinstance(body, dict):
        return None
    body_run_id = body.get("run_id")
    if body_run_id is not None and body_run_id != run_id:
        return None
    try:
        seq = _optional_int("upload_seq", body.get("upload_seq"), minimum=1)
        attempt = _optional_int("producer_attempt", body.get("producer_attempt"), maximum=INT32_MAX)
        checkpoint = _optional_int("last_checkpoint_at", body.get("last_checkpoint_at"), maximum=None)
    except InvalidInput:
        return None
    if seq is None:
        return None
    return UploadKey(upload_seq=seq, producer_attempt=attempt, heartbeat=checkpoint is not None)


# -- the run's ingestion state and the plan ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class IngestState:
    """The ingestion columns of a runs row."""

    producer_attempt: int = 0
    last_upload_seq: int = 0
    live_log_count: int = 0
    live_node_progress: _NodeSnapshot = field(default_factory=dict)
    activity_watermarks: dict[str, float | int] = field(default_factory=dict)
    replay_digest: str | None = None


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


@dataclass(frozen=True)
class _LogSlice:
    """The result of placing lines on a positional channel."""

    lines: tuple[str, ...]  # to append, in order
    missing: int  # positions that were neither held nor delivered now
    delivered: int  # the channel's new count


def positional_slice(delivered: int, lines: Sequence[str], end: int) -> _LogSlice:
    """Place `lines` at positions `end - len(lines) + 1 … end` of a channel holding `delivered`."""
    if end <= delivered:
        return _LogSlice((), 0, delivered)
    start = end - len(lines)  # the position just before the first line
    missing = max(0, start - delivered)
    skip = max(0, delivered - start)
    return _LogSlice(tuple(lines[skip:]), missing, end)


def replay_digest(attempt: int, lines: Sequence[str]) -> str:
    """A digest of a terminal replay, bound to the attempt that sent it."""
    return hashlib.sha256(json.dumps([attempt, list(lines)]).encode()).hexdigest()


def replay_end(replay: LogReplay, live_log_total_count: int) -> int:
    """The channel position of the replay's last line (see the module docstring)."""
    if replay.total_count is not None:
        return replay.total_count
    if replay.dedupe_mode == "exact":
        return len(replay.lines)
    return live_log_total_count + len(replay.lines)


def _counts(node: Mapping[str, Any]) -> list[Any]:
    get = node.get  # a list comprehension over a bound method: the cheapest form of this hot loop
    return [get(key) for key in _COUNT_FIELDS]


def node_failed(node: Mapping[str, Any], run_status: str) -> bool:
    """Whether the node, uploaded with `run_status`, is a failed step (`steps.derived_state`)."""
    return steps.derived_state(node, run_status) == "failed"


def diff_steps(
    stored: Mapping[str, dict[str, Any]],
    uploaded: Mapping[str, dict[str, Any]],
    run_status: str,
    error: str | None = None,
) -> tuple[list[_Event], list[str], _NodeSnapshot]:
    """Step events for the uploaded nodes, the ids of the nodes that changed, and the new snapshot
    (each uploaded node stored with its state; `error` is the upload's terminal error)."""
    events: list[_Event] = []
    changed: list[str] = []
    # Node dicts are never changed in place (an uploaded node replaces its entry): a shallow copy.
    snapshot: _NodeSnapshot = dict(stored)
    for node_id, uploaded_node in uploaded.items():
        old = stored.get(node_id, {})
        # The upload's status speaks for the nodes completing in it, not those completed before.
        node = steps.with_state(uploaded_node, run_status if old.get("completed_at") is None else None, error)
        node_events: list[_Event] = []
        if node.get("started_at") is not None and old.get("started_at") is None:
            node_events.append({"type": "step.started", "node_id": node_id, "started_at": node["started_at"]})
        if _counts(node) != _counts(old):
            progress: _Event = {"type": "step.progress", "node_id": node_id}
            for key in (*_COUNT_FIELDS, *_TEXT_FIELDS):
                if node.get(key) is not None:
                    progress[key] = node[key]
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
    stored: Mapping[str, Any], snapshot: _NodeSnapshot, upload: StatusUpload
) -> tuple[list[_Event], _NodeSnapshot]:
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


def _log_events(placed: _LogSlice, delivered: int, attempt: int) -> list[_Event]:
    events: list[_Event] = []
    if placed.missing:
        events.append(
            {
                "type": "log.gap",
                "missing": placed.missing,
                "after_position": delivered,
                "producer_attempt": attempt,
            }
        )
    events.extend({"type": "log", "line": line} for line in placed.lines)
    return events


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
    events: list[_Event] = []
    delivered = state.live_log_count
    live = positional_slice(delivered, upload.live_logs, upload.live_log_total_count)
    events.extend(_log_events(live, delivered, attempt))
    delivered = live.delivered
    logs_appended, gap = len(live.lines), live.missing

    step_events, changed, snapshot = diff_steps(
        state.live_node_progress, upload.live_node_progress, upload.status, upload.error
    )
    snapshot = with_pipeline(snapshot, upload.pipeline_steps, state.live_node_progress)
    events.extend(step_events)
    settle_events, snapshot = settle_upload(state.live_node_progress, snapshot, upload)
    events.extend(settle_events)
    changed.extend(e["node_id"] for e in settle_events if e["node_id"] not in changed)
    events.extend({"type": "dataset.lifecycle", "event": dict(e)} for e in upload.dataset_lifecycle_events)
    activity_events, marks = newer_activities(state.activity_watermarks, upload.activity_observations)
    events.extend(activity_events)

    digest = state.replay_digest
    replay = upload.terminal_log_replay
    if replay is not None and replay.lines:
        new_digest = replay_digest(attempt, replay.lines)
        if not (replay.dedupe_mode == "exact" and new_digest == state.replay_digest):
            placed = positional_slice(
                delivered, replay.lines, replay_end(replay, upload.live_log_total_count)
            )
            events.extend(_log_events(placed, delivered, attempt))
            delivered = placed.delivered
            logs_appended += len(placed.lines)
            gap += placed.missing
        digest = new_digest

    new_state = IngestState(
        producer_attempt=attempt,
        last_upload_seq=upload.upload_seq if upload.upload_seq is not None else state.last_upload_seq,
        live_log_count=delivered,
        live_node_progress=snapshot,
        activity_watermarks=marks,
        replay_digest=digest,
    )
    return IngestPlan(
        duplicate=False,
        state=new_state,
        events=tuple(events),
        steps_changed=tuple(changed),
        logs_appended=logs_appended,
        log_gap=gap,
    )
