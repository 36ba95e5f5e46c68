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
    "INTERRUPTED",
    "STEP_POSITION_KINDS",
    "TERMINAL_UPLOAD_STATUSES",
    "UPLOAD_STATUSES",
    "IngestPlan",
    "IngestState",
    "Interruption",
    "LogReplay",
    "LogSource",
    "StatusUpload",
    "UploadKey",
    "diff_steps",
    "fence_attempt",
    "in_runner_order",
    "interruption_events",
    "is_late_duplicate",
    "newer_activities",
    "parse_node",
    "parse_upload",
    "place_logs",
    "place_steps",
    "plan_upload",
    "replay_digest",
    "replay_end",
    "settle_upload",
    "upload_key",
    "with_pipeline",
]

# An upload's status: still running, interrupted (the reporter stopped and the run waits for one
# that resumes it), or one of the ledger's terminal statuses (which end the run).
TERMINAL_UPLOAD_STATUSES = TERMINAL_STATUSES
INTERRUPTED = "interrupted"
UPLOAD_STATUSES = ("running", INTERRUPTED, *TERMINAL_UPLOAD_STATUSES)
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


@dataclass(frozen=True)
class Interruption:
    """`interruption`: why an ``interrupted`` upload's reporter stopped (both plain text)."""

    reason: str | None = None
    signal: str | None = None


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
    interruption: Interruption | None = None  # with the interrupted status
    # Per node, the attempt's log count when each of its transitions happened (`step_positions`).
    step_positions: dict[str, dict[str, int]] = field(default_factory=dict)


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


def parse_upload(run_id: str, body: object, key: UploadKey | None = None) -> StatusUpload:
    """Validate a status upload; `InvalidInput` names the first bad field and nothing is applied.

    The URL's `run_id` wins; a body `run_id` that differs is an error. Unknown top-level fields are
    ignored (forward compatibility with newer reporters). `key` is the body's key as `upload_key`
    read it already (read here when not given): its fields are not checked again.
    """
    raw = _object("body", body)
    if key is None:
        key = upload_key(run_id, raw)
    if key.foreign_run_id is not None:
        raise key.foreign_run_id
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
    # The key's fields come next in the body's order: the first bad one of them is named here.
    if key.malformed is not None:
        raise key.malformed
    return StatusUpload(
        status=status,
        upload_seq=key.upload_seq,
        producer_attempt=key.producer_attempt,
        live_node_progress=nodes,
        live_logs=logs,
        live_log_total_count=total,
        dataset_lifecycle_events=lifecycle,
        activity_observations=observations,
        terminal_log_replay=replay,
        last_checkpoint_at=key.last_checkpoint_at,
        # Not stored: no column bound applies.
        dropped_one_shot_events=_optional_int(
            "dropped_one_shot_events", raw.get("dropped_one_shot_events"), maximum=None
        )
        or 0,
        pipeline_steps=steps,
        error=_error(raw.get("error")),
        interruption=_interruption(raw.get("interruption")),
        step_positions=_step_positions(raw.get("step_positions")),
    )


def _interruption(value: object) -> Interruption | None:
    if value is None:
        return None
    raw = _object("interruption", value)
    reason = validate.free_text("interruption.reason", raw.get("reason"), optional=True)
    signal = validate.free_text("interruption.signal", raw.get("signal"), optional=True)
    return Interruption(
        reason=None if reason is None else validate.truncate_line(reason),
        signal=None if signal is None else validate.truncate_line(signal),
    )


# What `step_positions` may say of a node: where its start, its last change of counts and its
# settlement happened on the attempt's log channel.
STEP_POSITION_KINDS = ("started", "progress", "settled")


def _step_positions(value: object) -> dict[str, dict[str, int]]:
    """`step_positions`: `{node_id: {started?, progress?, settled?}}`, each a log count (absent or
    null: none)."""
    if value is None:
        return {}
    raw = _object("step_positions", value)
    positions: dict[str, dict[str, int]] = {}
    for node_id, marks in raw.items():
        validate.node_id("step_positions", node_id)
        node = _object(f"step_positions.{node_id}", marks)
        positions[node_id] = {
            kind: _int(f"step_positions.{node_id}.{kind}", node[kind])
            for kind in STEP_POSITION_KINDS
            if node.get(kind) is not None
        }
    return positions


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


@dataclass(frozen=True, kw_only=True)
class UploadKey:
    """What places an upload in its run's order, read from the body's top level and checked once,
    before the rest of the body: `upload_seq`, `producer_attempt`, `last_checkpoint_at` (whether it
    carries a heartbeat) and whether its `run_id` is the URL's.

    A field that does not hold is kept as its refusal, for `parse_upload` to raise where the body's
    order reaches it, so the first bad field of the whole body is the one named: `foreign_run_id`
    when the body names another run, `malformed` for the first of the three fields (in that order)
    that is not one; a key with a malformed field holds none of them."""

    upload_seq: int | None = None
    producer_attempt: int | None = None
    last_checkpoint_at: int | None = None
    foreign_run_id: InvalidInput | None = None
    malformed: InvalidInput | None = None

    @property
    def heartbeat(self) -> bool:
        """Whether the upload carries `last_checkpoint_at`: its producer is alive."""
        return self.last_checkpoint_at is not None

    @property
    def places(self) -> bool:
        """Whether the key places the upload in its run's order: it has an `upload_seq`, names no
        other run and every field read holds (else the full validation decides)."""
        return self.upload_seq is not None and self.foreign_run_id is None and self.malformed is None


def upload_key(run_id: str, body: object) -> UploadKey:
    """The upload's key (`UploadKey`), read from the body's top level only; an empty one when the
    body is not an object (the full validation names it).

    This is what lets a late duplicate be answered before the body is validated: the uploader
    resends an upload's unchanged bytes, so an upload whose `(producer_attempt, upload_seq)` the
    run already applied is answered as a duplicate whatever the rest of it holds, even if that
    rest would not validate.
    """
    if not isinstance(body, dict):
        return UploadKey()
    body_run_id = body.get("run_id")
    foreign = None
    if body_run_id is not None and body_run_id != run_id:
        foreign = InvalidInput("run_id", f"{body_run_id!r} does not match the run {run_id!r} in the URL")
    try:
        seq = _optional_int("upload_seq", body.get("upload_seq"), minimum=1)
        # runs.producer_attempt is an int4 column (last_upload_seq and live_log_count are bigint).
        attempt = _optional_int("producer_attempt", body.get("producer_attempt"), maximum=INT32_MAX)
        # Not stored: no column bound applies.
        checkpoint = _optional_int("last_checkpoint_at", body.get("last_checkpoint_at"), maximum=None)
    except InvalidInput as refused:
        return UploadKey(foreign_run_id=foreign, malformed=refused)
    return UploadKey(
        upload_seq=seq, producer_attempt=attempt, last_checkpoint_at=checkpoint, foreign_run_id=foreign
    )


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
