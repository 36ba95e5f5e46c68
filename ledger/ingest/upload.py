"""A reporter's status upload, read and checked: what `ledger.ingest.rules` decides on. No I/O here.

`upload_key(run_id, body)` reads what places an upload in its run's order (`upload_seq`,
`producer_attempt`, `last_checkpoint_at`, the body's `run_id`) from the body's top level, once and
before anything else, so a late duplicate is answered from it alone. `parse_upload(run_id, body,
key)` checks the rest into a `StatusUpload`, taking that key as read: `InvalidInput` names the
first bad field in the body's order, and nothing is applied. Every bound is `ledger.validate`'s;
free text (log lines, the run's error, a step's message) is repaired and cut, never refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ledger import validate
from ledger.errors import InvalidInput
from ledger.runlog.events import TERMINAL_STATUSES
from ledger.validate import INT32_MAX, INT64_MAX, LIVE_LOG_TAIL_LIMIT, MAX_PIPELINE_STEPS

__all__ = [
    "INTERRUPTED",
    "STEP_POSITION_KINDS",
    "TERMINAL_UPLOAD_STATUSES",
    "UPLOAD_STATUSES",
    "Interruption",
    "LogReplay",
    "NodeSnapshot",
    "StatusUpload",
    "UploadKey",
    "parse_node",
    "parse_upload",
    "replay_end",
    "upload_key",
]

# An upload's status: still running, interrupted (the reporter stopped and the run waits for one
# that resumes it), or one of the ledger's terminal statuses (which end the run).
TERMINAL_UPLOAD_STATUSES = TERMINAL_STATUSES
INTERRUPTED = "interrupted"
UPLOAD_STATUSES = ("running", INTERRUPTED, *TERMINAL_UPLOAD_STATUSES)
_REPLAY_MODES = ("exact", "positional")

# Per node id, its progress as stored in the run's snapshot.
NodeSnapshot = dict[str, dict[str, Any]]


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
    live_node_progress: NodeSnapshot = field(default_factory=dict)
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


def parse_node(name: str, value: object, stored: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One node's progress with only the known fields, `None`s dropped (unknown keys ignored).

    `stored` is the node's entry in the run's stored snapshot, if any: a field whose value is the
    stored one, JSON type for JSON type (`_repeats`), is taken as is. The stored snapshot holds
    only what this check returned (the ledger alone writes it, from checked uploads and the states
    it derives), and the check returns such a value unchanged, so it would return this one too."""
    raw = _object(name, value)
    node: dict[str, Any] = {}
    for key in validate.NODE_FIELDS:
        item = raw.get(key)
        if item is None:
            continue
        bound = _INT_FIELD_BOUNDS.get(key)
        # A plain int within the field's bounds is what the check would return, and so is the
        # value the node's stored entry holds for the field.
        if (bound is not None and type(item) is int and 0 <= item <= bound) or (
            stored is not None and _repeats(item, stored.get(key))
        ):
            node[key] = item
        else:
            node[key] = validate.node_field(f"{name}.{key}", key, item)
    return node


def _repeats(value: object, stored: object) -> bool:
    """Whether `value` is `stored` exactly: equal, and of the same JSON type at every level (`==`
    takes `1` for `1.0` or `True`, and any object that says it is equal)."""
    if type(value) is not type(stored) or value != stored:
        return False
    # Equal containers have the same keys and lengths: what is left to see is every item's type.
    pending: list[tuple[Any, Any]] = [(value, stored)]
    while pending:
        item, twin = pending.pop()
        children = item.items() if type(item) is dict else enumerate(item) if type(item) is list else ()
        for key, child in children:
            if (type(item) is dict and type(key) is not str) or type(child) is not type(twin[key]):
                return False
            pending.append((child, twin[key]))
    return True


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


def replay_end(replay: LogReplay, live_log_total_count: int) -> int:
    """The channel position of the replay's last line (`ledger.ingest.rules`' docstring says how a replay
    is placed)."""
    if replay.total_count is not None:
        return replay.total_count
    if replay.dedupe_mode == "exact":
        return len(replay.lines)
    return live_log_total_count + len(replay.lines)


def parse_upload(
    run_id: str, body: object, key: UploadKey | None = None, stored: Mapping[str, Any] | None = None
) -> StatusUpload:
    """Validate a status upload; `InvalidInput` names the first bad field and nothing is applied.

    The URL's `run_id` wins; a body `run_id` that differs is an error. Unknown top-level fields are
    ignored (forward compatibility with newer reporters). `key` is the body's key as `upload_key`
    read it already (read here when not given): its fields are not checked again. `stored` is the
    run's stored progress snapshot: what a node repeats of its stored entry is not checked again
    (`parse_node`).
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
    nodes: NodeSnapshot = {}
    for node_id, node in progress.items():
        # A node id the stored snapshot holds was checked when it was stored.
        if stored is None or type(node_id) is not str or node_id not in stored:
            try:
                validate.node_id("live_node_progress", node_id)
            except InvalidInput:
                raise InvalidInput(
                    "live_node_progress", "node ids must be non-empty strings without NUL or lone surrogates"
                ) from None
        entry = None if stored is None else stored.get(node_id)
        nodes[node_id] = parse_node(
            f"live_node_progress.{node_id}", node, entry if type(entry) is dict else None
        )
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
