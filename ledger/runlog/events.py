"""Run events and terminal states: their types, validation, and the API <-> row shapes (pure).

An event on the wire is one flat snake_case dict, `{"seq", "type", "ts", ...type fields}`; in
`ledger.run_events` it is `(run_id, seq, type, ts, payload)` with `payload` holding the type
fields. `seq` and `ts` are assigned by the ledger, so input events may not carry them (nor any key
that would collide with them when flattened).

The four coordinator types (`status`, `log`, `progress`, `terminal`) have fixed fields and reject
unknown ones. The ingestion types (`step.*`, `dataset.lifecycle`, `activity.observed`, `log.gap`,
`reporter.*`) carry free-form JSON produced by the status ingestion (and by a run's end, which
settles its open steps: `step.completed|failed|cancelled|skipped`, see `ledger.runlog.steps`); only
their shape as a JSON object is checked (and `log.gap` must say how many lines are `missing`).
Counts and times may come as integral floats (3.0, as JavaScript sends them): JSON does not tell
them apart.

Free text (a `log` line, the `logs` of `status`/`progress`, a terminal `error`) is repaired: a NUL
or a lone surrogate becomes U+FFFD, so one bad byte a tool printed never costs the run its log.
Everything else (statuses, ids, names, JSON payloads) is refused when Postgres could not store it.

Nothing here touches the database: `ledger.runlog.store` runs the statements.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, cast

from ledger import shapes, validate
from ledger.errors import InvalidInput

__all__ = [
    "DEFAULT_LIST_LIMIT",
    "EVENT_TYPES",
    "INGESTION_TYPES",
    "MAX_LIST_LIMIT",
    "MAX_LIST_TIMEOUT_MS",
    "MAX_RUN_ID_LENGTH",
    "RESERVED_KEYS",
    "TERMINAL_STATUSES",
    "WATCHDOG_ERROR",
    "NewEvent",
    "RunId",
    "TerminalState",
    "check_limit",
    "clamp_timeout_ms",
    "cursor_expired",
    "event_to_wire",
    "notify_payload",
    "parse_after",
    "parse_event",
    "parse_events",
    "parse_notify_payload",
    "parse_terminal_state",
    "validate_new_run_id",
    "validate_run_id",
]

TERMINAL_STATUSES: Final = validate.TERMINAL_STATUSES
_COORDINATOR_TYPES: Final = ("status", "log", "progress", "terminal")
INGESTION_TYPES: Final = (
    "step.started",
    "step.progress",
    "step.completed",
    "step.failed",
    "step.cancelled",
    "step.skipped",
    "dataset.lifecycle",
    "activity.observed",
    "log.gap",
    # The reporter was interrupted (a signal) / a reporter resumed the run.
    "reporter.interrupted",
    "reporter.resumed",
)
EVENT_TYPES: Final = _COORDINATOR_TYPES + INGESTION_TYPES

# Keys the ledger assigns; an input event naming them would shadow them on the wire.
RESERVED_KEYS: Final = frozenset({"seq", "ts", "run_id"})

MAX_RUN_ID_LENGTH: Final = validate.MAX_RUN_ID_LENGTH
MAX_LIST_TIMEOUT_MS: Final = 30_000
DEFAULT_LIST_LIMIT: Final = 1000
MAX_LIST_LIMIT: Final = 10_000
WATCHDOG_ERROR: Final = "run watchdog: no progress; orchestrator presumed dead"

_ALLOWED_FIELDS: Final[dict[str, frozenset[str]]] = {
    "status": frozenset({"status", "logs"}),
    "log": frozenset({"line"}),
    "progress": frozenset(
        {"status", "logs", "active_node_id", "active_artifact_table_namespace", "updated_at"}
    ),
    "terminal": frozenset({"status", "result", "error", "total_rows", "duration_ms", "play_name"}),
}


class NewEvent(NamedTuple):
    """A validated event to append: its type and the payload stored with it.

    A named tuple rather than a frozen dataclass: a batch makes one per event, and a tuple is
    built several times faster."""

    type: str
    payload: dict[str, Any]

    @property
    def run_status(self) -> str | None:
        """The run status this event moves the run to (status, progress, terminal), if any."""
        if self.type in ("status", "progress", "terminal"):
            status = self.payload["status"]
            assert isinstance(status, str)
            return status
        return None


@dataclass(frozen=True, kw_only=True)
class TerminalState:
    """A requested terminal state (completed, failed or cancelled); `completed_at` is set by the ledger."""

    status: str
    result: Any = None
    error: str | None = None
    total_rows: int | None = None
    duration_ms: int | None = None
    play_name: str | None = None

    def payload(self) -> dict[str, Any]:
        """The `terminal` event's fields."""
        return {
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "total_rows": self.total_rows,
            "duration_ms": self.duration_ms,
            "play_name": self.play_name,
        }

    def agrees_with(self, stored: Mapping[str, Any]) -> bool:
        """Whether this request repeats the stored terminal state (first terminal wins).

        The same status with no field contradicting the stored one is a repeat: a retried finish
        may omit fields, but may not change the status, the error or the result.
        """
        if stored["status"] != self.status:
            return False
        for key, value in self.payload().items():  # the status among them, equal by now
            if value is not None and stored.get(key) != value:
                return False
        return True


# -- validation ------------------------------------------------------------------------------------


class RunId(str):
    """A run id already checked: `validate_run_id` (or `validate_new_run_id`) made it, and only they
    do. A run id is checked once, where it enters (the HTTP edge, a library call); the stores take a
    `RunId` as it is and check any other string."""

    __slots__ = ()


def validate_run_id(run_id: object, field: str = "run_id") -> RunId:
    """A usable run id (`validate.run_id`): not blank, at most 512 characters (it fits a NOTIFY
    payload), no `/` (it must stay addressable as one URL path segment), no control characters.
    A `RunId` was checked when it was made, and is returned as it is."""
    if type(run_id) is RunId:
        return run_id
    return RunId(validate.run_id(field, run_id))


def validate_new_run_id(run_id: object, field: str = "run_id") -> RunId:
    """The id of a run being created (`validate.new_run_id`: a run id, and not a URL dot segment).
    A `RunId` passed the run id's checks already; only the dot segments are left to refuse."""
    if type(run_id) is RunId and run_id not in validate.DOT_SEGMENTS:
        return run_id
    return RunId(validate.new_run_id(field, run_id))


def _run_status(value: object, field: str) -> str:
    status = validate.required_text(field, value, non_empty=True)
    if status in TERMINAL_STATUSES:
        raise InvalidInput(field, f"{status!r} is terminal: set the run's terminal state instead")
    return status


def _coordinator_payload(kind: str, event: Mapping[str, Any], field: str) -> dict[str, Any]:
    allowed = _ALLOWED_FIELDS[kind]
    for key in event:
        if key != "type" and key not in allowed:
            raise InvalidInput(f"{field}.{key}", f"is not a field of a {kind!r} event")
    if kind == "log":
        if "line" not in event:
            raise InvalidInput(f"{field}.line", "is required")
        # Free text: a NUL or a lone surrogate in a log line is repaired (U+FFFD), an over-long one
        # cut as a status upload's lines are (`validate.bounded_text`), never refused.
        return {"line": validate.bounded_text(f"{field}.line", event["line"])}
    if kind == "terminal":
        return parse_terminal_state(event, field).payload()
    payload: dict[str, Any] = {"status": _run_status(event.get("status"), f"{field}.status")}
    if "logs" in event:
        payload["logs"] = validate.log_line_list(f"{field}.logs", event["logs"])
    if kind == "progress":
        for key in ("active_node_id", "active_artifact_table_namespace"):
            if key in event:
                payload[key] = validate.text(f"{field}.{key}", event[key], optional=True)
        if "updated_at" in event:
            payload["updated_at"] = validate.integer(
                f"{field}.updated_at", event["updated_at"], optional=True, maximum=None, integral_float=True
            )
    return payload


def _ingestion_payload(kind: str, event: Mapping[str, Any], field: str) -> dict[str, Any]:
    payload = {key: value for key, value in event.items() if key != "type"}
    for key in payload:
        if not isinstance(key, str):
            raise InvalidInput(field, "field names must be strings")
    if kind == "log.gap":
        validate.integer(
            f"{field}.missing", payload.get("missing"), minimum=1, maximum=None, integral_float=True
        )
    validate.json_value(field, payload)
    return payload


def parse_event(event: object, field: str = "event") -> NewEvent:
    """Validate one input event (`{"type": ..., ...fields}`) or raise `InvalidInput` naming the field."""
    # `type(...) is dict` first: JSON bodies are dicts, and the ABC check costs more than the rest.
    if type(event) is not dict and not isinstance(event, Mapping):
        raise InvalidInput(field, "must be an object")
    kind = event.get("type")
    if not isinstance(kind, str):
        raise InvalidInput(f"{field}.type", "is required and must be a string")
    if kind not in EVENT_TYPES:
        raise InvalidInput(
            f"{field}.type", f"unknown event type {kind!r} (expected one of {list(EVENT_TYPES)})"
        )
    if not RESERVED_KEYS.isdisjoint(event):
        key = min(RESERVED_KEYS.intersection(event))
        raise InvalidInput(f"{field}.{key}", "is assigned by the ledger and may not be sent")
    if kind in _COORDINATOR_TYPES:
        return NewEvent(kind, _coordinator_payload(kind, event, field))
    return NewEvent(kind, _ingestion_payload(kind, event, field))


def parse_events(events: object, field: str = "events") -> list[NewEvent]:
    """Validate a batch: every event is checked, the first bad one rejects the whole batch.

    A `terminal` event ends a run, so it may only come last.
    """
    events = validate.items(field, events, "events")
    if not events:
        raise InvalidInput(field, "must not be empty")
    parsed = [parse_event(event, f"{field}[{index}]") for index, event in enumerate(events)]
    for index, event in enumerate(parsed[:-1]):
        if event.type == "terminal":
            raise InvalidInput(f"{field}[{index}]", "a terminal event must be the last of its batch")
    return parsed


def parse_terminal_state(body: Mapping[str, Any], field: str = "terminal") -> TerminalState:
    """Validate a terminal state request: a terminal status and in-range counts and texts."""
    prefix = f"{field}." if field else ""
    status = body.get("status")
    if status not in TERMINAL_STATUSES:
        raise InvalidInput(f"{prefix}status", f"must be one of {list(TERMINAL_STATUSES)}")
    return TerminalState(
        status=str(status),
        result=validate.json_value(f"{prefix}result", body.get("result")),
        error=validate.bounded_text(f"{prefix}error", body.get("error"), optional=True),
        # Both are bigint columns of ledger.runs.
        total_rows=validate.integer(
            f"{prefix}total_rows", body.get("total_rows"), optional=True, integral_float=True
        ),
        duration_ms=validate.integer(
            f"{prefix}duration_ms", body.get("duration_ms"), optional=True, integral_float=True
        ),
        play_name=validate.text(f"{prefix}play_name", body.get("play_name"), optional=True),
    )


# -- reading -----------------------------------------------------------------------------------------


def parse_after(after: object, field: str = "after") -> int | None:
    """The list cursor (`validate.cursor`): a seq of ASCII digits up to the bigint limit, `-1`
    (from the oldest retained event), or `now` (None)."""
    return validate.cursor(field, after)


def clamp_timeout_ms(timeout_ms: object) -> int:
    """The long-poll wait: 0 (do not wait) up to 30 s."""
    if not validate.is_int(timeout_ms):
        raise InvalidInput("timeout_ms", "must be an integer")
    return max(0, min(timeout_ms, MAX_LIST_TIMEOUT_MS))


def check_limit(limit: object) -> int:
    """The page size: 1 to 10,000."""
    if not validate.is_int(limit) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidInput("limit", f"must be an integer from 1 to {MAX_LIST_LIMIT}")
    return limit


def cursor_expired(after: int, first_seq: int) -> bool:
    """Whether a cursor points before the oldest retained event (events after it were trimmed).

    `-1` is the "from the oldest retained" sentinel, never expired.
    """
    return after >= 0 and after < first_seq - 1


# -- shapes ------------------------------------------------------------------------------------------


def event_to_wire(seq: int, kind: str, ts_ms: int, payload: Mapping[str, Any]) -> shapes.Event:
    """The flat API shape of a stored event."""
    # The payload's keys travel flat beside seq, type and ts (an open shape, see `shapes.Event`).
    return cast(shapes.Event, {"seq": seq, "type": kind, "ts": ts_ms, **payload})


def notify_payload(run_id: str, seq: int) -> str:
    """The NOTIFY payload: the run and a sequence number it reached, never the event body.

    `ledger.append_events` (`ledger/sql/append_events.sql`) writes it in SQL; the tests hold the two equal."""
    return json.dumps({"run_id": run_id, "seq": seq}, separators=(",", ":"))


def parse_notify_payload(payload: str) -> tuple[str, int] | None:
    """(run_id, seq) from a NOTIFY payload, or None for anything else on the channel."""
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    run_id, seq = data.get("run_id"), data.get("seq")
    if not isinstance(run_id, str) or not validate.is_int(seq):
        return None
    return run_id, seq
