"""Run events and terminal states: their types, validation, and the API <-> row shapes (pure).

An event on the wire is one flat snake_case dict, `{"seq", "type", "ts", ...type fields}`; in
`ledger.run_events` it is `(run_id, seq, type, ts, payload)` with `payload` holding the type
fields. `seq` and `ts` are assigned by the ledger, so input events may not carry them (nor any key
that would collide with them when flattened).

The four coordinator types (`status`, `log`, `progress`, `terminal`) have fixed fields and reject
unknown ones. The ingestion types (`step.*`, `dataset.lifecycle`, `activity.observed`, `log.gap`)
carry free-form JSON produced by the status ingestion; only their shape as a JSON object is checked
(and `log.gap` must say how many lines are `missing`).

Nothing here touches the database: `ledger.runlog` runs the statements.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ledger.errors import InvalidInput

TERMINAL_STATUSES: Final = ("completed", "failed", "cancelled")
COORDINATOR_TYPES: Final = ("status", "log", "progress", "terminal")
INGESTION_TYPES: Final = (
    "step.started",
    "step.progress",
    "step.completed",
    "dataset.lifecycle",
    "activity.observed",
    "log.gap",
)
EVENT_TYPES: Final = COORDINATOR_TYPES + INGESTION_TYPES

# Keys the ledger assigns; an input event naming them would shadow them on the wire.
RESERVED_KEYS: Final = frozenset({"seq", "ts", "run_id"})

MAX_RUN_ID_LENGTH: Final = 512
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


@dataclass(frozen=True)
class NewEvent:
    """A validated event to append: its type and the payload stored with it."""

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


@dataclass(frozen=True)
class TerminalState:
    """A requested terminal state (SPEC 2.4); `completed_at` is set by the ledger."""

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
        for key, value in self.payload().items():
            if key != "status" and value is not None and stored.get(key) != value:
                return False
        return True


# -- validation ------------------------------------------------------------------------------------


def validate_run_id(run_id: object, field: str = "run_id") -> str:
    """A usable run id: a non-empty string that fits a NOTIFY payload and a text column."""
    if not isinstance(run_id, str):
        raise InvalidInput(field, "must be a string")
    if not run_id.strip():
        raise InvalidInput(field, "must not be empty")
    if len(run_id) > MAX_RUN_ID_LENGTH:
        raise InvalidInput(field, f"must be at most {MAX_RUN_ID_LENGTH} characters")
    if "\x00" in run_id:
        raise InvalidInput(field, "must not contain NUL characters")
    return run_id


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_json(value: object, field: str) -> None:
    # Postgres jsonb refuses NaN/Infinity, NUL and lone surrogates; say so before writing anything.
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode()
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        raise InvalidInput(field, f"is not valid JSON ({exc})") from None
    if "\\u0000" in text:
        raise InvalidInput(field, "must not contain NUL characters")


def _str(value: object, field: str, *, optional: bool = False, non_empty: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidInput(field, "must be a string" + (" or null" if optional else ""))
    if non_empty and not value.strip():
        raise InvalidInput(field, "must not be empty")
    if "\x00" in value:
        raise InvalidInput(field, "must not contain NUL characters")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidInput(field, "must be valid Unicode (it holds a lone surrogate)") from None
    return value


def _non_negative_int(value: object, field: str) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or value < 0:  # type: ignore[operator]
        raise InvalidInput(field, "must be a non-negative integer or null")
    assert isinstance(value, int)
    return value


def _logs(value: object, field: str) -> list[str]:
    if not isinstance(value, list):
        raise InvalidInput(field, "must be a list of strings")
    for index, line in enumerate(value):
        _str(line, f"{field}[{index}]")
    return list(value)


def _run_status(value: object, field: str) -> str:
    status = _str(value, field, non_empty=True)
    assert status is not None
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
        return {"line": _str(event["line"], f"{field}.line")}
    if kind == "terminal":
        return parse_terminal_state(event, field).payload()
    payload: dict[str, Any] = {"status": _run_status(event.get("status"), f"{field}.status")}
    if "logs" in event:
        payload["logs"] = _logs(event["logs"], f"{field}.logs")
    if kind == "progress":
        for key in ("active_node_id", "active_artifact_table_namespace"):
            if key in event:
                payload[key] = _str(event[key], f"{field}.{key}", optional=True)
        if "updated_at" in event:
            payload["updated_at"] = _non_negative_int(event["updated_at"], f"{field}.updated_at")
    return payload


def _ingestion_payload(kind: str, event: Mapping[str, Any], field: str) -> dict[str, Any]:
    payload = {key: value for key, value in event.items() if key != "type"}
    for key in payload:
        if not isinstance(key, str):
            raise InvalidInput(field, "field names must be strings")
    if kind == "log.gap":
        missing = payload.get("missing")
        if not isinstance(missing, int) or isinstance(missing, bool) or missing <= 0:
            raise InvalidInput(f"{field}.missing", "must be a positive integer")
    _check_json(payload, field)
    return payload


def parse_event(event: object, field: str = "event") -> NewEvent:
    """Validate one input event (`{"type": ..., ...fields}`) or raise `InvalidInput` naming the field."""
    if not isinstance(event, Mapping):
        raise InvalidInput(field, "must be an object")
    kind = event.get("type")
    if not isinstance(kind, str):
        raise InvalidInput(f"{field}.type", "is required and must be a string")
    if kind not in EVENT_TYPES:
        raise InvalidInput(
            f"{field}.type", f"unknown event type {kind!r} (expected one of {list(EVENT_TYPES)})"
        )
    for key in RESERVED_KEYS:
        if key in event:
            raise InvalidInput(f"{field}.{key}", "is assigned by the ledger and may not be sent")
    if kind in COORDINATOR_TYPES:
        return NewEvent(kind, _coordinator_payload(kind, event, field))
    return NewEvent(kind, _ingestion_payload(kind, event, field))


def parse_events(events: object, field: str = "events") -> list[NewEvent]:
    """Validate a batch: every event is checked, the first bad one rejects the whole batch.

    A `terminal` event ends a run, so it may only come last.
    """
    if not isinstance(events, Sequence) or isinstance(events, str | bytes):
        raise InvalidInput(field, "must be a list of events")
    if not events:
        raise InvalidInput(field, "must not be empty")
    parsed = [parse_event(event, f"{field}[{index}]") for index, event in enumerate(events)]
    for index, event in enumerate(parsed[:-1]):
        if event.type == "terminal":
            raise InvalidInput(f"{field}[{index}]", "a terminal event must be the last of its batch")
    return parsed


def parse_terminal_state(body: Mapping[str, Any], field: str = "terminal") -> TerminalState:
    """Validate a terminal state request (SPEC 2.4)."""
    prefix = f"{field}." if field else ""
    status = body.get("status")
    if status not in TERMINAL_STATUSES:
        raise InvalidInput(f"{prefix}status", f"must be one of {list(TERMINAL_STATUSES)}")
    result = body.get("result")
    _check_json(result, f"{prefix}result")
    return TerminalState(
        status=str(status),
        result=result,
        error=_str(body.get("error"), f"{prefix}error", optional=True),
        total_rows=_non_negative_int(body.get("total_rows"), f"{prefix}total_rows"),
        duration_ms=_non_negative_int(body.get("duration_ms"), f"{prefix}duration_ms"),
        play_name=_str(body.get("play_name"), f"{prefix}play_name", optional=True),
    )


# -- reading -----------------------------------------------------------------------------------------


def parse_after(after: object) -> int | None:
    """The list cursor: an int >= -1 (`-1` = from the oldest retained event), or None for `now`."""
    if isinstance(after, str):
        text = after.strip()
        if text == "now":
            return None
        try:
            after = int(text)
        except ValueError:
            raise InvalidInput("after", "must be a sequence number, -1 or 'now'") from None
    if not _is_int(after) or after < -1:  # type: ignore[operator]
        raise InvalidInput("after", "must be a sequence number, -1 or 'now'")
    assert isinstance(after, int)
    return after


def clamp_timeout_ms(timeout_ms: object) -> int:
    """The long-poll wait: 0 (do not wait) up to 30 s."""
    if not _is_int(timeout_ms):
        raise InvalidInput("timeout_ms", "must be an integer")
    assert isinstance(timeout_ms, int)
    return max(0, min(timeout_ms, MAX_LIST_TIMEOUT_MS))


def check_limit(limit: object) -> int:
    """The page size: 1 to 10,000."""
    if not _is_int(limit) or not 1 <= limit <= MAX_LIST_LIMIT:  # type: ignore[operator]
        raise InvalidInput("limit", f"must be an integer from 1 to {MAX_LIST_LIMIT}")
    assert isinstance(limit, int)
    return limit


def cursor_expired(after: int, first_seq: int) -> bool:
    """Whether a cursor points before the oldest retained event (events after it were trimmed).

    `-1` is the "from the oldest retained" sentinel, never expired.
    """
    return after >= 0 and after < first_seq - 1


# -- shapes ------------------------------------------------------------------------------------------


def event_to_wire(seq: int, kind: str, ts_ms: int, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The flat API shape of a stored event."""
    return {"seq": seq, "type": kind, "ts": ts_ms, **payload}


def notify_payload(run_id: str, seq: int) -> str:
    """The NOTIFY payload: the run and a sequence number it reached, never the event body."""
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
    if not isinstance(run_id, str) or not isinstance(seq, int) or isinstance(seq, bool):
        return None
    return run_id, seq
